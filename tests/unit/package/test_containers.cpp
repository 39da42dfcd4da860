// An input's containers as a manifest records them: entry and container records field by field,
// the split of a real __nv_relfatbin (checked against a walk of the container headers written
// here), each record's digest and origin, and the errors that name the unit and what it read.
#include "package/containers.h"

#include "base/digest.h"

#include <doctest/doctest.h>
#include <set>

#include "scratch_dir.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using namespace cudaq_rt;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;
const std::string example_app = CUDAQ_RT_TEST_EXAMPLE_APP;

template <class T> T get(std::span<const uint8_t> b, size_t at) {
  T v;
  REQUIRE(at + sizeof v <= b.size());
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// Where each container of a section starts and how long it is, from the headers alone:
// magic, version, header size (u16 at 6), bytes after the header (u64 at 8), then zero padding
// to the next 8 bytes.
struct Walked {
  size_t offset, size;
  std::vector<std::pair<uint16_t, uint32_t>> entries; // kind, arch
};

std::vector<Walked> walk(std::span<const uint8_t> section) {
  std::vector<Walked> out;
  size_t pos = 0;
  while (pos < section.size()) {
    REQUIRE(get<uint32_t>(section, pos) == fatbin_magic);
    const size_t header = get<uint16_t>(section, pos + 6);
    const size_t size = header + get<uint64_t>(section, pos + 8);
    Walked w{pos, size, {}};
    for (size_t e = pos + header; e < pos + size;) {
      w.entries.push_back({get<uint16_t>(section, e), get<uint32_t>(section, e + 0x1c)});
      e += get<uint32_t>(section, e + 4) + get<uint64_t>(section, e + 8);
    }
    out.push_back(std::move(w));
    pos += size;
    while (pos < section.size() && pos % 8 != 0) {
      REQUIRE(section[pos] == 0);
      ++pos;
    }
  }
  return out;
}

InputFile open(const std::string &path) {
  auto f = InputFile::open(path);
  REQUIRE_MESSAGE(f, (f ? "" : f.error().str()));
  return std::move(*f);
}

} // namespace

TEST_CASE("an entry record carries every field of its entry") {
  Entry e;
  e.offset = 0x10;
  e.kind = 8;
  e.header_size = 0x48;
  e.payload_size = 4096;
  e.compressed_size = 1000;
  e.uncompressed_size = 5000;
  e.version_major = 13;
  e.version_minor = 4;
  e.arch = 90;
  e.flags = 0x8011;
  e.compression = Compression::zstd;
  e.options = "-O3";
  e.name = "lto";
  EntryRecord r = entry_record(e);
  CHECK(r.kind == "ltoir");
  CHECK(r.kind_code == 8);
  CHECK(r.arch == 90);
  CHECK(r.version_major == 13);
  CHECK(r.version_minor == 4);
  CHECK(r.flags == 0x8011);
  CHECK(r.compression == "zstd");
  CHECK(r.payload_size == 4096);
  CHECK(r.compressed_size == 1000);
  CHECK(r.uncompressed_size == 5000);
  CHECK(r.options == "-O3");
  CHECK(r.name == "lto");

  e.kind = 2;
  e.compression = Compression::none;
  CHECK(entry_record(e).kind == "cubin");
  CHECK(entry_record(e).compression == "none");
  e.kind = 1;
  e.compression = Compression::lz4;
  CHECK(entry_record(e).kind == "ptx");
  CHECK(entry_record(e).compression == "lz4");
  e.kind = 5; // carried through without being known
  CHECK(entry_record(e).kind == "kind-5");
  CHECK(entry_record(e).kind_code == 5);
}

TEST_CASE("a container record takes the digest it is given and has no origin yet") {
  const std::vector<uint8_t> bytes(40, 0xab);
  Container c;
  c.offset = 0x100;
  c.bytes = bytes;
  c.version = 1;
  Entry cubin, ltoir;
  cubin.kind = 2;
  cubin.arch = 80;
  ltoir.kind = 8;
  ltoir.arch = 80;
  c.entries = {cubin, ltoir};
  const Digest given = sha256(std::string_view("not these bytes"));
  ContainerRecord r = container_record(c, given, Role::bridge, "loopback");
  CHECK(r.digest == given);
  CHECK(r.size == 40);
  CHECK(r.role == Role::bridge);
  CHECK(r.bridge == "loopback");
  CHECK(r.added_by.empty());
  CHECK(r.origins.empty());
  REQUIRE(r.entries.size() == 2);
  CHECK(r.entries[0].kind == "cubin");
  CHECK(r.entries[1].kind == "ltoir");
  CHECK(r.has_ltoir());
  CHECK(r.entries[1].arch == 80);
}

TEST_CASE("an executable's __nv_relfatbin splits into the containers its headers describe") {
  InputFile app = open(example_app);
  const CodeUnit &u = app.units()[0];
  const std::vector<Walked> walked = walk(u.relfatbin);
  REQUIRE(walked.size() >= 4); // a container per translation unit, four of them

  auto split = split_unit(app, u);
  REQUIRE_MESSAGE(split, (split ? "" : split.error().str()));
  REQUIRE(split->size() == walked.size());
  for (size_t k = 0; k < walked.size(); ++k) {
    const Container &c = (*split)[k];
    CAPTURE(k);
    CHECK(c.offset == walked[k].offset);
    CHECK(c.bytes.data() == u.relfatbin.data() + walked[k].offset); // a view, not a copy
    CHECK(c.bytes.size() == walked[k].size);
    REQUIRE(c.entries.size() == walked[k].entries.size());
    for (size_t e = 0; e < c.entries.size(); ++e) {
      CHECK(c.entries[e].kind == walked[k].entries[e].first);
      CHECK(c.entries[e].arch == walked[k].entries[e].second);
    }
  }

  // Described with their origin: source index, member, offset and place in the section.
  auto described = read_unit_containers(app, u, 3, Role::application, "");
  REQUIRE_MESSAGE(described, (described ? "" : described.error().str()));
  REQUIRE(described->size() == walked.size());
  for (size_t k = 0; k < walked.size(); ++k) {
    const UnitContainer &uc = (*described)[k];
    CAPTURE(k);
    CHECK(uc.container.offset == walked[k].offset);
    CHECK(uc.record.digest == sha256(uc.container.bytes));
    CHECK(uc.record.size == walked[k].size);
    CHECK(uc.record.role == Role::application);
    CHECK(uc.record.bridge.empty());
    REQUIRE(uc.record.origins.size() == 1);
    CHECK(uc.record.origins[0].source == 3);
    CHECK(uc.record.origins[0].member.empty());
    CHECK(uc.record.origins[0].offset == walked[k].offset);
    CHECK(uc.record.origins[0].index == k);
    REQUIRE(uc.record.entries.size() == walked[k].entries.size());
    for (size_t e = 0; e < walked[k].entries.size(); ++e)
      CHECK(uc.record.entries[e].kind_code == walked[k].entries[e].first);
  }
  // Every translation unit was built with LTO-IR for sm_80 and sm_90 (examples/CMakeLists.txt).
  for (const UnitContainer &uc : *described) {
    std::set<uint32_t> archs;
    for (const EntryRecord &e : uc.record.entries)
      if (e.kind == "ltoir")
        archs.insert(e.arch);
    CHECK(archs == std::set<uint32_t>{80, 90});
  }
}

TEST_CASE("a bridge library's hooks, described as bridge code") {
  InputFile lib = open(CUDAQ_RT_TEST_LOOPBACK_BRIDGE);
  auto described = read_unit_containers(lib, lib.units()[0], 0, Role::bridge, "loopback");
  REQUIRE_MESSAGE(described, (described ? "" : described.error().str()));
  REQUIRE(!described->empty());
  CHECK(described->size() == walk(lib.units()[0].relfatbin).size());
  for (const UnitContainer &uc : *described) {
    CHECK(uc.record.role == Role::bridge);
    CHECK(uc.record.bridge == "loopback");
    CHECK(uc.record.has_ltoir());
  }
}

TEST_CASE("describe_container hashes the container's own bytes") {
  InputFile tiny = open(inputs + "/tiny.o");
  auto split = split_unit(tiny, tiny.units()[0]);
  REQUIRE(split);
  REQUIRE(split->size() == 1);
  const Container &c = (*split)[0];
  ContainerRecord r = describe_container(c, 7, "tiny.o#2", 0, Role::dispatcher, "");
  CHECK(r.digest == sha256(tiny.units()[0].relfatbin)); // the section is this one container
  CHECK(r.size == 80);
  CHECK(r.role == Role::dispatcher);
  REQUIRE(r.origins.size() == 1);
  CHECK(r.origins[0].source == 7);
  CHECK(r.origins[0].member == "tiny.o#2");
  CHECK(r.origins[0].offset == 0);
  CHECK(r.origins[0].index == 0);
  // tiny_container.S: one cubin entry for sm_80, version 1.8, no payload.
  REQUIRE(r.entries.size() == 1);
  CHECK(r.entries[0].kind == "cubin");
  CHECK(r.entries[0].arch == 80);
  CHECK(r.entries[0].version_major == 1);
  CHECK(r.entries[0].version_minor == 8);
  CHECK(r.entries[0].payload_size == 0);
  CHECK_FALSE(r.has_ltoir());
}

TEST_CASE("errors name the unit, and say whether a section or a fatbin file was read") {
  InputFile empty = open(inputs + "/empty_relfatbin.o");
  auto e = split_unit(empty, empty.units()[0]);
  REQUIRE_FALSE(e);
  CHECK(e.error().str() == "'" + inputs + "/empty_relfatbin.o': section __nv_relfatbin is empty");

  // An archive member: the unit is named path(member).
  const std::string lib = inputs + "/libsame.a";
  InputFile archive = open(lib);
  REQUIRE(archive.units().size() == 2);
  auto m = read_unit_containers(archive, archive.units()[1], 0, Role::application, "");
  REQUIRE_FALSE(m);
  CHECK(m.error().str() == "'" + lib + "(same.o#2)': section __nv_relfatbin is empty");
  auto first = read_unit_containers(archive, archive.units()[0], 2, Role::application, "");
  REQUIRE_MESSAGE(first, (first ? "" : first.error().str()));
  REQUIRE(first->size() == 1);
  CHECK((*first)[0].record.origins[0].member == "same.o#1");
  CHECK((*first)[0].record.origins[0].source == 2);

  // A raw fatbin whose container claims more bytes than the file holds.
  ScratchDir s;
  InputFile tiny = open(inputs + "/tiny.o");
  std::string bytes(reinterpret_cast<const char *>(tiny.units()[0].relfatbin.data()), 80);
  const uint64_t claimed = 72;
  std::memcpy(bytes.data() + 8, &claimed, 8);
  const std::string path = (s.path / "long.fatbin").string();
  std::ofstream(path, std::ios::binary) << bytes;
  InputFile fatbin = open(path);
  REQUIRE(fatbin.kind() == InputKind::fatbin);
  auto f = split_unit(fatbin, fatbin.units()[0]);
  REQUIRE_FALSE(f);
  CHECK(f.error().str() ==
        "'" + path + "': fatbin: container 0 at offset 0x0 claims 72 bytes but 64 remain");
}
