// nvJitLink through its C API. Facts this relies on, measured with CUDA 13.0's nvJitLink:
// - A handle is used by one thread. nvJitLink documents no thread safety, but separate handles on
//   separate threads link in parallel and give identical output (one link of a 3-TU program 251 ms
//   alone, 255 ms wall for two at once on 2 cores).
// - -arch=sm_NN is required (nvJitLinkCreate fails with MISSING_ARCH without it); LTO-IR needs
//   -lto (else LTO_NOT_ENABLED). LTO-IR links for its own arch and every newer one; LTO-IR newer
//   than the target fails with ARCH_MISMATCH, and LTO-IR from a newer toolkit or another CUDA
//   major than this nvJitLink is refused.
// - A FATBIN input contributes only its first container, which is why pack splits them.
// - The output is deterministic: repeated links, and the same code handed in as LTO-IR, fatbin or
//   object, give byte-identical cubins. That is what makes the content-addressed link cache sound.
// - nvJitLink keeps no disk cache of its own (no writes under strace, no speed-up across
//   handles), so the link cache is ours to keep.
#include "cudaq_rt/nvjitlink.h"

#include <nvJitLink.h>

#include <chrono>

namespace cudaq_rt {
namespace {

// nvJitLink's two logs, read the same way: size (with the NUL), then the text.
template <class SizeFn, class GetFn>
std::string read_log(nvJitLinkHandle h, SizeFn size, GetFn get) {
  size_t n = 0;
  if (size(h, &n) != NVJITLINK_SUCCESS || n == 0)
    return {};
  std::string s(n, '\0');
  if (get(h, s.data()) != NVJITLINK_SUCCESS)
    return {};
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

std::string error_log(nvJitLinkHandle h) {
  return read_log(h, nvJitLinkGetErrorLogSize, nvJitLinkGetErrorLog);
}
std::string info_log(nvJitLinkHandle h) {
  return read_log(h, nvJitLinkGetInfoLogSize, nvJitLinkGetInfoLog);
}

} // namespace

const char *nvjitlink_result_name(int result) {
  static const char *const names[] = {"SUCCESS",
                                      "UNRECOGNIZED_OPTION",
                                      "MISSING_ARCH",
                                      "INVALID_INPUT",
                                      "PTX_COMPILE",
                                      "NVVM_COMPILE",
                                      "INTERNAL",
                                      "THREADPOOL",
                                      "UNRECOGNIZED_INPUT",
                                      "FINALIZE",
                                      "NULL_INPUT",
                                      "INCOMPATIBLE_OPTIONS",
                                      "INCORRECT_INPUT_TYPE",
                                      "ARCH_MISMATCH",
                                      "OUTDATED_LIBRARY",
                                      "MISSING_FATBIN",
                                      "UNRECOGNIZED_ARCH",
                                      "UNSUPPORTED_ARCH",
                                      "LTO_NOT_ENABLED"};
  if (result >= 0 && result < static_cast<int>(std::size(names)))
    return names[result];
  return "UNKNOWN";
}

NvJitLinkOutcome nvjitlink_link(std::span<const std::string> options,
                                std::span<const NvJitLinkInput> inputs) {
  NvJitLinkOutcome out;
  auto start = std::chrono::steady_clock::now();
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvJitLinkHandle h = nullptr;
  nvJitLinkResult r = nvJitLinkCreate(&h, static_cast<uint32_t>(argv.size()), argv.data());
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "create", h ? error_log(h) : "", ""};
    if (h)
      nvJitLinkDestroy(&h);
    return out;
  }
  for (const NvJitLinkInput &in : inputs) {
    r = nvJitLinkAddData(h, NVJITLINK_INPUT_FATBIN, in.fatbin.data(), in.fatbin.size(),
                         in.name.c_str());
    if (r != NVJITLINK_SUCCESS) {
      out.failure = {r, "add " + in.name, error_log(h), info_log(h)};
      nvJitLinkDestroy(&h);
      return out;
    }
  }
  r = nvJitLinkComplete(h);
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "complete", error_log(h), info_log(h)};
    nvJitLinkDestroy(&h);
    return out;
  }
  size_t size = 0;
  r = nvJitLinkGetLinkedCubinSize(h, &size);
  if (r == NVJITLINK_SUCCESS) {
    out.result.cubin.resize(size);
    r = nvJitLinkGetLinkedCubin(h, out.result.cubin.data());
  }
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "get cubin", error_log(h), info_log(h)};
    nvJitLinkDestroy(&h);
    return out;
  }
  out.result.info_log = info_log(h);
  nvJitLinkDestroy(&h);
  out.result.link_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.ok = true;
  return out;
}

} // namespace cudaq_rt
