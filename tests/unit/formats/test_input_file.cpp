// InputFile: which kind of file an input is, where its device code and exports are (checked
// against the section headers read here, byte for byte), archive members' names, and the errors
// for what pack must not read: files that are not ELF, archives or fatbins, truncated ones, and
// FIFOs, devices, directories and dangling links, with or without a symbolic link in front.
#include "formats/input_file.h"

#include "formats/fatbin.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"
#include "unit_files.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <sys/stat.h>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using unit_files::read_file;
using unit_files::write_file;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;
const std::string example_app = CUDAQ_RT_TEST_EXAMPLE_APP;

template <class T> T get(const std::string &b, size_t at) {
  T v;
  REQUIRE(at + sizeof v <= b.size());
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// An ELF64 little-endian section header, found by name.
struct Section {
  size_t header_at = 0; // file offset of the section header
  uint64_t offset = 0, size = 0;
};

std::optional<Section> elf_section(const std::string &elf, const std::string &name) {
  const auto shoff = get<uint64_t>(elf, 0x28);
  const auto shentsize = get<uint16_t>(elf, 0x3a), shnum = get<uint16_t>(elf, 0x3c),
             shstrndx = get<uint16_t>(elf, 0x3e);
  const uint64_t strtab = get<uint64_t>(elf, shoff + shstrndx * shentsize + 0x18);
  for (uint16_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + size_t(i) * shentsize;
    const char *n = elf.c_str() + strtab + get<uint32_t>(elf, h);
    if (n == name)
      return Section{h, get<uint64_t>(elf, h + 0x18), get<uint64_t>(elf, h + 0x20)};
  }
  return std::nullopt;
}

std::string as_string(std::span<const uint8_t> s) {
  return {reinterpret_cast<const char *>(s.data()), s.size()};
}

// The span views the file's mapping exactly where the section header says its bytes are.
void check_views(const InputFile &f, std::span<const uint8_t> span, const Section &sec) {
  CHECK(span.data() == f.bytes().data() + sec.offset);
  CHECK(span.size() == sec.size);
}

std::string error_of(const Expected<InputFile> &f) {
  return f ? std::string("(opened)") : f.error().str();
}

} // namespace

TEST_CASE("an executable is one unit whose device code and exports are its sections") {
  const std::string elf = read_file(example_app);
  auto f = InputFile::open(example_app);
  REQUIRE_MESSAGE(f, error_of(f));
  CHECK(f->path() == example_app);
  CHECK(f->kind() == InputKind::executable); // a PIE: ET_DYN with a program interpreter
  CHECK(f->bytes().size() == elf.size());
  CHECK(as_string(f->bytes()) == elf);
  CHECK(f->mtime() == fs::last_write_time(example_app));
  REQUIRE(f->units().size() == 1);
  const CodeUnit &u = f->units()[0];
  CHECK(u.member.empty());
  CHECK(f->unit_name(u) == example_app);
  CHECK(u.has_relfatbin);
  CHECK(u.has_nv_fatbin); // nvcc's device link of -rdc code leaves one too
  auto relfatbin = elf_section(elf, "__nv_relfatbin");
  auto exports = elf_section(elf, ".cudaq_rt_exports");
  REQUIRE(relfatbin);
  REQUIRE(exports);
  check_views(*f, u.relfatbin, *relfatbin);
  check_views(*f, u.exports, *exports);
  CHECK(get<uint32_t>(as_string(u.relfatbin), 0) == fatbin_magic);

  // Moved, the file keeps its mapping: the spans still view the same bytes.
  const uint8_t *at = u.relfatbin.data();
  InputFile moved = std::move(*f);
  CHECK(moved.units()[0].relfatbin.data() == at);
  CHECK(as_string(moved.bytes()) == elf);
}

TEST_CASE("a stripped executable still has its device code and exports, found by section name") {
  auto full = InputFile::open(example_app);
  auto stripped = InputFile::open(inputs + "/app_stripped");
  REQUIRE_MESSAGE(full, error_of(full));
  REQUIRE_MESSAGE(stripped, error_of(stripped));
  CHECK(stripped->bytes().size() < full->bytes().size());
  CHECK(stripped->kind() == InputKind::executable);
  REQUIRE(stripped->units().size() == 1);
  const CodeUnit &s = stripped->units()[0], &u = full->units()[0];
  CHECK(as_string(s.relfatbin) == as_string(u.relfatbin));
  CHECK(as_string(s.exports) == as_string(u.exports));
  CHECK(!s.exports.empty());
}

TEST_CASE("a shared library is told from a PIE executable by its lack of an interpreter") {
  const std::string lib = CUDAQ_RT_TEST_LOOPBACK_BRIDGE;
  const std::string elf = read_file(lib);
  REQUIRE_FALSE(elf_section(elf, ".interp"));
  auto f = InputFile::open(lib);
  REQUIRE_MESSAGE(f, error_of(f));
  CHECK(f->kind() == InputKind::shared_library);
  REQUIRE(f->units().size() == 1);
  auto relfatbin = elf_section(elf, "__nv_relfatbin");
  REQUIRE(relfatbin);
  check_views(*f, f->units()[0].relfatbin, *relfatbin);
}

TEST_CASE("objects: one container, an empty section, and device code without -rdc") {
  auto tiny = InputFile::open(inputs + "/tiny.o");
  REQUIRE_MESSAGE(tiny, error_of(tiny));
  CHECK(tiny->kind() == InputKind::object);
  REQUIRE(tiny->units().size() == 1);
  const CodeUnit &t = tiny->units()[0];
  CHECK(t.has_relfatbin);
  CHECK_FALSE(t.has_nv_fatbin);
  CHECK(t.exports.empty());
  // tiny_container.S: a 16-byte container header and one 64-byte entry header.
  REQUIRE(t.relfatbin.size() == 80);
  CHECK(get<uint32_t>(as_string(t.relfatbin), 0) == fatbin_magic);
  CHECK(get<uint64_t>(as_string(t.relfatbin), 8) == 64);

  // An empty __nv_relfatbin still counts as present (pack then says it is empty).
  auto empty = InputFile::open(inputs + "/empty_relfatbin.o");
  REQUIRE_MESSAGE(empty, error_of(empty));
  REQUIRE(empty->units().size() == 1);
  CHECK(empty->units()[0].has_relfatbin);
  CHECK(empty->units()[0].relfatbin.empty());

  auto nordc = InputFile::open(inputs + "/nordc.o");
  REQUIRE_MESSAGE(nordc, error_of(nordc));
  REQUIRE(nordc->units().size() == 1);
  CHECK_FALSE(nordc->units()[0].has_relfatbin);
  CHECK(nordc->units()[0].has_nv_fatbin);
  CHECK(nordc->units()[0].relfatbin.empty());
}

TEST_CASE("archive members are units; members of one name are NAME#N; others are skipped") {
  const std::string lib = inputs + "/libsame.a";
  auto f = InputFile::open(lib);
  REQUIRE_MESSAGE(f, error_of(f));
  CHECK(f->kind() == InputKind::archive);
  // one/same.o (tiny.o), tiny_container.S (text: not a unit), two/same.o (empty_relfatbin.o).
  REQUIRE(f->units().size() == 2);
  const CodeUnit &first = f->units()[0], &second = f->units()[1];
  CHECK(first.member == "same.o#1");
  CHECK(second.member == "same.o#2");
  CHECK(f->unit_name(first) == lib + "(same.o#1)");
  CHECK(f->unit_name(second) == lib + "(same.o#2)");
  auto tiny = InputFile::open(inputs + "/tiny.o");
  REQUIRE(tiny);
  CHECK(as_string(first.relfatbin) == as_string(tiny->units()[0].relfatbin));
  // The member's span views the archive's own mapping.
  CHECK(first.relfatbin.data() >= f->bytes().data());
  CHECK(first.relfatbin.data() + first.relfatbin.size() <= f->bytes().data() + f->bytes().size());
  CHECK(second.has_relfatbin);
  CHECK(second.relfatbin.empty());

  auto two = InputFile::open(inputs + "/libtwo.a");
  REQUIRE_MESSAGE(two, error_of(two));
  REQUIRE(two->units().size() == 2);
  CHECK(two->units()[0].member == "tiny.o");
  CHECK(two->units()[1].member == "empty_relfatbin.o");
}

TEST_CASE("a raw fatbin is one unit: the whole file") {
  ScratchDir s;
  auto tiny = InputFile::open(inputs + "/tiny.o");
  REQUIRE(tiny);
  const std::string path =
      write_file(s.path / "tiny.fatbin", as_string(tiny->units()[0].relfatbin));
  auto f = InputFile::open(path);
  REQUIRE_MESSAGE(f, error_of(f));
  CHECK(f->kind() == InputKind::fatbin);
  REQUIRE(f->units().size() == 1);
  const CodeUnit &u = f->units()[0];
  CHECK(u.member.empty());
  CHECK(u.has_relfatbin);
  CHECK_FALSE(u.has_nv_fatbin);
  CHECK(u.exports.empty());
  CHECK(u.relfatbin.data() == f->bytes().data());
  CHECK(u.relfatbin.size() == 80);

  // nvcc -fatbin's own output.
  auto nvcc = InputFile::open(inputs + "/fixture_lto80.fatbin");
  REQUIRE_MESSAGE(nvcc, error_of(nvcc));
  CHECK(nvcc->kind() == InputKind::fatbin);
  CHECK(nvcc->units()[0].relfatbin.size() == fs::file_size(inputs + "/fixture_lto80.fatbin"));
}

TEST_CASE("input kinds have the names manifests use") {
  CHECK(std::string(input_kind_name(InputKind::executable)) == "executable");
  CHECK(std::string(input_kind_name(InputKind::shared_library)) == "shared-library");
  CHECK(std::string(input_kind_name(InputKind::object)) == "object");
  CHECK(std::string(input_kind_name(InputKind::archive)) == "archive");
  CHECK(std::string(input_kind_name(InputKind::fatbin)) == "fatbin");
}

TEST_CASE("files that are not ELF, an archive or a fatbin") {
  ScratchDir s;
  for (const std::string &bytes : {std::string("not a binary\n"), std::string(),
                                   std::string("\x7f"
                                               "EL"),
                                   std::string("!<arch")}) {
    const std::string path = write_file(s.path / "notes.txt", bytes);
    CHECK(error_of(InputFile::open(path)) ==
          "'" + path + "': not an ELF file, a static archive or a fatbin");
  }
}

TEST_CASE("a truncated or malformed ELF file or archive") {
  ScratchDir s;
  const std::string elf = read_file(example_app);
  const std::string head = write_file(s.path / "app_cut", elf.substr(0, 2000));
  const std::string e = error_of(InputFile::open(head));
  CHECK(e.rfind("'" + head + "': truncated or malformed ELF file: ", 0) == 0);
  CHECK(e.find("section header table goes past the end of the file") != std::string::npos);

  // A section whose size runs past the end of the file: named by the section.
  auto relfatbin = elf_section(elf, "__nv_relfatbin");
  REQUIRE(relfatbin);
  std::string big = elf;
  const uint64_t size = big.size();
  std::memcpy(big.data() + relfatbin->header_at + 0x20, &size, 8);
  const std::string past = write_file(s.path / "app_big_section", big);
  const std::string p = error_of(InputFile::open(past));
  CHECK(p.rfind("'" + past + "': section __nv_relfatbin: ", 0) == 0);
  CHECK(p.size() > ("'" + past + "': section __nv_relfatbin: ").size());

  const std::string archive =
      write_file(s.path / "lib_cut.a", read_file(inputs + "/libtwo.a").substr(0, 70));
  const std::string a = error_of(InputFile::open(archive));
  CHECK(a.rfind("'" + archive + "': truncated or malformed archive file: ", 0) == 0);
}

TEST_CASE("what is not a regular file is refused before it is read, links followed") {
  ScratchDir s;
  const fs::path fifo = s.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // O_NONBLOCK: the open returns at once although no one writes to the FIFO.
  CHECK(error_of(InputFile::open(fifo.string())) ==
        "'" + fifo.string() + "': is a FIFO or pipe, not a regular file");
  CHECK(error_of(InputFile::open("/dev/null")) ==
        "'/dev/null': is a character device, not a regular file");
  CHECK(error_of(InputFile::open(s.path.string())) == "'" + s.path.string() + "': is a directory");
  const fs::path missing = s.path / "no-such-file.o";
  CHECK(error_of(InputFile::open(missing.string())) ==
        "'" + missing.string() + "': cannot open: No such file or directory");

  // Inputs may be symbolic links (build systems make them); what they lead to is checked.
  auto link = [&](const std::string &name, const fs::path &target) {
    fs::create_symlink(target, s.path / name);
    return (s.path / name).string();
  };
  const std::string to_fifo = link("to_fifo", fifo), to_zero = link("to_zero", "/dev/zero"),
                    dangling = link("dangling", missing), to_app = link("to_app", example_app);
  CHECK(error_of(InputFile::open(to_fifo)) ==
        "'" + to_fifo + "': is a FIFO or pipe, not a regular file");
  CHECK(error_of(InputFile::open(to_zero)) ==
        "'" + to_zero + "': is a character device, not a regular file");
  CHECK(error_of(InputFile::open(dangling)) ==
        "'" + dangling + "': cannot open: No such file or directory");
  auto app = InputFile::open(to_app);
  REQUIRE_MESSAGE(app, error_of(app));
  CHECK(app->path() == to_app);
  CHECK(app->kind() == InputKind::executable);
  CHECK(app->bytes().size() == fs::file_size(example_app));
}
