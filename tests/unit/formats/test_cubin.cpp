// read_cubin on cubins nvcc made at build time from unit/device_fixture.cu (a module for sm_90,
// relocatable units for sm_80), on the same bytes with their header fields changed, and on what
// is not a 64-bit little-endian CUDA ELF.
#include "formats/cubin.h"

#include <doctest/doctest.h>

#include "unit_files.h"

#include <cstring>
#include <fstream>
#include <iterator>

using namespace cudaq_rt;
using unit_files::bytes;
using unit_files::read_file;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;

template <class T> T get(const std::string &b, size_t at) {
  T v;
  REQUIRE(at + sizeof v <= b.size());
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T> void put(std::string &b, size_t at, T v) {
  REQUIRE(at + sizeof v <= b.size());
  std::memcpy(b.data() + at, &v, sizeof v);
}

std::string error_of(const Expected<CubinInfo> &c) {
  return c ? std::string("(read)") : c.error().str();
}

// The file offset of the ELF64 .symtab's first symbol that is not a section's (LLVM names those by
// their section whatever their st_name says).
size_t first_named_symbol(const std::string &elf) {
  const auto shoff = get<uint64_t>(elf, 0x28);
  const auto shentsize = get<uint16_t>(elf, 0x3a), shnum = get<uint16_t>(elf, 0x3c);
  for (uint16_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + size_t(i) * shentsize;
    if (get<uint32_t>(elf, h + 4) != 2) // SHT_SYMTAB
      continue;
    const uint64_t at = get<uint64_t>(elf, h + 0x18), size = get<uint64_t>(elf, h + 0x20),
                   entsize = get<uint64_t>(elf, h + 0x38);
    for (uint64_t sym = at + entsize; sym < at + size; sym += entsize)
      if ((get<uint8_t>(elf, sym + 4) & 0xf) != 3) // STT_SECTION
        return sym;
  }
  FAIL("no named symbol in .symtab");
  return 0;
}

} // namespace

TEST_CASE("a module nvcc compiled for sm_90: its arch, kernel and global") {
  const std::string cubin = read_file(inputs + "/fixture_sm90.cubin");
  auto info = read_cubin(bytes(cubin), "fixture_sm90.cubin");
  REQUIRE_MESSAGE(info, error_of(info));
  CHECK(info->arch == 90);
  CHECK_FALSE(info->relocatable);
  CHECK(info->functions.count("cudaq_rt_test_kernel") == 1);
  CHECK(info->variables.count("cudaq_rt_test_global") == 1);
  CHECK(info->functions.count("cudaq_rt_test_global") == 0);
  CHECK(info->variables.count("cudaq_rt_test_kernel") == 0);
}

TEST_CASE("relocatable units nvcc compiled with -rdc for sm_80: every function, none undefined") {
  auto info = read_cubin(bytes(read_file(inputs + "/fixture_sm80_rdc.cubin")), "unit");
  REQUIRE_MESSAGE(info, error_of(info));
  CHECK(info->arch == 80);
  CHECK(info->relocatable);
  CHECK(info->functions.count("cudaq_rt_test_kernel") == 1);
  CHECK(info->functions.count("cudaq_rt_test_helper") == 1); // kept for other units to call

  // The unit that calls a function it does not define: the call's symbol is undefined there.
  auto calls = read_cubin(bytes(read_file(inputs + "/unresolved_sm80_rdc.cubin")), "unit");
  REQUIRE_MESSAGE(calls, error_of(calls));
  CHECK(calls->relocatable);
  CHECK(calls->functions.count("cudaq_rt_test_helper") == 1);
  CHECK(calls->functions.count("cudaq_rt_test_defined_nowhere") == 0);
  CHECK(calls->variables.count("cudaq_rt_test_defined_nowhere") == 0);
}

TEST_CASE("the arch is e_flags' bits 8 to 15, relocatable is ET_REL") {
  std::string cubin = read_file(inputs + "/fixture_sm90.cubin");
  REQUIRE(get<uint32_t>(cubin, 0x30) == 0x6005a04); // as nvcc 13 writes sm_90
  put<uint32_t>(cubin, 0x30, 0x6006402);            // and sm_100
  put<uint16_t>(cubin, 0x10, 1);                    // ET_REL
  auto info = read_cubin(bytes(cubin), "patched");
  REQUIRE_MESSAGE(info, error_of(info));
  CHECK(info->arch == 100);
  CHECK(info->relocatable);
  put<uint16_t>(cubin, 0x10, 3); // ET_DYN: loadable, not a unit
  CHECK_FALSE(read_cubin(bytes(cubin), "patched")->relocatable);
}

TEST_CASE("what is not a 64-bit little-endian CUDA ELF") {
  const std::string text = "not a cubin at all";
  const std::string e = error_of(read_cubin(bytes(text), "sm_90"));
  CHECK(e.rfind("'sm_90': linked output is not an ELF file: ", 0) == 0);
  CHECK(e.size() > std::string("'sm_90': linked output is not an ELF file: ").size());

  // A host object (x86-64, e_machine 62).
  CHECK(error_of(read_cubin(bytes(read_file(inputs + "/tiny.o")), "sm_90")) ==
        "'sm_90': linked output is not a CUDA ELF (e_machine 62)");

  // Headers alone, with no sections: a 32-bit one and a big-endian 64-bit one, both EM_CUDA.
  std::string elf32(52, '\0');
  std::memcpy(elf32.data(),
              "\x7f"
              "ELF\x01\x01\x01",
              7);
  put<uint16_t>(elf32, 0x10, 2);   // ET_EXEC
  put<uint16_t>(elf32, 0x12, 190); // EM_CUDA
  put<uint32_t>(elf32, 0x14, 1);   // EV_CURRENT
  put<uint16_t>(elf32, 0x28, 52);  // e_ehsize
  put<uint16_t>(elf32, 0x2e, 40);  // e_shentsize
  CHECK(error_of(read_cubin(bytes(elf32), "sm_90")) ==
        "'sm_90': linked output is not a 64-bit little-endian ELF file");

  std::string elf64be(64, '\0');
  std::memcpy(elf64be.data(),
              "\x7f"
              "ELF\x02\x02\x01",
              7);
  elf64be[0x11] = 2;                            // ET_EXEC, big-endian
  elf64be[0x12] = 0, elf64be[0x13] = char(190); // EM_CUDA
  elf64be[0x17] = 1;                            // EV_CURRENT
  elf64be[0x35] = 64;                           // e_ehsize
  elf64be[0x3b] = 64;                           // e_shentsize
  CHECK(error_of(read_cubin(bytes(elf64be), "sm_90")) ==
        "'sm_90': linked output is not a 64-bit little-endian ELF file");
}

TEST_CASE("a symbol table whose entries point nowhere") {
  const std::string cubin = read_file(inputs + "/fixture_sm90.cubin");
  const size_t sym = first_named_symbol(cubin);
  std::string bad_name = cubin;
  put<uint32_t>(bad_name, sym, 0xfffffff0); // st_name past the string table
  CHECK(error_of(read_cubin(bytes(bad_name), "sm_90")) ==
        "'sm_90': linked output has a malformed symbol table");
  std::string bad_section = cubin;
  put<uint16_t>(bad_section, sym + 6, 0xfe00); // st_shndx past the section headers
  CHECK(error_of(read_cubin(bytes(bad_section), "sm_90")) ==
        "'sm_90': linked output has a malformed symbol table");
}
