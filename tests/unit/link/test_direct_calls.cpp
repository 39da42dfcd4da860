#include "cudaq_rt/wire.h"
#include "formats/export_records.h"
#include "link/direct_calls.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace cudaq_rt;

namespace {

ExportEntry handler(const std::string &name, bool direct) {
  ExportEntry e;
  e.name = name;
  e.kind = export_kind_name(ExportKind::handler);
  e.function_id = cudaq_rt_function_id(name.c_str());
  e.symbol = handler_symbol(name);
  e.direct = direct;
  return e;
}

AliasEntry alias(const std::string &name, const std::string &target) {
  return {name, target, cudaq_rt_function_id(name.c_str())};
}

// The case for `id`, up to the next case or the switch's end.
std::string case_of(const std::string &source, uint32_t id) {
  const std::string label = "  case " + hex(id) + "u:\n";
  const size_t at = source.find(label);
  if (at == std::string::npos)
    return {};
  const size_t end = source.find("    break;\n", at);
  return source.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

} // namespace

TEST_CASE("the unit calls by name only the handlers that have a named call, under every id") {
  Manifest m;
  m.exports = {handler("echo", true), handler("legacy", false), handler("parity", true)};
  ExportEntry kernel;
  kernel.name = "my_kernel";
  kernel.kind = export_kind_name(ExportKind::dispatch_kernel);
  m.exports.push_back(kernel);
  m.aliases = {alias("echo_v2", "echo"), alias("legacy_v2", "legacy")};
  CHECK(has_direct_handlers(m));
  const std::string s = direct_calls_source(m);

  // One declaration and one call by name per direct handler; none for the others.
  CHECK(s.find("__device__ int cudaq_rt_handler_call__echo(") != std::string::npos);
  CHECK(s.find("__device__ int cudaq_rt_handler_call__parity(") != std::string::npos);
  CHECK(s.find("cudaq_rt_handler_call__legacy") == std::string::npos);
  CHECK(s.find("my_kernel") == std::string::npos);

  // A case compares the table's pointer before it calls by name.
  const std::string echo = case_of(s, cudaq_rt_function_id("echo"));
  REQUIRE(!echo.empty());
  CHECK(echo.find("if (handler == cudaq_rt_handler_call__echo) { // echo\n") != std::string::npos);
  CHECK(echo.find("= cudaq_rt_handler_call__echo(input, output, arg_len, max_result_len, &len);") !=
        std::string::npos);
  // The alias of a direct handler gets its case; the alias of the other, none.
  const std::string echo_v2 = case_of(s, cudaq_rt_function_id("echo_v2"));
  CHECK(echo_v2.find("if (handler == cudaq_rt_handler_call__echo) { // echo_v2\n") !=
        std::string::npos);
  CHECK(case_of(s, cudaq_rt_function_id("legacy")).empty());
  CHECK(case_of(s, cudaq_rt_function_id("legacy_v2")).empty());
  CHECK(!case_of(s, cudaq_rt_function_id("parity")).empty());
  // Every other call, through the pointer.
  CHECK(s.find("  const int status = handler(input, output, arg_len, max_result_len, &len);\n") !=
        std::string::npos);

  // Cases in ascending function_id, whatever the manifest's order: the same exports always give
  // the same bytes (the unit's digest is part of the link's key).
  std::vector<uint32_t> ids = {cudaq_rt_function_id("echo"), cudaq_rt_function_id("echo_v2"),
                               cudaq_rt_function_id("parity")};
  std::sort(ids.begin(), ids.end());
  size_t last = 0;
  for (uint32_t id : ids) {
    const size_t at = s.find("  case " + hex(id) + "u:");
    REQUIRE(at != std::string::npos);
    CHECK(at > last);
    last = at;
  }
  std::swap(m.exports[0], m.exports[2]);
  CHECK(direct_calls_source(m) == s);
}

TEST_CASE("two names with one function_id share a case, each behind its own pointer check") {
  Manifest m;
  m.exports = {handler("a", true), handler("b", true)};
  m.exports[1].function_id = m.exports[0].function_id; // as if FNV-1a collided
  const std::string c = case_of(direct_calls_source(m), m.exports[0].function_id);
  CHECK(c.find("if (handler == cudaq_rt_handler_call__a)") != std::string::npos);
  CHECK(c.find("if (handler == cudaq_rt_handler_call__b)") != std::string::npos);
}

TEST_CASE("a package without direct handlers still gets a unit that calls through the pointer") {
  Manifest m;
  m.exports = {handler("legacy", false)};
  CHECK(!has_direct_handlers(m));
  const std::string s = direct_calls_source(m);
  CHECK(s.find("case") == std::string::npos);
  CHECK(s.find("handler(input, output, arg_len, max_result_len, &len)") != std::string::npos);
  auto ltoir = compile_direct_calls(s, "pkg");
  REQUIRE_MESSAGE(ltoir, (ltoir ? "" : ltoir.error().str()));
  CHECK(!ltoir->empty());
}

TEST_CASE("NVRTC compiles the unit to LTO-IR, and its log comes with a failure") {
  Manifest m;
  m.exports = {handler("echo", true)};
  auto ltoir = compile_direct_calls(direct_calls_source(m), "pkg");
  REQUIRE_MESSAGE(ltoir, (ltoir ? "" : ltoir.error().str()));
  CHECK(ltoir->size() > 100);

  auto bad = compile_direct_calls("__device__ int broken( {", "pkg");
  REQUIRE_FALSE(bad);
  const std::string message = bad.error().str();
  CHECK(message.find("'pkg': the unit of direct calls: NVRTC compile failed "
                     "(NVRTC_ERROR_COMPILATION): ") != std::string::npos);
  CHECK(message.find("cudaq_rt_direct_calls.cu") != std::string::npos);
}
