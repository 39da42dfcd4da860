// The unit of direct calls (direct_calls.h), generated per package and compiled with NVRTC.
//
// Why: a handler called through the function table's pointer costs the dispatch kernel an ABI
// call (arguments in registers, result_len through local memory, the callee's generic loads and
// stores where the kernel knew the frames were in shared memory): about 500 cycles for an 8-byte
// echo where the same echo inlined costs 73 (bench/probe/call_cost.cu, H200). The table stays the
// truth (a caller may give its own, with any pointers the module defines): the generated code
// compares the pointer and only calls by name when it is the very function, so that LTO, which
// sees the named function's body in a whole-program link, can inline it.
#include "link/direct_calls.h"

#include "formats/export_records.h"

#include <nvrtc.h>

#include <algorithm>
#include <map>
#include <memory>

namespace cudaq_rt {

bool has_direct_handlers(const Manifest &m) {
  return std::any_of(m.exports.begin(), m.exports.end(), [](const ExportEntry &e) {
    return e.kind == export_kind_name(ExportKind::handler) && e.direct;
  });
}

std::string direct_calls_source(const Manifest &m) {
  // function_id -> the direct handlers answering it (one, unless two names collide in FNV-1a).
  std::map<uint32_t, std::vector<std::pair<std::string, std::string>>> cases; // {wire, handler}
  std::vector<std::string> handlers;
  for (const ExportEntry &e : m.exports)
    if (e.kind == export_kind_name(ExportKind::handler) && e.direct) {
      handlers.push_back(e.name);
      cases[e.function_id].emplace_back(e.name, e.name);
    }
  for (const AliasEntry &a : m.aliases)
    if (std::find(handlers.begin(), handlers.end(), a.handler) != handlers.end())
      cases[a.function_id].emplace_back(a.name, a.handler);
  // Whatever order the manifest lists them in, the same exports give the same bytes: the unit's
  // digest is part of the link's key.
  std::sort(handlers.begin(), handlers.end());
  for (auto &[id, names] : cases)
    std::sort(names.begin(), names.end());

  // Each call gets a result_len of its own, copied out after it: the caller's then never reaches
  // the call through the pointer, and once this is inlined into the kernel it can stay in a
  // register on every path but that one (where it would be passed to a call it sits in memory).
  const char *const args = "input, output, arg_len, max_result_len, &len";
  std::string s =
      "// The unit of direct calls cudaq-rt-link generated for this package "
      "(runtime/src/direct_calls.cpp).\n"
      "typedef int (*cudaq_rt_handler_fn)(const void *, void *, unsigned, unsigned, unsigned *);\n"
      "extern \"C\" {\n";
  for (const std::string &h : handlers)
    s += cat("__device__ int ", handler_call_symbol(h),
             "(const void *, void *, unsigned, unsigned, unsigned *);\n");
  s += "__device__ int cudaq_rt_call_direct(unsigned function_id, cudaq_rt_handler_fn handler,\n"
       "                                    const void *input, void *output, unsigned arg_len,\n"
       "                                    unsigned max_result_len, unsigned *result_len) {\n"
       "  switch (function_id) {\n";
  for (const auto &[id, names] : cases) {
    s += cat("  case ", hex(id), "u:\n");
    for (const auto &[wire, handler] : names) {
      const std::string call = handler_call_symbol(handler);
      s += cat("    if (handler == ", call, ") { // ", wire,
               "\n      unsigned len = *result_len;\n", "      const int status = ", call, "(",
               args, ");\n", "      *result_len = len;\n      return status;\n    }\n");
    }
    s += "    break;\n";
  }
  s += cat("  }\n  unsigned len = *result_len;\n  const int status = handler(", args,
           ");\n  *result_len = len;\n  return status;\n}\n}\n");
  return s;
}

Expected<std::vector<uint8_t>> compile_direct_calls(const std::string &source,
                                                    const std::string &subject) {
  auto failed = [&](const char *step, nvrtcResult r, const std::string &log = {}) {
    return make_error(subject, "the unit of direct calls: NVRTC ", step, " failed (",
                      nvrtcGetErrorString(r), ")", log.empty() ? "" : ": ", log);
  };
  nvrtcProgram raw = nullptr;
  if (nvrtcResult r =
          nvrtcCreateProgram(&raw, source.c_str(), "cudaq_rt_direct_calls.cu", 0, nullptr, nullptr);
      r != NVRTC_SUCCESS)
    return failed("create", r);
  std::unique_ptr<_nvrtcProgram, void (*)(_nvrtcProgram *)> program(
      raw, [](_nvrtcProgram *p) { nvrtcDestroyProgram(&p); });
  const char *options[] = {"-arch=compute_80", "-rdc=true", "-dlto", "-std=c++17"};
  if (nvrtcResult r = nvrtcCompileProgram(raw, static_cast<int>(std::size(options)), options);
      r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(raw, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      nvrtcGetProgramLog(raw, log.data());
      log.resize(size - 1);
    }
    return failed("compile", r, log);
  }
  size_t size = 0;
  if (nvrtcResult r = nvrtcGetLTOIRSize(raw, &size); r != NVRTC_SUCCESS)
    return failed("LTO-IR size", r);
  std::vector<uint8_t> ltoir(size);
  if (nvrtcResult r = nvrtcGetLTOIR(raw, reinterpret_cast<char *>(ltoir.data()));
      r != NVRTC_SUCCESS)
    return failed("LTO-IR", r);
  return ltoir;
}

} // namespace cudaq_rt
