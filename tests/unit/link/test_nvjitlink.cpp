// nvjitlink_link with the real nvJitLink on LTO-IR nvcc built from unit/device_fixture.cu (a few
// milliseconds a link): a module for a newer arch, a unit compiled alone and its final link, the
// same input twice giving the same bytes, and the failures callers explain (LTO-IR newer than the
// target, no -arch, LTO-IR without -lto, an unresolved call, bytes that are no fatbin), each with
// its stage and result. Then the once-per-process trial of per-TU compiles, and result names.
#include "link/nvjitlink.h"

#include <nvJitLink.h>

#include <doctest/doctest.h>

#include "unit_files.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

using namespace cudaq_rt;
using unit_files::bytes;
using unit_files::read_file;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;

// What the ELF header of a cubin says, read here rather than through cubin.cpp.
struct Header {
  uint16_t type = 0, machine = 0;
  uint32_t sm = 0;
};
Header header(const std::vector<uint8_t> &elf) {
  REQUIRE(elf.size() >= 64);
  REQUIRE(std::memcmp(elf.data(),
                      "\x7f"
                      "ELF",
                      4) == 0);
  Header h;
  std::memcpy(&h.type, elf.data() + 0x10, 2);
  std::memcpy(&h.machine, elf.data() + 0x12, 2);
  uint32_t flags;
  std::memcpy(&flags, elf.data() + 0x30, 4);
  h.sm = (flags >> 8) & 0xff;
  return h;
}

bool holds(const std::vector<uint8_t> &elf, std::string_view name) {
  return std::search(elf.begin(), elf.end(), name.begin(), name.end()) != elf.end();
}

// The LTO-IR of a fatbin container's first entry, which must be stored uncompressed.
std::string bare_ltoir(const std::string &container) {
  uint16_t header_size, kind;
  uint32_t entry_header, compressed;
  uint64_t payload;
  std::memcpy(&header_size, container.data() + 6, 2);
  const char *entry = container.data() + header_size;
  std::memcpy(&kind, entry, 2);
  std::memcpy(&entry_header, entry + 4, 4);
  std::memcpy(&payload, entry + 8, 8);
  std::memcpy(&compressed, entry + 0x10, 4);
  REQUIRE(kind == 8); // LTO-IR
  REQUIRE(compressed == 0);
  REQUIRE(header_size + entry_header + payload <= container.size());
  return container.substr(header_size + entry_header, payload);
}

NvJitLinkOutcome link(std::vector<std::string> options, std::vector<NvJitLinkInput> in) {
  return nvjitlink_link(options, in);
}

std::string failure_of(const NvJitLinkOutcome &o) {
  return o.ok ? std::string("(linked)")
              : cat(o.failure.stage, ": ", nvjitlink_result_name(o.failure.result), ": ",
                    o.failure.error_log);
}

} // namespace

TEST_CASE("LTO-IR for sm_80 links into a module for sm_90, the same bytes every time") {
  const std::string lto80 = read_file(inputs + "/fixture_lto80.fatbin");
  auto out = link({"-arch=sm_90", "-lto"}, {{"fixture_lto80.fatbin", bytes(lto80)}});
  REQUIRE_MESSAGE(out.ok, failure_of(out));
  const Header h = header(out.result.cubin);
  CHECK(h.machine == 190); // EM_CUDA
  CHECK(h.type == 2);      // ET_EXEC: a module a GPU loads
  CHECK(h.sm == 90);
  CHECK(holds(out.result.cubin, "cudaq_rt_test_kernel"));
  CHECK(out.result.link_ms > 0);
  CHECK(out.failure.stage.empty());

  auto again = link({"-arch=sm_90", "-lto"}, {{"again", bytes(lto80)}});
  REQUIRE(again.ok);
  CHECK(again.result.cubin == out.result.cubin);
}

TEST_CASE("a unit compiled alone is a relocatable cubin; the final link of units makes a module") {
  const std::string lto80 = read_file(inputs + "/fixture_lto80.fatbin");
  std::vector<std::string> unit{"-arch=sm_80", "-lto"};
  unit.insert(unit.end(), std::begin(nvjitlink_unit_options), std::end(nvjitlink_unit_options));
  auto compiled = link(unit, {{"fixture", bytes(lto80)}});
  REQUIRE_MESSAGE(compiled.ok, failure_of(compiled));
  CHECK(header(compiled.result.cubin).type == 1); // ET_REL
  CHECK(header(compiled.result.cubin).sm == 80);
  // -Xnvvm=--device-c keeps a function nothing in the unit calls by name from outside.
  CHECK(holds(compiled.result.cubin, "cudaq_rt_test_helper"));

  // A unit that calls a function no unit defines compiles alone all the same.
  const std::string unresolved = read_file(inputs + "/unresolved_lto80.fatbin");
  auto calls = link(unit, {{"unresolved", bytes(unresolved)}});
  REQUIRE_MESSAGE(calls.ok, failure_of(calls));
  CHECK(header(calls.result.cubin).type == 1);

  NvJitLinkInput object{"fixture.cubin", compiled.result.cubin, /*cubin=*/true};
  auto final_link = link({"-arch=sm_80"}, {object});
  REQUIRE_MESSAGE(final_link.ok, failure_of(final_link));
  CHECK(header(final_link.result.cubin).type == 2);
  CHECK(header(final_link.result.cubin).sm == 80);
  CHECK(holds(final_link.result.cubin, "cudaq_rt_test_kernel"));
}

TEST_CASE("LTO-IR newer than the target arch is refused: ARCH_MISMATCH") {
  const std::string lto100 = read_file(inputs + "/fixture_lto100.fatbin");
  const std::string ir = bare_ltoir(lto100);
  NvJitLinkInput bare{"fixture_lto100.ltoir", bytes(ir)};
  bare.ltoir = true;
  auto out = link({"-arch=sm_90", "-lto"}, {bare});
  REQUIRE_FALSE(out.ok);
  CHECK(out.failure.result == NVJITLINK_ERROR_ARCH_MISMATCH);
  CHECK(std::string(nvjitlink_result_name(out.failure.result)) == "ARCH_MISMATCH");
  CHECK(out.failure.stage == "add fixture_lto100.ltoir");
  CHECK(out.failure.error_log.find("LTOIR arch newer than target arch") != std::string::npos);
  CHECK(out.result.cubin.empty());

  // In a fatbin container, as packages hand it in, the same LTO-IR is refused when it is added
  // too (nvJitLink 13.0 says INVALID_INPUT, "bad input", there: it finds no entry it can use).
  auto contained = link({"-arch=sm_90", "-lto"}, {{"fixture_lto100.fatbin", bytes(lto100)}});
  REQUIRE_FALSE(contained.ok);
  CHECK(contained.failure.stage == "add fixture_lto100.fatbin");
  CHECK(contained.failure.result != NVJITLINK_SUCCESS);

  // The same LTO-IR links for its own arch, bare or contained.
  auto own = link({"-arch=sm_100", "-lto"}, {bare});
  REQUIRE_MESSAGE(own.ok, failure_of(own));
  CHECK(header(own.result.cubin).sm == 100);
  auto own_contained = link({"-arch=sm_100", "-lto"}, {{"fixture_lto100.fatbin", bytes(lto100)}});
  REQUIRE_MESSAGE(own_contained.ok, failure_of(own_contained));
  CHECK(own_contained.result.cubin == own.result.cubin);
}

TEST_CASE("bare LTO-IR (as NVRTC gives it) links as its fatbin does") {
  const std::string uncompressed = read_file(inputs + "/fixture_lto80_uncompressed.fatbin");
  const std::string ir = bare_ltoir(uncompressed);
  NvJitLinkInput bare{"fixture.ltoir", bytes(ir)};
  bare.ltoir = true;
  auto from_ir = link({"-arch=sm_90", "-lto"}, {bare});
  REQUIRE_MESSAGE(from_ir.ok, failure_of(from_ir));
  auto from_fatbin =
      link({"-arch=sm_90", "-lto"},
           {{"fixture_lto80.fatbin", bytes(read_file(inputs + "/fixture_lto80.fatbin"))}});
  REQUIRE_MESSAGE(from_fatbin.ok, failure_of(from_fatbin));
  CHECK(from_ir.result.cubin == from_fatbin.result.cubin);
  // Handed in as a fatbin, bare LTO-IR is not one.
  auto mistyped = link({"-arch=sm_90", "-lto"}, {{"fixture.ltoir", bytes(ir)}});
  REQUIRE_FALSE(mistyped.ok);
  CHECK(mistyped.failure.stage == "add fixture.ltoir");
}

TEST_CASE("failures keep their stage, result and nvJitLink's log") {
  const std::string lto80 = read_file(inputs + "/fixture_lto80.fatbin");
  auto no_arch = link({"-lto"}, {{"fixture", bytes(lto80)}});
  REQUIRE_FALSE(no_arch.ok);
  CHECK(no_arch.failure.stage == "create");
  CHECK(no_arch.failure.result == NVJITLINK_ERROR_MISSING_ARCH);

  auto no_lto = link({"-arch=sm_90"}, {{"fixture", bytes(lto80)}});
  REQUIRE_FALSE(no_lto.ok);
  CHECK(no_lto.failure.result == NVJITLINK_ERROR_LTO_NOT_ENABLED);

  const std::string unresolved = read_file(inputs + "/unresolved_lto80.fatbin");
  auto undefined = link({"-arch=sm_80", "-lto"}, {{"unresolved", bytes(unresolved)}});
  REQUIRE_FALSE(undefined.ok);
  CHECK(undefined.failure.stage == "complete");
  CHECK(undefined.failure.error_log.find("cudaq_rt_test_defined_nowhere") != std::string::npos);

  const std::string garbage = "these bytes are no fatbin container at all";
  auto bad = link({"-arch=sm_90", "-lto"},
                  {{"fixture", bytes(lto80)}, {"garbage.fatbin", bytes(garbage)}});
  REQUIRE_FALSE(bad.ok);
  CHECK(bad.failure.stage == "add garbage.fatbin");
  CHECK(bad.failure.result != NVJITLINK_SUCCESS);
}

TEST_CASE("this nvJitLink compiles a unit alone, unless CUDAQ_RT_FORCE_WHOLE_LINK says not to") {
  ::unsetenv(force_whole_link_env);
  CHECK(nvjitlink_unit_refusal() == "");
  ::setenv(force_whole_link_env, "1", 1);
  CHECK(nvjitlink_unit_refusal() == "CUDAQ_RT_FORCE_WHOLE_LINK is set");
  ::setenv(force_whole_link_env, "0", 1);
  CHECK(nvjitlink_unit_refusal() == "");
  ::setenv(force_whole_link_env, "", 1);
  CHECK(nvjitlink_unit_refusal() == "");
  ::unsetenv(force_whole_link_env);
}

TEST_CASE("result names are nvJitLink's enumerators without their prefix") {
  const std::pair<nvJitLinkResult, const char *> names[] = {
      {NVJITLINK_SUCCESS, "SUCCESS"},
      {NVJITLINK_ERROR_UNRECOGNIZED_OPTION, "UNRECOGNIZED_OPTION"},
      {NVJITLINK_ERROR_MISSING_ARCH, "MISSING_ARCH"},
      {NVJITLINK_ERROR_INVALID_INPUT, "INVALID_INPUT"},
      {NVJITLINK_ERROR_PTX_COMPILE, "PTX_COMPILE"},
      {NVJITLINK_ERROR_NVVM_COMPILE, "NVVM_COMPILE"},
      {NVJITLINK_ERROR_INTERNAL, "INTERNAL"},
      {NVJITLINK_ERROR_THREADPOOL, "THREADPOOL"},
      {NVJITLINK_ERROR_UNRECOGNIZED_INPUT, "UNRECOGNIZED_INPUT"},
      {NVJITLINK_ERROR_FINALIZE, "FINALIZE"},
      {NVJITLINK_ERROR_NULL_INPUT, "NULL_INPUT"},
      {NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS, "INCOMPATIBLE_OPTIONS"},
      {NVJITLINK_ERROR_INCORRECT_INPUT_TYPE, "INCORRECT_INPUT_TYPE"},
      {NVJITLINK_ERROR_ARCH_MISMATCH, "ARCH_MISMATCH"},
      {NVJITLINK_ERROR_OUTDATED_LIBRARY, "OUTDATED_LIBRARY"},
      {NVJITLINK_ERROR_MISSING_FATBIN, "MISSING_FATBIN"},
      {NVJITLINK_ERROR_UNRECOGNIZED_ARCH, "UNRECOGNIZED_ARCH"},
      {NVJITLINK_ERROR_UNSUPPORTED_ARCH, "UNSUPPORTED_ARCH"},
      {NVJITLINK_ERROR_LTO_NOT_ENABLED, "LTO_NOT_ENABLED"},
  };
  for (auto [result, name] : names)
    CHECK(std::string(nvjitlink_result_name(result)) == name);
  CHECK(std::string(nvjitlink_result_name(-1)) == "UNKNOWN");
  CHECK(std::string(nvjitlink_result_name(NVJITLINK_ERROR_LTO_NOT_ENABLED + 1)) == "UNKNOWN");
}
