#include "formats/fatbin.h"

#include <doctest/doctest.h>

#include <cstring>
#include <limits>

using namespace cudaq_rt;

namespace {

// Containers built byte by byte, laid out as fatbin.cpp describes.
struct EntrySpec {
  uint16_t kind = 8;
  uint32_t arch = 90;
  uint64_t flags = 0;
  std::string payload = "payload!";
  std::string options; // placed after the base header, reached through the pointer at +0x40
  std::string name;    // placed after the options
  uint32_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  // Overrides, to corrupt one field after the layout is computed.
  std::optional<uint32_t> header_size, options_at, name_at, name_len;
  std::optional<uint64_t> payload_size;
};

using Bytes = std::vector<uint8_t>;

template <class T> void put(Bytes &b, size_t at, T v) {
  if (b.size() < at + sizeof v)
    b.resize(at + sizeof v);
  std::memcpy(b.data() + at, &v, sizeof v);
}

Bytes entry_bytes(const EntrySpec &s) {
  Bytes h(64, 0);
  uint32_t options_at = 0, name_at = 0;
  if (!s.options.empty()) {
    options_at = 0x40;
    put<uint32_t>(h, 0x40, 0x48);
    put<uint32_t>(h, 0x44, uint32_t(s.options.size()));
    h.insert(h.end(), s.options.begin(), s.options.end());
  }
  if (!s.name.empty()) {
    name_at = uint32_t(h.size());
    h.insert(h.end(), s.name.begin(), s.name.end());
  }
  h.resize((h.size() + 7) & ~size_t(7), 0);
  put<uint16_t>(h, 0x00, s.kind);
  put<uint16_t>(h, 0x02, 0x0101);
  put<uint32_t>(h, 0x04, s.header_size.value_or(uint32_t(h.size())));
  put<uint64_t>(h, 0x08, s.payload_size.value_or(s.payload.size()));
  put<uint32_t>(h, 0x10, s.compressed_size);
  put<uint32_t>(h, 0x14, s.options_at.value_or(options_at));
  put<uint16_t>(h, 0x18, 4);  // minor
  put<uint16_t>(h, 0x1A, 13); // major
  put<uint32_t>(h, 0x1C, s.arch);
  put<uint32_t>(h, 0x20, s.name_at.value_or(name_at));
  put<uint32_t>(h, 0x24, s.name_len.value_or(uint32_t(s.name.size())));
  put<uint64_t>(h, 0x28, s.flags);
  put<uint64_t>(h, 0x38, s.uncompressed_size);
  h.insert(h.end(), s.payload.begin(), s.payload.end());
  return h;
}

Bytes container_bytes(const std::vector<EntrySpec> &entries) {
  Bytes body;
  for (const EntrySpec &e : entries) {
    Bytes b = entry_bytes(e);
    body.insert(body.end(), b.begin(), b.end());
  }
  Bytes c;
  put<uint32_t>(c, 0, fatbin_magic);
  put<uint16_t>(c, 4, 1);
  put<uint16_t>(c, 6, 16);
  put<uint64_t>(c, 8, body.size());
  c.insert(c.end(), body.begin(), body.end());
  return c;
}

void append(Bytes &to, const Bytes &b) {
  to.insert(to.end(), b.begin(), b.end());
}
void pad8(Bytes &b) {
  b.resize((b.size() + 7) & ~size_t(7), 0);
}

// The message a split of `b` fails with, or "" when it succeeds.
std::string split_error(const Bytes &b) {
  auto r = split_containers(b, "f", "section __nv_relfatbin");
  return r ? "" : r.error().str();
}

const std::string where0 = "'f': section __nv_relfatbin: container 0 at offset 0x0";

} // namespace

TEST_CASE("a container's header and entries are parsed field by field") {
  EntrySpec ltoir;
  ltoir.kind = 8;
  ltoir.arch = 90;
  ltoir.flags = 0x18011;
  ltoir.payload = std::string(40, 'x');
  ltoir.compressed_size = 37;
  ltoir.uncompressed_size = 4096;
  ltoir.options = "-ftz=0 -prec_div=1";
  EntrySpec cubin;
  cubin.kind = 2;
  cubin.arch = 80;
  cubin.flags = 0x2011;
  cubin.payload = std::string(24, 'y');
  cubin.compressed_size = 20;
  cubin.name = "lto";
  EntrySpec unknown;
  unknown.kind = 77;
  unknown.arch = 100;
  Bytes b = container_bytes({ltoir, cubin, unknown});

  auto c = parse_container(b, "f", "fatbin");
  REQUIRE(c);
  CHECK(c->offset == 0);
  CHECK(c->version == 1);
  CHECK(c->bytes.data() == b.data());
  CHECK(c->bytes.size() == b.size());
  REQUIRE(c->entries.size() == 3);

  const Entry &e0 = c->entries[0];
  CHECK(e0.offset == 16);
  CHECK(e0.kind == 8);
  CHECK(e0.is_ltoir());
  CHECK(e0.header_size == 0x48 + 24); // 0x48 + 18 bytes of options, padded to 8
  CHECK(e0.payload_size == 40);
  CHECK(e0.compressed_size == 37);
  CHECK(e0.uncompressed_size == 4096);
  CHECK(e0.version_major == 13);
  CHECK(e0.version_minor == 4);
  CHECK(e0.arch == 90);
  CHECK(e0.flags == 0x18011);
  CHECK(e0.compression == Compression::zstd);
  CHECK(e0.options == "-ftz=0 -prec_div=1");
  CHECK(e0.name.empty());

  const Entry &e1 = c->entries[1];
  CHECK(e1.offset == e0.offset + e0.header_size + e0.payload_size);
  CHECK(e1.kind == 2);
  CHECK_FALSE(e1.is_ltoir());
  CHECK(e1.header_size == 64 + 8);
  CHECK(e1.arch == 80);
  CHECK(e1.compression == Compression::lz4);
  CHECK(e1.options.empty());
  CHECK(e1.name == "lto");

  const Entry &e2 = c->entries[2];
  CHECK(e2.kind == 77);
  CHECK(e2.header_size == 64);
  CHECK(e2.compression == Compression::none);
  CHECK(e2.offset + e2.header_size + e2.payload_size == b.size());
}

TEST_CASE("entry kinds and compressions have names, unknown kinds included") {
  CHECK(entry_kind_name(1) == "ptx");
  CHECK(entry_kind_name(2) == "cubin");
  CHECK(entry_kind_name(8) == "ltoir");
  CHECK(entry_kind_name(77) == "kind-77");
  CHECK(std::string(compression_name(Compression::zstd)) == "zstd");
  CHECK(std::string(compression_name(Compression::lz4)) == "lz4");
  CHECK(std::string(compression_name(Compression::none)) == "none");
}

TEST_CASE("containers back to back, with and without zero padding, are split by their sizes") {
  EntrySpec odd;
  odd.payload = "12345"; // a 5-byte payload leaves the container off an 8-byte boundary
  Bytes a = container_bytes({odd}), b = container_bytes({EntrySpec{}}),
        c = container_bytes({EntrySpec{}, EntrySpec{}});
  REQUIRE(a.size() % 8 != 0);
  Bytes section = a;
  pad8(section);
  size_t b_at = section.size();
  append(section, b); // b ends aligned: c follows directly
  size_t c_at = section.size();
  append(section, c);
  section.resize(section.size() + 16, 0); // trailing padding

  auto r = split_containers(section, "f", "section __nv_relfatbin");
  REQUIRE(r);
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].offset == 0);
  CHECK((*r)[0].bytes.size() == a.size());
  CHECK((*r)[1].offset == b_at);
  CHECK((*r)[1].bytes.data() == section.data() + b_at);
  CHECK((*r)[1].bytes.size() == b.size());
  CHECK((*r)[2].offset == c_at);
  CHECK((*r)[2].bytes.size() == c.size());
  CHECK((*r)[2].entries.size() == 2);
}

TEST_CASE("the magic inside a payload does not split a container") {
  EntrySpec e;
  e.payload.assign(32, '\0');
  uint32_t magic = fatbin_magic;
  std::memcpy(e.payload.data() + 8, &magic, 4); // a fake container header in the payload
  uint16_t one = 1, sixteen = 16;
  std::memcpy(e.payload.data() + 12, &one, 2);
  std::memcpy(e.payload.data() + 14, &sixteen, 2);
  Bytes section = container_bytes({e});
  append(section, container_bytes({EntrySpec{}}));

  auto r = split_containers(section, "f", "section __nv_relfatbin");
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].entries.size() == 1);
  CHECK((*r)[0].entries[0].payload_size == 32);
  CHECK((*r)[1].offset == (*r)[0].bytes.size());
}

TEST_CASE("a container that claims more bytes than remain is an error with its offset") {
  Bytes section = container_bytes({EntrySpec{}});
  REQUIRE(section.size() == 0x58); // container 1 starts at 0x58
  Bytes second(16 + 512, 0);
  put<uint32_t>(second, 0, fatbin_magic);
  put<uint16_t>(second, 4, 1);
  put<uint16_t>(second, 6, 16);
  put<uint64_t>(second, 8, 9000);
  append(section, second);
  CHECK(split_error(section) == "'f': section __nv_relfatbin: container 1 at offset 0x58 claims "
                                "9000 bytes but 512 remain");
  // Claims that fit the bytes left only when the 16-byte header is forgotten: one byte more than
  // follows the header, and all that follows the container's start.
  for (uint64_t claim : {513u, 528u}) {
    CAPTURE(claim);
    Bytes s2 = container_bytes({EntrySpec{}});
    Bytes c = second;
    put<uint64_t>(c, 8, claim);
    append(s2, c);
    CHECK(split_error(s2) == "'f': section __nv_relfatbin: container 1 at offset 0x58 claims " +
                                 std::to_string(claim) + " bytes but 512 remain");
  }
}

TEST_CASE("malformed container headers") {
  Bytes good = container_bytes({EntrySpec{}});

  Bytes short_header(good.begin(), good.begin() + 12);
  CHECK(split_error(short_header) == where0 + " has 12 bytes, less than a 16-byte header");

  Bytes bad_magic = good;
  put<uint32_t>(bad_magic, 0, 0xBA55ED51u);
  CHECK(split_error(bad_magic) == where0 + ": bad magic 0xba55ed51 (expected 0xba55ed50)");

  Bytes small_header = good;
  put<uint16_t>(small_header, 6, 8);
  CHECK(split_error(small_header) == where0 + ": header size 8 is invalid");

  Bytes huge_header = good;
  put<uint16_t>(huge_header, 6, 0xFFFF);
  CHECK(split_error(huge_header) == where0 + ": header size 65535 is invalid");

  Bytes huge_size = good;
  put<uint64_t>(huge_size, 8, std::numeric_limits<uint64_t>::max());
  CHECK(split_error(huge_size) == where0 + " claims 18446744073709551615 bytes but " +
                                      std::to_string(good.size() - 16) + " remain");
}

TEST_CASE("malformed entries") {
  const std::string at16 = where0 + ": entry at offset 0x10";

  SUBCASE("fewer bytes than an entry header") {
    Bytes b = container_bytes({EntrySpec{}});
    b.resize(16 + 40);
    put<uint64_t>(b, 8, 40);
    CHECK(split_error(b) == at16 + " has 40 bytes, less than a 64-byte entry header");
  }
  SUBCASE("header size below 64") {
    EntrySpec e;
    e.header_size = 32;
    CHECK(split_error(container_bytes({e})) ==
          at16 + " has header size 32 (at least 64, at most 72 remain)");
  }
  SUBCASE("header size past the container") {
    EntrySpec e;
    e.header_size = 1000;
    CHECK(split_error(container_bytes({e})) ==
          at16 + " has header size 1000 (at least 64, at most 72 remain)");
  }
  SUBCASE("payload size near UINT64_MAX does not wrap around") {
    for (uint64_t size :
         {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() - 63}) {
      EntrySpec e;
      e.payload_size = size;
      CHECK(split_error(container_bytes({e})) ==
            at16 + " claims " + std::to_string(size) + " payload bytes but 8 remain");
    }
  }
  SUBCASE("payload one byte past the container") {
    EntrySpec e;
    e.payload_size = 9;
    CHECK(split_error(container_bytes({e})) == at16 + " claims 9 payload bytes but 8 remain");
  }
  SUBCASE("compressed size larger than the payload") {
    EntrySpec e;
    e.flags = 0x8000;
    e.compressed_size = 9;
    CHECK(split_error(container_bytes({e})) ==
          at16 + " claims 9 compressed bytes in a 8-byte payload");
  }
  SUBCASE("options pointer inside the base header") {
    EntrySpec e;
    e.options_at = 0x10;
    CHECK(split_error(container_bytes({e})) ==
          at16 + ": options pointer 0x10 lies outside its 64-byte header");
  }
  SUBCASE("options pointer past the header") {
    EntrySpec e;
    e.options = "-O3";
    e.options_at = 0x49; // an 8-byte pair at 0x49 ends one byte past the 0x50-byte header
    CHECK(split_error(container_bytes({e})) ==
          at16 + ": options pointer 0x49 lies outside its 80-byte header");
  }
  SUBCASE("options string past the header") {
    EntrySpec e;
    e.options = "-O3";
    Bytes b = container_bytes({e});
    put<uint32_t>(b, 16 + 0x44, 9); // length 9 at +0x48 runs to 0x51 in an 80-byte header
    CHECK(split_error(b) == at16 + ": options string (9 bytes at +0x48) runs past its header");
  }
  SUBCASE("name past the header") {
    EntrySpec e;
    e.name_at = 60;
    e.name_len = 5;
    CHECK(split_error(container_bytes({e})) ==
          at16 + ": name (5 bytes at +0x3c) runs past its header");
  }
  SUBCASE("an error in a later entry names that entry's offset") {
    EntrySpec bad;
    bad.header_size = 3;
    Bytes b = container_bytes({EntrySpec{}, bad});
    CHECK(split_error(b) == where0 + ": entry at offset 0x58 has header size 3 (at least 64, "
                                     "at most 72 remain)");
  }
}

TEST_CASE("bytes between containers must be zero padding") {
  Bytes a = container_bytes({EntrySpec{}});
  REQUIRE(a.size() == 0x58);

  Bytes garbage_in_padding = a;
  garbage_in_padding.resize(0x60, 0);
  garbage_in_padding[0x5b] = 0x7f;
  append(garbage_in_padding, a);
  CHECK(split_error(garbage_in_padding) == "'f': section __nv_relfatbin: unexpected byte 0x7f at "
                                           "offset 0x5b in the padding after container 0");
  // An aligned container is followed by its successor's magic or by zeros up to the next 8 bytes.
  Bytes odd = container_bytes({[] {
    EntrySpec e;
    e.payload = "12345";
    return e;
  }()});
  REQUIRE(odd.size() == 0x55);
  Bytes bad_pad = odd;
  bad_pad.resize(0x58, 0);
  bad_pad[0x56] = 0x01;
  append(bad_pad, a);
  CHECK(split_error(bad_pad) == "'f': section __nv_relfatbin: unexpected byte 0x1 at offset 0x56 "
                                "in the padding after container 0");

  // Non-zero bytes where a container should start are a container with a bad magic.
  Bytes junk = a;
  append(junk, Bytes{'j', 'u', 'n', 'k', 0, 0, 0, 0});
  append(junk, a);
  CHECK(split_error(junk) == "'f': section __nv_relfatbin: container 1 at offset 0x58: bad magic "
                             "0x6b6e756a (expected 0xba55ed50)");

  Bytes zero_then_junk = a;
  append(zero_then_junk, Bytes{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9});
  append(zero_then_junk, a);
  CHECK(split_error(zero_then_junk) == "'f': section __nv_relfatbin: unexpected byte 0x9 at "
                                       "offset 0x67 in the padding after container 0");

  Bytes lead = Bytes{0, 0, 0, 1, 0, 0, 0, 0};
  append(lead, a);
  CHECK(split_error(lead) == "'f': section __nv_relfatbin: unexpected byte 0x1 at offset 0x3 "
                             "before the first container");
}

TEST_CASE("empty input and input of only zeros are errors") {
  CHECK(split_error(Bytes{}) == "'f': section __nv_relfatbin is empty");
  CHECK(split_error(Bytes(40, 0)) == "'f': section __nv_relfatbin holds only zero bytes");
  CHECK(split_error(Bytes(3, 0)) == "'f': section __nv_relfatbin holds only zero bytes");
}

TEST_CASE("parse_container requires the container to fill its input") {
  Bytes b = container_bytes({EntrySpec{}});
  CHECK(parse_container(b, "f.fatbin", "fatbin"));
  Bytes trailing = b;
  trailing.resize(b.size() + 8, 0);
  auto r = parse_container(trailing, "f.fatbin", "fatbin");
  REQUIRE_FALSE(r);
  CHECK(r.error().str() == "'f.fatbin': fatbin: 8 bytes follow the container");
  auto e = parse_container(Bytes{}, "f.fatbin", "fatbin");
  REQUIRE_FALSE(e);
  CHECK(e.error().str() ==
        "'f.fatbin': fatbin: container 0 at offset 0x0 has 0 bytes, less than a 16-byte header");
}

TEST_CASE("an empty container (header only) is accepted with no entries") {
  Bytes b = container_bytes({});
  auto c = parse_container(b, "f", "fatbin");
  REQUIRE(c);
  CHECK(c->entries.empty());
}
