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
  bool complete = true; // every handler of the package has a named call
  for (const ExportEntry &e : m.exports)
    if (e.kind == export_kind_name(ExportKind::handler)) {
      complete = complete && e.direct;
      if (e.direct) {
        handlers.push_back(e.name);
        cases[e.function_id].emplace_back(e.name, e.name);
      }
    }
  complete = complete && !handlers.empty();
  for (const AliasEntry &a : m.aliases)
    if (std::find(handlers.begin(), handlers.end(), a.handler) != handlers.end())
      cases[a.function_id].emplace_back(a.name, a.handler);
  // Whatever order the manifest lists them in, the same exports give the same bytes: the unit's
  // digest is part of the link's key.
  std::sort(handlers.begin(), handlers.end());
  for (auto &[id, names] : cases)
    std::sort(names.begin(), names.end());
  auto index_of = [&](const std::string &h) {
    return std::find(handlers.begin(), handlers.end(), h) - handlers.begin();
  };

  // The handler is found first (k: its index among the direct ones), by the function_id's case
  // and then by the pointer alone (a table that pairs ids and handlers otherwise: an
  // application's), and called from one place each, so that LTO inlines each body once. Each call
  // gets a result_len of its own, copied out after it: the caller's then never reaches a call
  // through the pointer, and once this is inlined into the kernel it can stay in a register on
  // every path but that one.
  // Where every handler of the package has a named call (`complete`), there is no call through the
  // pointer at all: the runtime admits only the module's handlers into a table
  // (Server::set_function_table), and each is one of these. A kernel with a call anywhere in it,
  // even one never taken, answers a lone 8-byte echo 0.3 us later on the loopback bridge, and
  // serves 20% fewer requests at 64 in flight (bench/loopback_rtt.md): a pointer that is none of
  // them (a custom kernel's own) answers -1, a handler fault, instead.
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
       "  int k = -1;\n"
       "  switch (function_id) {\n";
  for (const auto &[id, names] : cases) {
    s += cat("  case ", hex(id), "u:\n");
    for (const auto &[wire, handler] : names)
      s += cat("    if (handler == ", handler_call_symbol(handler), ") // ", wire,
               "\n      k = ", index_of(handler), ";\n");
    s += "    break;\n";
  }
  s += "  }\n";
  if (!handlers.empty()) {
    s += "  if (k < 0) { // by the pointer alone\n";
    for (size_t i = 0; i < handlers.size(); ++i)
      s += cat("    ", i ? "else " : "", "if (handler == ", handler_call_symbol(handlers[i]),
               ")\n      k = ", i, ";\n");
    s += "  }\n";
  }
  s += "  unsigned len = *result_len;\n  int status;\n  switch (k) {\n";
  for (size_t i = 0; i < handlers.size(); ++i)
    s += cat("  case ", i, ":\n    status = ", handler_call_symbol(handlers[i]), "(", args,
             ");\n    break;\n");
  s += complete ? "  default: // none of the module's handlers\n    status = -1;\n    break;\n"
                : cat("  default:\n    status = handler(", args, ");\n    break;\n");
  s += "  }\n  *result_len = len;\n  return status;\n}\n}\n";
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
