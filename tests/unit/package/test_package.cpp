#include "package/package.h"

#include <doctest/doctest.h>

#include "base/zstd.h"
#include "blob_sources.h"
#include "scratch_dir.h"
#include "unit_files.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using unit_files::entries;
using unit_files::read_file;
using unit_files::write_file;

namespace {

// A fatbin container with no entries: a container blob must be one whole container.
std::string empty_container(uint16_t version) {
  std::string c(16, '\0');
  const uint32_t magic = 0xBA55ED50;
  const uint16_t header_size = 16;
  std::memcpy(c.data(), &magic, 4);
  std::memcpy(c.data() + 4, &version, 2);
  std::memcpy(c.data() + 6, &header_size, 2);
  return c;
}

const std::string blob_a = empty_container(1), blob_b = empty_container(2);

Manifest manifest_for(const std::string &name, std::initializer_list<std::string> blobs) {
  Manifest m;
  m.name = name;
  m.created_by = "test";
  for (const std::string &b : blobs) {
    ContainerRecord c;
    c.digest = sha256(b);
    c.size = b.size();
    m.containers.push_back(c);
  }
  return m;
}

// Writes a committed package NAME.cudaqpkg under `parent` holding blob_a and blob_b.
fs::path make_package(const fs::path &parent, const std::string &name = "app") {
  fs::path dir = parent / (name + package_suffix);
  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  REQUIRE(w->add_blob(sha256(blob_a), as_bytes(blob_a)));
  REQUIRE(w->add_blob(sha256(blob_b), as_bytes(blob_b)));
  REQUIRE(w->commit(manifest_for(name, {blob_a, blob_b}), false));
  return dir;
}

} // namespace

TEST_CASE("commit renames a complete package into place, and only then") {
  ScratchDir s;
  fs::path dir = s.path / "app.cudaqpkg";
  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  REQUIRE(w->add_blob(sha256(blob_a), as_bytes(blob_a)));
  REQUIRE(w->add_blob(sha256(blob_a), as_bytes(blob_a))); // the same digest again: written once
  CHECK_FALSE(fs::exists(dir));
  auto pending = entries(s.path);
  REQUIRE(pending.size() == 1);
  CHECK(pending[0].rfind(".app.cudaqpkg.tmp-", 0) == 0);
  CHECK(fs::exists(s.path / pending[0] / "blobs" / "sha256" / sha256(blob_a).hex()));

  REQUIRE(w->commit(manifest_for("app", {blob_a}), false));
  CHECK(entries(s.path) == std::vector<std::string>{"app.cudaqpkg"});
  CHECK(entries(dir) ==
        std::vector<std::string>{"blobs", "index.json", "manifest.json", "oci-layout"});
  // The blob, and the OCI layout's two: the config (manifest.json's bytes) and the image manifest.
  const auto blobs = entries(dir / "blobs" / "sha256");
  CHECK(blobs.size() == 3);
  CHECK(std::count(blobs.begin(), blobs.end(), sha256(blob_a).hex()) == 1);
  CHECK(std::count(blobs.begin(), blobs.end(), sha256(read_file(dir / "manifest.json")).hex()) ==
        1);

  auto p = Package::open(dir);
  REQUIRE(p);
  auto layout = p->check_layout();
  REQUIRE(layout);
  CHECK(*layout == Package::Layout::current);
  CHECK(p->manifest().name == "app");
  CHECK(p->referenced_blobs() == std::set<Digest>{sha256(blob_a)});
  CHECK(p->blob_path(sha256(blob_a)) == dir / "blobs" / "sha256" / sha256(blob_a).hex());
  auto bytes = p->read_blob(sha256(blob_a));
  REQUIRE(bytes);
  CHECK(*bytes == blob_a);
}

TEST_CASE("a writer destroyed without commit leaves nothing behind") {
  ScratchDir s;
  {
    auto w = PackageWriter::create(s.path / "app.cudaqpkg");
    REQUIRE(w);
    REQUIRE(w->add_blob(sha256(blob_a), as_bytes(blob_a)));
    CHECK(entries(s.path).size() == 1);
  }
  CHECK(entries(s.path).empty());
}

TEST_CASE("commit onto an existing package fails without replace and swaps it with replace") {
  ScratchDir s;
  fs::path dir = make_package(s.path);

  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  REQUIRE(w->add_blob(sha256(blob_b), as_bytes(blob_b)));
  Status st = w->commit(manifest_for("app", {blob_b}), false);
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + dir.string() + "': already exists (use --force to replace it)");
  CHECK(Package::open(dir)->manifest().containers.size() == 2); // the old one is untouched

  REQUIRE(w->commit(manifest_for("app", {blob_b}), true));
  auto p = Package::open(dir);
  REQUIRE(p);
  CHECK(p->referenced_blobs() == std::set<Digest>{sha256(blob_b)});
  CHECK_FALSE(fs::exists(p->blob_path(sha256(blob_a)))); // nothing of the old one remains
  CHECK(entries(s.path) == std::vector<std::string>{"app.cudaqpkg"}); // no temp or .old left
}

TEST_CASE("open checks the manifest's blobs") {
  ScratchDir s;
  fs::path dir = make_package(s.path);
  fs::path a = dir / "blobs" / "sha256" / sha256(blob_a).hex();

  SUBCASE("missing") {
    fs::remove(a);
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + dir.string() + "': blob " + sha256(blob_a).str() +
                                 " named by the manifest is missing");
  }
  SUBCASE("a symlink, even to the right bytes") {
    fs::path outside = s.path / "outside";
    write_file(outside, blob_a);
    fs::remove(a);
    fs::create_symlink(outside, a);
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + a.string() + "': blob is not a regular file");
  }
  SUBCASE("a dangling symlink") {
    fs::remove(a);
    fs::create_symlink(s.path / "nowhere", a);
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + a.string() + "': blob is not a regular file");
  }
  SUBCASE("a directory") {
    fs::remove(a);
    fs::create_directory(a);
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + a.string() + "': blob is not a regular file");
  }
  SUBCASE("not a package") {
    auto none = Package::open(s.path / "nope.cudaqpkg");
    REQUIRE_FALSE(none);
    CHECK(none.error().str() == "'" + (s.path / "nope.cudaqpkg").string() + "': no such package");
    fs::remove(dir / "manifest.json");
    auto no_manifest = Package::open(dir);
    REQUIRE_FALSE(no_manifest);
    CHECK(no_manifest.error().str() == "'" + dir.string() + "': not a package: no manifest.json");
  }
  SUBCASE("a corrupt manifest") {
    write_file(dir / "manifest.json", "{\"format_version\": 1");
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + (dir / "manifest.json").string() + "': not valid JSON");
  }
}

TEST_CASE("a tampered blob is detected on read and is not carried into a new package") {
  ScratchDir s;
  fs::path dir = make_package(s.path);
  auto p = Package::open(dir);
  REQUIRE(p);
  fs::path a = p->blob_path(sha256(blob_a));
  std::string changed = blob_a;
  changed[5] ^= 1; // same size, one byte changed
  write_file(a, changed);
  auto bytes = p->read_blob(sha256(blob_a));
  REQUIRE_FALSE(bytes);
  const std::string tampered = "'" + a.string() + "': blob does not match its digest " +
                               sha256(blob_a).str() + " (the package is corrupt or was modified)";
  CHECK(bytes.error().str() == tampered);
  CHECK(p->read_blob(sha256(blob_b))); // the other blob is fine

  fs::path next = s.path / "next.cudaqpkg";
  auto w = PackageWriter::create(next);
  REQUIRE(w);
  Status st = w->carry_blob(*p, sha256(blob_a));
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == tampered);
  REQUIRE(w->carry_blob(*p, sha256(blob_b)));
  REQUIRE(w->commit(manifest_for("next", {blob_b}), false));
  auto q = Package::open(next);
  REQUIRE(q);
  auto carried = q->read_blob(sha256(blob_b));
  REQUIRE(carried);
  CHECK(*carried == blob_b);
  CHECK_FALSE(fs::exists(q->blob_path(sha256(blob_a))));
}

TEST_CASE("a reader keeps the package it opened while a writer replaces it") {
  ScratchDir s;
  fs::path dir = make_package(s.path);
  std::optional<Package> reader;
  {
    auto p = Package::open(dir);
    REQUIRE(p);
    reader.emplace(std::move(*p));
  }
  // The new package drops blob_a, which the reader's manifest still names.
  auto w = PackageWriter::create(dir);
  REQUIRE(w);
  REQUIRE(w->add_blob(sha256(blob_b), as_bytes(blob_b)));
  REQUIRE(w->commit(manifest_for("app", {blob_b}), true));
  CHECK(Package::open(dir)->referenced_blobs() == std::set<Digest>{sha256(blob_b)});

  auto bytes = reader->read_blob(sha256(blob_a));
  REQUIRE(bytes);
  CHECK(*bytes == blob_a);
  auto beside = entries(s.path);
  REQUIRE(beside.size() == 2); // the old package, held by the reader
  CHECK(beside[0].rfind(".app.cudaqpkg.old-", 0) == 0);
  reader.reset(); // the last reader of the old package removes it
  CHECK(entries(s.path) == std::vector<std::string>{"app.cudaqpkg"});
}

TEST_CASE("open reads a manifest only if it is a regular file of a sane size") {
  ScratchDir s;
  fs::path dir = make_package(s.path);
  fs::path manifest = dir / "manifest.json";
  fs::remove(manifest);
  auto fails_with = [&](const std::string &message) {
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + manifest.string() + "': " + message);
  };
  SUBCASE("a FIFO does not block") {
    REQUIRE(::mkfifo(manifest.c_str(), 0644) == 0);
    fails_with("is a FIFO or pipe, not a regular file");
  }
  SUBCASE("a symbolic link is not followed") {
    fs::create_symlink("/dev/zero", manifest);
    fails_with("is a symbolic link, not a regular file");
  }
  SUBCASE("a directory") {
    fs::create_directory(manifest);
    fails_with("is a directory");
  }
  SUBCASE("larger than the limit") {
    write_file(manifest, "");
    fs::resize_file(manifest, max_manifest_bytes + 1);
    fails_with(
        cat("is ", max_manifest_bytes + 1, " bytes, more than the limit of ", max_manifest_bytes));
  }
}

TEST_CASE("a blob of another size than its manifest records is not read") {
  ScratchDir s;
  fs::path dir = make_package(s.path);
  auto p = Package::open(dir);
  REQUIRE(p);
  fs::path a = p->blob_path(sha256(blob_a));
  write_file(a, blob_a + std::string(1 << 20, 'x'));
  auto bytes = p->read_blob(sha256(blob_a));
  REQUIRE_FALSE(bytes);
  CHECK(bytes.error().str() == cat("'", a.string(), "': blob is ", blob_a.size() + (1 << 20),
                                   " bytes, not the ", blob_a.size(),
                                   " its manifest records (the package is corrupt or was "
                                   "modified)"));
}

TEST_CASE("only a package is recognised as one") {
  ScratchDir s;
  CHECK(check_is_package(make_package(s.path)));
  const std::string tail =
      "): --force replaces only a package; move it away or pack under another name";
  fs::path notes = s.path / "notes.cudaqpkg";
  fs::create_directory(notes);
  CHECK(check_is_package(notes)); // empty, as a build tool makes it for its output
  write_file(notes / "thesis.txt", "work");
  Status st = check_is_package(notes);
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + notes.string() + "': is not a package (no manifest.json" + tail);
  fs::remove_all(notes);
  write_file(notes, "a file");
  st = check_is_package(notes);
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + notes.string() + "': is not a package (a regular file" + tail);
}

TEST_CASE("the lock file is never reached through a symbolic link") {
  ScratchDir s;
  fs::path target = s.path / "created-elsewhere";
  fs::path lock = s.path / ".app.cudaqpkg.lock";
  fs::create_symlink(target, lock);
  auto l = PackageLock::acquire(s.path / "app.cudaqpkg");
  REQUIRE_FALSE(l);
  CHECK(l.error().str() == "'" + lock.string() + "': is a symbolic link, not a regular file");
  CHECK_FALSE(fs::exists(fs::symlink_status(target)));
}

TEST_CASE("what the manifest says of a blob is checked against the blob") {
  ScratchDir s;
  fs::path dir = s.path / "app.cudaqpkg";
  // A container with one 64-byte entry header and 8 payload bytes.
  std::string one = empty_container(1);
  one.resize(16 + 64 + 8);
  const uint64_t fat_size = 64 + 8, payload = 8;
  const uint32_t entry_header = 64, arch = 80;
  const uint16_t kind = 2;
  std::memcpy(one.data() + 8, &fat_size, 8);
  std::memcpy(one.data() + 16, &kind, 2);
  std::memcpy(one.data() + 16 + 4, &entry_header, 4);
  std::memcpy(one.data() + 16 + 8, &payload, 8);
  std::memcpy(one.data() + 16 + 0x1C, &arch, 4);
  Manifest m = manifest_for("app", {one});
  EntryRecord e;
  e.kind = "cubin";
  e.kind_code = 2;
  e.arch = 80;
  e.compression = "none";
  e.payload_size = 8;
  m.containers[0].entries = {e};
  auto commit = [&](const std::string &blob, const Manifest &manifest) {
    fs::remove_all(dir);
    auto w = PackageWriter::create(dir);
    REQUIRE(w);
    REQUIRE(w->add_blob(sha256(blob), as_bytes(blob)));
    REQUIRE(w->commit(manifest, false));
    return dir / "blobs" / "sha256" / sha256(blob).hex();
  };

  SUBCASE("as written, it reads") {
    commit(one, m);
    auto p = Package::open(dir);
    REQUIRE(p);
    CHECK(p->read_blob(sha256(one)));
  }
  SUBCASE("a size that is not the blob's") {
    m.containers[0].size = UINT64_MAX;
    fs::path b = commit(one, m);
    auto p = Package::open(dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + b.string() + "': blob is 88 bytes but the manifest says " +
                                 std::to_string(UINT64_MAX) +
                                 " (the package is corrupt or was modified)");
  }
  SUBCASE("an entry that is not the blob's") {
    m.containers[0].entries[0].payload_size = UINT64_MAX;
    fs::path b = commit(one, m);
    auto p = Package::open(dir);
    REQUIRE(p);
    auto bytes = p->read_blob(sha256(one));
    REQUIRE_FALSE(bytes);
    CHECK(bytes.error().str() == "'" + b.string() +
                                     "': entry 0 (cubin sm_80, 8 bytes) is not what the manifest "
                                     "says of it (the manifest was modified)");
    m.containers[0].entries[0].payload_size = 8;
    m.containers[0].entries.push_back(e);
    commit(one, m);
    auto q = Package::open(dir);
    REQUIRE(q);
    CHECK(q->read_blob(sha256(one)).error().str() ==
          "'" + b.string() +
              "': blob holds 1 entries but the manifest says 2 (the manifest was "
              "modified)");
  }
  SUBCASE("two containers in one blob") {
    std::string two = one + one;
    Manifest m2 = manifest_for("app", {two});
    m2.containers[0].entries = {e};
    fs::path b = commit(two, m2);
    auto p = Package::open(dir);
    REQUIRE(p);
    auto bytes = p->read_blob(sha256(two));
    REQUIRE_FALSE(bytes);
    CHECK(bytes.error().str() == "'" + b.string() + "': blob holds 2 containers, not one");
  }
  SUBCASE("a blob that is no container") {
    std::string junk = "not a fatbin container";
    fs::path b = commit(junk, manifest_for("app", {junk}));
    auto p = Package::open(dir);
    REQUIRE(p);
    CHECK(p->read_blob(sha256(junk)).error().str() ==
          "'" + b.string() + "': blob: container 0 at offset 0x0: bad magic 0x20746f6e (expected " +
              "0xba55ed50)");
  }
}

TEST_CASE("with a blob source, a blob not on disk is fetched when read, checked, and kept") {
  ScratchDir s;
  const fs::path whole = make_package(s.path, "whole");
  const fs::path dir = s.path / "app.cudaqpkg";
  fs::copy(whole, dir, fs::copy_options::recursive);
  const Digest a = sha256(blob_a);
  REQUIRE(fs::remove(dir / "blobs" / "sha256" / a.hex()));
  auto source = std::make_shared<DirectoryBlobSource>(whole / "blobs" / "sha256");

  auto strict = Package::open(dir);
  REQUIRE_FALSE(strict);
  CHECK(strict.error().str() ==
        "'" + dir.string() + "': blob " + a.str() + " named by the manifest is missing");

  SUBCASE("fetched once, then read from disk") {
    auto p = Package::open(dir, {.source = source});
    REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
    CHECK_FALSE(p->has_blob(a));
    CHECK(p->has_blob(sha256(blob_b)));
    CHECK(p->read_blob(sha256(blob_b)));
    CHECK(source->fetches == 0);
    auto bytes = p->read_blob(a);
    REQUIRE_MESSAGE(bytes, (bytes ? "" : bytes.error().str()));
    CHECK(*bytes == blob_a);
    CHECK(source->fetches == 1);
    CHECK(p->has_blob(a));
    CHECK(read_file(p->blob_path(a)) == blob_a);
    auto again = Package::open(dir);
    REQUIRE(again); // whole now
    CHECK(again->read_blob(a));
    CHECK(source->fetches == 1);
  }
  SUBCASE("a source that keeps the blob in a file: the package links it, no copy") {
    source->offer_file = true;
    auto p = Package::open(dir, {.source = source});
    REQUIRE(p);
    REQUIRE(p->read_blob(a));
    struct stat kept, linked;
    REQUIRE(::stat((whole / "blobs" / "sha256" / a.hex()).c_str(), &kept) == 0);
    REQUIRE(::stat(p->blob_path(a).c_str(), &linked) == 0);
    CHECK(kept.st_ino == linked.st_ino);
    CHECK(linked.st_nlink == 2);
  }
  SUBCASE("carried into a new package through the source") {
    auto p = Package::open(dir, {.source = source});
    REQUIRE(p);
    const fs::path next = s.path / "next.cudaqpkg";
    auto w = PackageWriter::create(next);
    REQUIRE(w);
    REQUIRE(w->carry_blob(*p, a));
    REQUIRE(w->commit(manifest_for("next", {blob_a}), false));
    CHECK(source->fetches == 1);
    auto q = Package::open(next);
    REQUIRE(q);
    CHECK(q->read_blob(a));
  }
  // The error of a read that must fail and keep nothing.
  auto refused = [&] {
    auto p = Package::open(dir, {.source = source});
    REQUIRE(p);
    auto bytes = p->read_blob(a);
    REQUIRE_FALSE(bytes);
    CHECK_FALSE(p->has_blob(a));
    CHECK_FALSE(p->verified(a));
    return bytes.error().str();
  };
  SUBCASE("wrong bytes are refused and not kept") {
    source->tamper = a;
    CHECK(refused() == "'" + (dir / "blobs" / "sha256" / a.hex()).string() +
                           "': fetched blob does not match its digest " + a.str() +
                           ": refused, nothing kept");
  }
  SUBCASE("the source's error is the read's") {
    source->fail = true;
    CHECK(refused() == "the source is down");
  }
  SUBCASE("a blob on disk of the wrong size is still refused at the open") {
    write_file(dir / "blobs" / "sha256" / sha256(blob_b).hex(), blob_b + "x");
    auto p = Package::open(dir, {.source = source});
    REQUIRE_FALSE(p);
    CHECK(p.error().str().find("(the package is corrupt or was modified)") != std::string::npos);
  }
}

namespace {

// A linked cubin's worth of bytes that compresses well, and some that do not compress.
std::string compressible_blob() {
  std::string s;
  for (int i = 0; i < 3000; ++i)
    s += "SASS " + std::to_string(i % 97) + ";";
  return s;
}
std::string incompressible_blob() {
  std::string s(8192, '\0');
  uint64_t x = 0x9e3779b97f4a7c15;
  for (char &c : s) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

// A package holding blob_a (a container, too small to compress), a compressible cubin and an
// incompressible one, written by a zstd writer.
struct CompressedPackage {
  fs::path dir;
  std::string cubin = compressible_blob(), noise = incompressible_blob();
  Digest cubin_d = sha256(cubin), noise_d = sha256(noise);
};
CompressedPackage make_compressed(const fs::path &parent) {
  CompressedPackage c;
  c.dir = parent / "z.cudaqpkg";
  auto w = PackageWriter::create(c.dir, BlobEncoding::zstd);
  REQUIRE(w);
  Manifest m = manifest_for("z", {blob_a});
  for (auto [d, size, arch] : {std::tuple{c.cubin_d, c.cubin.size(), "sm_90"},
                               std::tuple{c.noise_d, c.noise.size(), "sm_80"}}) {
    LinkRecord l;
    l.arch = *parse_arch(arch);
    l.dispatcher = "builtin";
    l.cubin = d;
    l.cubin_size = size;
    m.links.push_back(l);
  }
  REQUIRE(w->add_blob(sha256(blob_a), as_bytes(blob_a)));
  REQUIRE(w->add_blob(c.cubin_d, as_bytes(c.cubin)));
  REQUIRE(w->add_blob(c.noise_d, as_bytes(c.noise)));
  REQUIRE(w->commit(m, false));
  return c;
}

// The process's peak resident memory (VmHWM), in KiB.
uint64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoull(line.substr(6));
  return 0;
}

std::string zstd_tool_decompress(const fs::path &file) {
  return unit_files::command_output("zstd -dc '" + file.string() + "'");
}

} // namespace

TEST_CASE("a zstd writer keeps a blob compressed only where that pays, and it reads back") {
  ScratchDir s;
  const CompressedPackage c = make_compressed(s.path);
  auto p = Package::open(c.dir);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
  const Manifest &m = p->manifest();
  REQUIRE(m.stored.size() == 1); // the container is too small, the noise does not shrink
  const StoredBlob &z = m.stored[0];
  CHECK(z.digest == c.cubin_d);
  CHECK(z.encoding == BlobEncoding::zstd);
  CHECK(m.format_version() == 2);
  CHECK(p->manifest_text().find("\"format_version\": 2") != std::string::npos);
  // On disk: the frame under its own digest, and no file under the cubin's.
  const fs::path blobs = c.dir / "blobs" / "sha256";
  CHECK_FALSE(fs::exists(blobs / c.cubin_d.hex()));
  REQUIRE(fs::exists(blobs / z.stored_digest.hex()));
  CHECK(p->blob_path(c.cubin_d) == blobs / z.stored_digest.hex());
  CHECK(p->stored_name(c.cubin_d) == z.stored_digest);
  const std::string frame = read_file(blobs / z.stored_digest.hex());
  CHECK(frame.size() == z.stored_size);
  CHECK(sha256(frame) == z.stored_digest);
  CHECK(frame.size() < c.cubin.size() / 4);
  CHECK(zstd_tool_decompress(blobs / z.stored_digest.hex()) == c.cubin); // an independent decoder
  CHECK(fs::exists(blobs / c.noise_d.hex()));
  CHECK(fs::exists(blobs / sha256(blob_a).hex()));
  CHECK(p->has_blob(c.cubin_d));
  auto cubin = p->read_blob(c.cubin_d);
  REQUIRE_MESSAGE(cubin, (cubin ? "" : cubin.error().str()));
  CHECK(*cubin == c.cubin);
  CHECK(p->verified(c.cubin_d));
  CHECK(p->read_blob(c.noise_d));
  // The stored form by its own digest is the frame as it is (what a push uploads).
  auto as_stored = p->read_blob(z.stored_digest);
  REQUIRE(as_stored);
  CHECK(*as_stored == frame);
  // The image manifest carries the frame, typed +zstd, with the cubin's digest beside it.
  auto im = p->image_manifest();
  REQUIRE(im);
  auto layer = std::find_if(im->layers.begin(), im->layers.end(),
                            [&](const OciDescriptor &l) { return l.digest == z.stored_digest; });
  REQUIRE(layer != im->layers.end());
  CHECK(layer->media_type == std::string(cubin_layer_media_type) + "+zstd");
  CHECK(layer->size == frame.size());
  CHECK(layer->annotations.at("io.cudaq-rt.uncompressed-digest") == c.cubin_d.str());
  CHECK(std::none_of(im->layers.begin(), im->layers.end(),
                     [&](const OciDescriptor &l) { return l.digest == c.cubin_d; }));
  auto layout = p->check_layout();
  REQUIRE(layout);
  CHECK(*layout == Package::Layout::current);
}

TEST_CASE("a compressed blob is checked as stored, then as its bytes") {
  ScratchDir s;
  const CompressedPackage c = make_compressed(s.path);
  const StoredBlob z = Package::open(c.dir)->manifest().stored.at(0);
  const fs::path file = c.dir / "blobs" / "sha256" / z.stored_digest.hex();
  std::string frame = read_file(file);

  SUBCASE("a flipped byte of the frame: its stored digest, before any decompression") {
    frame[frame.size() / 2] ^= 1;
    fs::remove(file);
    write_file(file, frame);
    auto p = Package::open(c.dir);
    REQUIRE(p);
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() == "'" + file.string() + "': blob does not match its stored digest " +
                                 z.stored_digest.str() +
                                 " (the package is corrupt or was modified)");
    CHECK_FALSE(p->verified(c.cubin_d));
  }
  SUBCASE("another frame of the very same bytes: only the stored digest tells") {
    // Compressed at another level, the frame differs and still gives the blob's bytes, and the
    // manifest (unsigned: anyone may edit it) records its size: the frame's own digest is all
    // that refuses it.
    const std::string other = zstd_compress(as_bytes(c.cubin), 19);
    REQUIRE(other != frame);
    {
      auto p = Package::open(c.dir);
      REQUIRE(p);
      Manifest m = p->manifest();
      m.stored[0].stored_size = other.size();
      fs::remove(c.dir / "manifest.json");
      write_file(c.dir / "manifest.json", m.to_json_text());
    }
    fs::remove(file);
    write_file(file, other);
    auto p = Package::open(c.dir);
    REQUIRE(p);
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() == "'" + file.string() + "': blob does not match its stored digest " +
                                 z.stored_digest.str() +
                                 " (the package is corrupt or was modified)");
    CHECK_FALSE(p->verified(c.cubin_d));
  }
  // The blob's size as the manifest claims it, and a frame for it.
  auto claim = [&](uint64_t size, const std::string &frame_bytes) {
    auto p = Package::open(c.dir);
    REQUIRE(p);
    Manifest m = p->manifest();
    for (LinkRecord &l : m.links)
      if (l.cubin == c.cubin_d)
        l.cubin_size = size;
    m.stored[0].stored_digest = sha256(frame_bytes);
    m.stored[0].stored_size = frame_bytes.size();
    fs::remove(file);
    write_file(c.dir / "blobs" / "sha256" / sha256(frame_bytes).hex(), frame_bytes);
    fs::remove(c.dir / "manifest.json");
    write_file(c.dir / "manifest.json", m.to_json_text());
    return c.dir / "blobs" / "sha256" / sha256(frame_bytes).hex();
  };
  // A manifest naming a frame of other bytes (or of more bytes) than the blob it stands for: the
  // frame matches its stored digest, so only decompressing tells.
  auto rewrite = [&](const std::string &other) {
    return claim(c.cubin.size(), zstd_compress(as_bytes(other)));
  };
  SUBCASE("a frame of other bytes of the same size") {
    std::string other = c.cubin;
    other[100] ^= 1;
    const fs::path f = rewrite(other);
    auto p = Package::open(c.dir);
    REQUIRE(p);
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() == "'" + f.string() + "': blob does not match its digest " +
                                 c.cubin_d.str() + " (the package is corrupt or was modified)");
  }
  SUBCASE("a frame that would decompress to more than the blob's size is not decompressed") {
    const fs::path f = rewrite(c.cubin + std::string(1 << 20, 'x'));
    auto p = Package::open(c.dir);
    REQUIRE(p);
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() ==
          "'" + f.string() + "': is a zstd frame of " + std::to_string(c.cubin.size() + (1 << 20)) +
              " bytes, more than the " + std::to_string(c.cubin.size()) + " it may hold");
  }
  SUBCASE("a claim over the limit is refused before the frame is read") {
    const uint64_t tebibyte = uint64_t{1} << 40;
    const fs::path f = claim(tebibyte, zstd_compress(as_bytes(std::string(4096, '\0'))));
    auto p = Package::open(c.dir);
    REQUIRE(p);
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() == "'" + f.string() + "': blob is recorded as " +
                                 std::to_string(tebibyte) +
                                 " bytes, more than a compressed blob may hold (" +
                                 std::to_string(max_compressed_blob_bytes) +
                                 "): the package is corrupt or was modified");
  }
  SUBCASE("a small frame of 64 MiB that are not the blob is refused, and never held") {
    // Made by the zstd tool from a sparse file, so that this process never holds the 64 MiB.
    const size_t big = size_t{64} << 20;
    const fs::path zeros = s.path / "zeros";
    { std::ofstream(zeros).flush(); }
    fs::resize_file(zeros, big);
    const fs::path f =
        claim(big, unit_files::command_output("zstd -q -c '" + zeros.string() + "'"));
    CHECK(fs::file_size(f) < 64 * 1024);
    auto p = Package::open(c.dir);
    REQUIRE(p);
    const uint64_t before = peak_rss_kib();
    auto r = p->read_blob(c.cubin_d);
    REQUIRE_FALSE(r);
    CHECK(r.error().str() == "'" + f.string() + "': blob does not match its digest " +
                                 c.cubin_d.str() + " (the package is corrupt or was modified)");
    CHECK(peak_rss_kib() - before < 16 * 1024); // a copy of the 64 MiB would have raised it
  }
  SUBCASE("a frame shorter than the manifest says is refused at open") {
    fs::remove(file);
    write_file(file, frame.substr(0, frame.size() - 1));
    auto p = Package::open(c.dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + file.string() + "': blob is " +
                                 std::to_string(frame.size() - 1) +
                                 " bytes but the manifest says " + std::to_string(frame.size()) +
                                 " (the package is corrupt or was modified)");
  }
}

TEST_CASE("a carried blob keeps its stored form; a blob source is asked for the stored form") {
  ScratchDir s;
  const CompressedPackage c = make_compressed(s.path);
  auto from = Package::open(c.dir);
  REQUIRE(from);
  const StoredBlob z = from->manifest().stored.at(0);

  SUBCASE("carried by a writer that does not compress") {
    const fs::path copy = s.path / "copy.cudaqpkg";
    auto w = PackageWriter::create(copy);
    REQUIRE(w);
    for (const Digest &d : from->referenced_blobs())
      REQUIRE(w->carry_blob(*from, d));
    Manifest m = from->manifest();
    m.stored.clear(); // the writer says how it stored them
    REQUIRE(w->commit(m, false));
    auto p = Package::open(copy);
    REQUIRE(p);
    REQUIRE(p->manifest().stored.size() == 1);
    CHECK(p->manifest().stored[0].stored_digest == z.stored_digest);
    struct stat a, b;
    REQUIRE(::stat(from->blob_path(c.cubin_d).c_str(), &a) == 0);
    REQUIRE(::stat(p->blob_path(c.cubin_d).c_str(), &b) == 0);
    CHECK(a.st_ino == b.st_ino); // hard linked, not recompressed
    auto cubin = p->read_blob(c.cubin_d);
    REQUIRE(cubin);
    CHECK(*cubin == c.cubin);
  }
  SUBCASE("fetched by its stored digest, kept as stored, read decompressed") {
    const fs::path lazy = s.path / "lazy.cudaqpkg";
    fs::copy(c.dir, lazy, fs::copy_options::recursive);
    REQUIRE(fs::remove(lazy / "blobs" / "sha256" / z.stored_digest.hex()));
    auto source = std::make_shared<DirectoryBlobSource>(c.dir / "blobs" / "sha256");
    auto p = Package::open(lazy, {.source = source});
    REQUIRE(p);
    CHECK_FALSE(p->has_blob(c.cubin_d));
    auto cubin = p->read_blob(c.cubin_d);
    REQUIRE_MESSAGE(cubin, (cubin ? "" : cubin.error().str()));
    CHECK(*cubin == c.cubin);
    CHECK(source->fetches == 1);
    CHECK(read_file(lazy / "blobs" / "sha256" / z.stored_digest.hex()).size() == z.stored_size);
    CHECK_FALSE(fs::exists(lazy / "blobs" / "sha256" / c.cubin_d.hex()));
  }
}

TEST_CASE("a blob directory that is a symbolic link is refused as one, at either level") {
  ScratchDir s;
  for (const std::string which : {"blobs", "blobs/sha256"}) {
    CAPTURE(which);
    const fs::path parent = s.path / (which == "blobs" ? "a" : "b");
    fs::create_directories(parent);
    const CompressedPackage c = make_compressed(parent);
    const fs::path link = c.dir / which, elsewhere = parent / "moved";
    fs::rename(link, elsewhere);
    fs::create_directory_symlink(elsewhere, link);
    auto p = Package::open(c.dir);
    REQUIRE_FALSE(p);
    CHECK(p.error().str() == "'" + link.string() +
                                 "': cannot open the blob directory: it is a symbolic link, which "
                                 "a package never follows");
  }
}
