#include "cache/cache_entry.h"

#include <doctest/doctest.h>

#include "cache_fixtures.h"
#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <span>
#include <unistd.h>

using namespace cudaq_rt;
using namespace cache_fixtures;
namespace fs = std::filesystem;

namespace {

uint64_t le_at(const std::vector<uint8_t> &b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

} // namespace

// The cubin as the zstd command-line tool (an independent decoder) reads a payload back.
static std::vector<uint8_t> unzstd(const fs::path &dir, std::span<const uint8_t> payload) {
  const fs::path in = dir / "payload.zst", out = dir / "payload";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char *>(payload.data()), payload.size());
  }
  REQUIRE(std::system(("zstd -q -d -f -o '" + out.string() + "' '" + in.string() + "'").c_str()) ==
          0);
  std::ifstream f(out, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST_CASE("an entry's header is laid out as cache_entry.cpp says, the cubin one zstd frame") {
  ScratchDir tmp;
  Digest key = sha256(std::string_view("key"));
  LinkMetadata md;
  md.arch = "sm_90";
  md.nvjitlink_version = "13.0";
  const std::string metadata =
      "{\"arch\":\"sm_90\",\"created\":0,\"info_log\":\"\",\"inputs\":[],"
      "\"link_time_ms\":0.0,\"nvjitlink_version\":\"13.0\",\"options\":[]}";
  CHECK(md.to_json().dump() == metadata);
  std::vector<uint8_t> cubin(20000);
  for (size_t i = 0; i < cubin.size(); ++i) // compressible, as code is
    cubin[i] = static_cast<uint8_t>((i % 97) * 3);
  std::vector<uint8_t> b = encode_cache_entry(key, cubin, md);
  const uint64_t payload = le_at(b, 56, 8);
  REQUIRE(b.size() == 128 + metadata.size() + payload);
  CHECK(payload < cubin.size() / 4);
  CHECK(std::string(b.begin(), b.begin() + 8) == std::string("CQRTLNK\0", 8));
  CHECK(le_at(b, 8, 4) == 2);  // entry format version
  CHECK(le_at(b, 12, 4) == 0); // no signatures
  CHECK(std::memcmp(b.data() + 16, key.bytes.data(), 32) == 0);
  CHECK(le_at(b, 48, 8) == metadata.size());
  CHECK(std::memcmp(b.data() + 64, sha256(cubin).bytes.data(), 32) == 0); // of the cubin itself
  Sha256 h;
  h.update(std::span<const uint8_t>(b.data(), 96));
  h.update(metadata);
  CHECK(std::memcmp(b.data() + 96, h.finish().bytes.data(), 32) == 0);
  CHECK(std::string(b.begin() + 128, b.begin() + 128 + metadata.size()) == metadata);
  CHECK(unzstd(tmp.path, std::span(b).subspan(128 + metadata.size())) == cubin);
  auto back =
      decode_cache_entry(std::string_view(reinterpret_cast<const char *>(b.data()), b.size()), key);
  REQUIRE(back);
  CHECK(back->cubin == cubin);
}

TEST_CASE("an entry of format 1 (the cubin uncompressed) is still read, and checked") {
  Digest key = sha256(std::string_view("old"));
  const std::string metadata =
      "{\"arch\":\"sm_80\",\"created\":0,\"info_log\":\"\",\"inputs\":[],"
      "\"link_time_ms\":1.5,\"nvjitlink_version\":\"13.0\",\"options\":[]}";
  const std::vector<uint8_t> cubin = {0x7f, 'E', 'L', 'F', 1, 2, 3};
  // Written from the layout alone, as the version before compression wrote it.
  std::vector<uint8_t> b(128);
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  std::memcpy(b.data(), "CQRTLNK\0", 8);
  put(8, 1, 4);
  put(12, 0, 4);
  std::memcpy(b.data() + 16, key.bytes.data(), 32);
  put(48, metadata.size(), 8);
  put(56, cubin.size(), 8);
  std::memcpy(b.data() + 64, sha256(cubin).bytes.data(), 32);
  Sha256 h;
  h.update(std::span<const uint8_t>(b.data(), 96));
  h.update(metadata);
  std::memcpy(b.data() + 96, h.finish().bytes.data(), 32);
  b.insert(b.end(), metadata.begin(), metadata.end());
  b.insert(b.end(), cubin.begin(), cubin.end());
  auto as_file = [](const std::vector<uint8_t> &v) {
    return std::string_view(reinterpret_cast<const char *>(v.data()), v.size());
  };
  auto entry = decode_cache_entry(as_file(b), key);
  REQUIRE(entry);
  CHECK(entry->cubin == cubin);
  CHECK(entry->metadata.link_time_ms == 1.5);
  b.back() ^= 1; // the cubin's digest still guards it
  CHECK_FALSE(decode_cache_entry(as_file(b), key));
}

TEST_CASE("a zstd payload that is not one whole frame of the cubin is a miss") {
  Digest key = sha256(std::string_view("frame"));
  LinkMetadata md;
  md.arch = "sm_90";
  std::vector<uint8_t> cubin(5000, 0x42);
  const std::vector<uint8_t> good = encode_cache_entry(key, cubin, md);
  const size_t payload_at = good.size() - le_at(good, 56, 8);
  auto decodes = [&](std::vector<uint8_t> b) {
    return decode_cache_entry(std::string_view(reinterpret_cast<const char *>(b.data()), b.size()),
                              key)
        .has_value();
  };
  CHECK(decodes(good));
  std::vector<uint8_t> flipped = good;
  flipped[payload_at + 5] ^= 0x10; // the frame's content size: another size than the cubin's
  CHECK_FALSE(decodes(flipped));
  std::vector<uint8_t> body = good;
  body[body.size() - 2] ^= 0x01; // inside the compressed block or its checksum
  CHECK_FALSE(decodes(body));
}

TEST_CASE("metadata keeps the form a key names, and refuses what it cannot read") {
  const std::vector<std::string> options = {"-arch=sm_90", "-lto"};
  const std::vector<Digest> inputs = {input(1), input(2), input(3)};
  LinkKey per_tu = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs,
                                 LinkedForm{LtoMode::per_tu}, {2, 1});
  LinkKey object = LinkKey::make(arch("sm_90"), options, fake_nvjitlink(), inputs,
                                 LinkedForm{LtoMode::per_tu, true});
  CHECK(LinkMetadata::from_key(object).form.text() == "object");
  auto back = LinkMetadata::from_json(LinkMetadata::from_key(per_tu).to_json());
  REQUIRE(back);
  CHECK(back->form == LinkedForm{LtoMode::per_tu});

  // A module linked whole stores no mode, as entries did before per-TU mode.
  nlohmann::json whole = metadata_for(key_for(1)).to_json();
  CHECK_FALSE(whole.contains("mode"));
  CHECK(LinkMetadata::from_json(whole)->form == LinkedForm{});
  for (const char *field :
       {"arch", "options", "nvjitlink_version", "inputs", "info_log", "link_time_ms", "created"}) {
    CAPTURE(field);
    nlohmann::json j = whole;
    j.erase(field);
    CHECK_FALSE(LinkMetadata::from_json(j));
  }
  nlohmann::json bad = whole;
  bad["mode"] = "whole";
  CHECK_FALSE(LinkMetadata::from_json(bad));
  bad = whole;
  bad["inputs"] = {"sha256:not hex"};
  CHECK_FALSE(LinkMetadata::from_json(bad));
  bad = whole;
  bad["created"] = 1.5;
  CHECK_FALSE(LinkMetadata::from_json(bad));
}

TEST_CASE("an entry round-trips with its metadata") {
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path / "cache");
  LinkKey key = key_for(1, {"-arch=sm_90", "-lto", "-kernels-used=k"});
  CHECK_FALSE(cache.get(key));
  std::vector<uint8_t> cubin = cubin_for(1, 4321);
  REQUIRE(cache.put(key, cubin, metadata_for(key)));

  fs::path path = cache.entry_path(key.digest);
  CHECK(path == tmp.path / "cache" / "v1" / key.digest.hex().substr(0, 2) / key.digest.hex());
  CHECK(fs::is_regular_file(path));

  auto entry = cache.get(key);
  REQUIRE(entry);
  CHECK(entry->cubin == cubin);
  CHECK(entry->metadata.arch == "sm_90");
  CHECK(entry->metadata.options == key.options);
  CHECK(entry->metadata.nvjitlink_version == "13.0");
  CHECK(entry->metadata.inputs == key.inputs);
  CHECK(entry->metadata.info_log == "ptxas info    : Used 8 registers");
  CHECK(entry->metadata.link_time_ms == 24.5);
  CHECK(entry->metadata.created == 1700000000);
  CHECK(LinkMetadata::from_json(entry->metadata.to_json())->inputs == key.inputs);

  CHECK_FALSE(cache.get(key_for(2)));
  // An empty cubin is a valid entry, not a corrupt one.
  LinkKey empty = key_for(3);
  REQUIRE(cache.put(empty, {}, metadata_for(empty)));
  auto got = cache.get(empty);
  REQUIRE(got);
  CHECK(got->cubin.empty());
}

TEST_CASE("a corrupt entry is a miss and is removed") {
  struct Damage {
    const char *name;
    std::function<std::string(std::string, const std::string &other)> apply;
  };
  auto flip = [](size_t at) {
    return [at](std::string s, const std::string &) {
      s[at] ^= 0x10;
      return s;
    };
  };
  const std::vector<Damage> damages = {
      {"truncated by one byte", [](std::string s, auto &) { return s.substr(0, s.size() - 1); }},
      {"truncated inside the header", [](std::string s, auto &) { return s.substr(0, 100); }},
      {"one byte too many", [](std::string s, auto &) { return s + '\0'; }},
      {"zero length", [](std::string, auto &) { return std::string(); }},
      {"garbage", [](std::string s, auto &) { return std::string(s.size(), '\x5a'); }},
      {"another key's entry", [](std::string, const std::string &other) { return other; }},
      {"flipped magic", flip(0)},
      {"flipped format version", flip(8)},
      {"flipped reserved word", flip(12)},
      {"flipped key", flip(20)},
      {"flipped metadata length", flip(48)},
      {"flipped cubin size", flip(56)},
      {"flipped cubin digest", flip(64)},
      {"flipped header digest", flip(127)},
      {"flipped metadata byte", flip(140)},
      {"flipped payload byte",
       [](std::string s, auto &) {
         s[s.size() - 1000] ^= 1;
         return s;
       }},
      {"flipped last payload byte",
       [](std::string s, auto &) {
         s.back() ^= 0x80;
         return s;
       }},
  };
  ScratchDir tmp;
  LinkCache cache = open_cache(tmp.path);
  put_ok(cache, 99);
  const std::string other = slurp(cache.entry_path(key_for(99).digest));
  uint64_t corrupt = 0;
  for (const Damage &d : damages) {
    const std::string name = d.name;
    CAPTURE(name);
    LinkKey key = key_for(1);
    put_ok(cache, 1);
    fs::path path = cache.entry_path(key.digest);
    REQUIRE(cache.get(key));
    spit(path, d.apply(slurp(path), other));
    CHECK_FALSE(cache.get(key));
    CHECK_FALSE(fs::exists(path));
    CHECK(stats_of(cache).corrupt == ++corrupt);
  }
  CHECK(cache.get(key_for(99)));
}

TEST_CASE("an entry on the server is the local entry codec's bytes") {
  Digest key = sha256(std::string_view("key"));
  LinkMetadata md;
  md.arch = "sm_90";
  md.nvjitlink_version = "13.0";
  std::vector<uint8_t> cubin = {1, 2, 3, 4};
  std::vector<uint8_t> bytes = encode_cache_entry(key, cubin, md);
  std::string file(bytes.begin(), bytes.end());
  auto back = decode_cache_entry(file, key);
  REQUIRE(back);
  CHECK(back->cubin == cubin);
  CHECK_FALSE(back->remote);
  CHECK_FALSE(decode_cache_entry(file, sha256(std::string_view("other key"))));
  CHECK_FALSE(decode_cache_entry(file.substr(0, file.size() - 1), key));
  CHECK_FALSE(decode_cache_entry("<html>It works</html>", key));
}

TEST_CASE("a signed entry carries its signer's id and a signature over key and cubin digest") {
  auto signer = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  auto other = SigningKey::from_pem(test_keys::rfc8032_2_private, "k2");
  REQUIRE(signer);
  REQUIRE(other);
  Digest key = sha256(std::string_view("key"));
  LinkMetadata md;
  md.arch = "sm_90";
  md.nvjitlink_version = "13.0";
  std::vector<uint8_t> cubin = {1, 2, 3, 4};
  std::vector<uint8_t> unsigned_bytes = encode_cache_entry(key, cubin, md);
  std::vector<uint8_t> b = encode_cache_entry(key, cubin, md, &*signer);
  REQUIRE(b.size() == unsigned_bytes.size() + 96);
  CHECK(le_at(b, 12, 4) == 96);
  const uint8_t *sig = b.data() + b.size() - 96;
  CHECK(std::memcmp(sig, signer->id().digest.bytes.data(), 32) == 0);
  std::string message = std::string("cudaq-rt cache entry signature v1") + '\0' +
                        std::string(key.bytes.begin(), key.bytes.end()) +
                        std::string(reinterpret_cast<const char *>(sha256(cubin).bytes.data()), 32);
  CHECK(cache_entry_signature_message(key, sha256(cubin)) == message);
  Signature s{};
  std::memcpy(s.data(), sig + 32, 64);
  CHECK(signer->public_key().verify(as_bytes(message), s));

  TrustedKeys mine, theirs;
  mine.add(signer->public_key());
  theirs.add(other->public_key());
  std::string file(b.begin(), b.end());
  auto back = decode_cache_entry(file, key);
  REQUIRE(back);
  CHECK(back->cubin == cubin);
  REQUIRE(back->signatures.size() == 1);
  CHECK(back->signed_by(mine, key));
  CHECK_FALSE(back->signed_by(theirs, key));
  // Checked for the key the entry is used under: the same signature says nothing of another.
  CHECK_FALSE(back->signed_by(mine, sha256(std::string_view("other key"))));

  // An unsigned entry decodes as before and is signed by nobody.
  auto plain = decode_cache_entry(std::string(unsigned_bytes.begin(), unsigned_bytes.end()), key);
  REQUIRE(plain);
  CHECK(plain->signatures.empty());
  CHECK_FALSE(plain->signed_by(mine, key));

  // A flipped bit in the signature: still a whole entry, but no longer signed by the key.
  std::string flipped = file;
  flipped[flipped.size() - 10] ^= 0x04;
  auto forged = decode_cache_entry(flipped, key);
  REQUIRE(forged);
  CHECK_FALSE(forged->signed_by(mine, key));

  // The signatures' length must fit the file and be whole records.
  auto with_length = [&](uint32_t n) {
    std::string f = file;
    for (int i = 0; i < 4; ++i)
      f[12 + i] = static_cast<char>(n >> (8 * i));
    return f;
  };
  CHECK_FALSE(decode_cache_entry(with_length(95), key));
  CHECK_FALSE(decode_cache_entry(with_length(192), key));
  CHECK_FALSE(decode_cache_entry(file.substr(0, file.size() - 1), key));
}

TEST_CASE("a local entry (format 3) holds the cubin as it is under its chunked digest") {
  Digest key = sha256(std::string_view("local"));
  LinkMetadata md;
  md.arch = "sm_90";
  md.nvjitlink_version = "13.5";
  std::vector<uint8_t> cubin(chunked_sha256_chunk + 4096); // two chunks
  for (size_t i = 0; i < cubin.size(); ++i)
    cubin[i] = static_cast<uint8_t>(i % 251);
  auto signer = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  REQUIRE(signer);
  std::vector<uint8_t> b = encode_cache_entry(key, cubin, md, &*signer, EntryPayload::plain);
  CHECK(le_at(b, 8, 4) == 3);
  const uint64_t payload = le_at(b, 56, 8);
  CHECK(payload == cubin.size());
  const size_t payload_at = b.size() - 96 - payload;
  CHECK(std::equal(cubin.begin(), cubin.end(), b.begin() + payload_at));
  CHECK(std::memcmp(b.data() + 64, chunked_sha256(cubin).bytes.data(), 32) == 0);
  // Read back from a file descriptor as a hit reads it, and from memory as a GET does.
  ScratchDir tmp;
  const fs::path file = tmp.path / "entry";
  {
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char *>(b.data()), b.size());
  }
  auto read_back = [&](const std::vector<uint8_t> &bytes) {
    {
      std::ofstream f(file, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    }
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    auto e = read_cache_entry(fd, bytes.size(), key);
    ::close(fd);
    CHECK(e.has_value() ==
          decode_cache_entry(
              std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()), key)
              .has_value());
    return e;
  };
  auto e = read_back(b);
  REQUIRE(e);
  CHECK(e->cubin == cubin);
  // The signature signs the digest the header holds: the chunked one.
  TrustedKeys trusted;
  trusted.add(signer->public_key());
  CHECK(e->signed_by(trusted, key));
  // A flipped byte in either chunk is a miss, and so is a header digest that is the plain SHA-256
  // (the digest a format 1 entry would hold).
  for (size_t at : {payload_at + 10, payload_at + chunked_sha256_chunk + 100}) {
    std::vector<uint8_t> bad = b;
    bad[at] ^= 0x01;
    CHECK_FALSE(read_back(bad));
  }
  std::vector<uint8_t> flat = b;
  std::memcpy(flat.data() + 64, sha256(cubin).bytes.data(), 32);
  Sha256 h;
  h.update(std::span<const uint8_t>(flat.data(), 96));
  h.update(std::string_view(reinterpret_cast<const char *>(flat.data()) + 128, le_at(flat, 48, 8)));
  std::memcpy(flat.data() + 96, h.finish().bytes.data(), 32);
  CHECK_FALSE(read_back(flat));
  // A file shorter than its header says (truncated after it was opened, or a lie) is a miss.
  std::vector<uint8_t> shorter(b.begin(), b.end() - 1);
  CHECK_FALSE(read_back(shorter));
}

TEST_CASE("a deferred hit reads the cubin into the caller's buffer and checks it there") {
  Digest key = sha256(std::string_view("deferred"));
  LinkMetadata md;
  md.arch = "sm_90";
  std::vector<uint8_t> cubin(3000);
  for (size_t i = 0; i < cubin.size(); ++i)
    cubin[i] = static_cast<uint8_t>(i * 7);
  ScratchDir tmp;
  const fs::path file = tmp.path / "entry";
  auto write = [&](const std::vector<uint8_t> &bytes) {
    std::ofstream f(file, std::ios::binary);
    f.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  };
  auto open_deferred = [&](const std::vector<uint8_t> &bytes) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    const std::string path = file.string();
    auto e = read_cache_entry(fd, bytes.size(), key, &path);
    ::close(fd); // the entry keeps a descriptor of its own
    return e;
  };
  // A remote entry's format (2, compressed) is read whole as before.
  const std::vector<uint8_t> remote = encode_cache_entry(key, cubin, md);
  write(remote);
  auto whole = open_deferred(remote);
  REQUIRE(whole);
  CHECK_FALSE(whole->deferred);
  CHECK(whole->cubin == cubin);

  const std::vector<uint8_t> local =
      encode_cache_entry(key, cubin, md, nullptr, EntryPayload::plain);
  write(local);
  auto e = open_deferred(local);
  REQUIRE(e);
  REQUIRE(e->deferred);
  CHECK(e->cubin.empty());
  CHECK(e->deferred->size() == cubin.size());
  std::vector<uint8_t> out(cubin.size());
  CHECK(e->deferred->read_into(out.data()));
  CHECK(out == cubin);
  // Written into in place after the hit was opened (same file): the read is refused and the
  // entry removed.
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(local.size() - 10));
    f.put(static_cast<char>(local[local.size() - 10] ^ 0x01));
  }
  CHECK_FALSE(e->deferred->read_into(out.data()));
  CHECK_FALSE(fs::exists(file));
  // A header that does not check out is no hit at all, deferred or not.
  std::vector<uint8_t> bad_header = local;
  bad_header[130] ^= 0x01;
  write(bad_header);
  CHECK_FALSE(open_deferred(bad_header));
}

TEST_CASE("a remote entry's small frame of 256 MiB that is not its cubin is a miss, never held") {
  // A whole format 2 entry for the key whose payload is a few KiB of zstd that declare 256 MiB of
  // zeros (made by the zstd tool from a sparse file, so that this process never holds them),
  // under another cubin's digest: decoding it must cost no memory.
  Digest key = sha256(std::string_view("bomb"));
  const std::string metadata =
      "{\"arch\":\"sm_90\",\"created\":0,\"info_log\":\"\",\"inputs\":[],"
      "\"link_time_ms\":1.0,\"nvjitlink_version\":\"13.0\",\"options\":[]}";
  const std::string frame = unit_files::command_output(
      "f=$(mktemp) && truncate -s 268435456 \"$f\" && zstd -q -c \"$f\"; rm -f \"$f\"");
  REQUIRE(frame.size() < 64 * 1024);
  std::vector<uint8_t> b(128);
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      b[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  std::memcpy(b.data(), "CQRTLNK\0", 8);
  put(8, 2, 4);
  put(12, 0, 4);
  std::memcpy(b.data() + 16, key.bytes.data(), 32);
  put(48, metadata.size(), 8);
  put(56, frame.size(), 8);
  std::memcpy(b.data() + 64, sha256(std::string_view("another cubin")).bytes.data(), 32);
  Sha256 h;
  h.update(std::span<const uint8_t>(b.data(), 96));
  h.update(metadata);
  std::memcpy(b.data() + 96, h.finish().bytes.data(), 32);
  b.insert(b.end(), metadata.begin(), metadata.end());
  b.insert(b.end(), frame.begin(), frame.end());
  auto peak_kib = [] {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmHWM:", 0) == 0)
        return std::stoull(line.substr(6));
    return 0ull;
  };
  const auto before = peak_kib();
  CHECK_FALSE(decode_cache_entry(
      std::string_view(reinterpret_cast<const char *>(b.data()), b.size()), key));
  CHECK(peak_kib() - before < 16 * 1024); // holding the 256 MiB would have raised it
}
