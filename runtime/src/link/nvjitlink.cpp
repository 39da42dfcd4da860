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
//
// Compiling one translation unit alone (per-TU mode), measured with CUDA 13.0; none of it is
// documented, so nvjitlink_unit_refusal() tries it once per process before it is relied on:
// - -lto -Xptxas=-c on one unit's LTO-IR gives a relocatable cubin (ELF ET_REL): ptxas compiles
//   without resolving calls into other units. Without -c, ptxas fails on the first extern call
//   ("Unresolved extern function").
// - -Xptxas=-c alone is not enough: NVVM still optimizes the unit as a whole program and drops
//   every function nothing in the unit calls, such as a helper only another unit calls.
//   -Xnvvm=--device-c (libnvvm's own name for nvcc -dc; -device-c is refused) keeps external
//   definitions, as nvcc -dc does. Exported __device__ globals stay global either way.
// - The final link of the units' cubins (NVJITLINK_INPUT_CUBIN, no -lto) is nvlink's job: tens of
//   milliseconds where the whole-program link of 1,000 handlers took 100 s. A call into another
//   unit is then a real call (ABI, no inlining), as with nvcc -rdc without -dlto.
#include "link/nvjitlink.h"

#include "base/nvjitlink_library.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <dlfcn.h>

namespace cudaq_rt {
namespace {

// nvJitLink's two logs, read the same way: size (with the NUL), then the text.
template <class SizeFn, class GetFn>
std::string read_log(nvJitLinkHandle h, SizeFn *size, GetFn *get) {
  size_t n = 0;
  if (size(h, &n) != NVJITLINK_SUCCESS || n == 0)
    return {};
  std::string s(n, '\0');
  if (get(h, s.data()) != NVJITLINK_SUCCESS)
    return {};
  s.resize(s.find('\0') == std::string::npos ? s.size() : s.find('\0'));
  return s;
}

std::string error_log(const NvJitLinkFunctions &api, nvJitLinkHandle h) {
  return read_log(h, api.error_log_size, api.error_log);
}
std::string info_log(const NvJitLinkFunctions &api, nvJitLinkHandle h) {
  return read_log(h, api.info_log_size, api.info_log);
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

namespace {

// Where the library is the nvJitLink interposer standing in for the real one (on the loader's path
// as libnvJitLink.so.13), cudaq-rt's own links go straight to the real library: they go through
// the link cache already, and would be stored twice.
class InterposerBypass {
public:
  explicit InterposerBypass(const NvJitLinkLibrary &lib) : hook_(lib.bypass) {
    if (hook_)
      hook_(1);
  }
  ~InterposerBypass() {
    if (hook_)
      hook_(0);
  }

private:
  void (*hook_)(int);
};

} // namespace

NvJitLinkOutcome nvjitlink_link(std::span<const std::string> options,
                                std::span<const NvJitLinkInput> inputs, bool ptx) {
  NvJitLinkOutcome out;
  auto lib = process_nvjitlink();
  if (!lib) {
    out.failure = {NVJITLINK_ERROR_INTERNAL, "load", lib.error().str(), ""};
    return out;
  }
  const NvJitLinkFunctions &api = (*lib)->api;
  InterposerBypass bypass(**lib);
  auto start = std::chrono::steady_clock::now();
  std::vector<const char *> argv;
  for (const std::string &o : options)
    argv.push_back(o.c_str());
  nvJitLinkHandle h = nullptr;
  nvJitLinkResult r = api.create(&h, static_cast<uint32_t>(argv.size()), argv.data());
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "create", h ? error_log(api, h) : "", ""};
    if (h)
      api.destroy(&h);
    return out;
  }
  for (const NvJitLinkInput &in : inputs) {
    r = api.add_data(h,
                     in.type    ? static_cast<nvJitLinkInputType>(in.type)
                     : in.cubin ? NVJITLINK_INPUT_CUBIN
                     : in.ltoir ? NVJITLINK_INPUT_LTOIR
                                : NVJITLINK_INPUT_FATBIN,
                     in.fatbin.data(), in.fatbin.size(), in.name.c_str());
    if (r != NVJITLINK_SUCCESS) {
      out.failure = {r, "add " + in.name, error_log(api, h), info_log(api, h)};
      api.destroy(&h);
      return out;
    }
  }
  r = api.complete(h);
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "complete", error_log(api, h), info_log(api, h)};
    api.destroy(&h);
    return out;
  }
  size_t size = 0;
  r = ptx ? api.ptx_size(h, &size) : api.cubin_size(h, &size);
  if (r == NVJITLINK_SUCCESS) {
    out.result.cubin.resize(size);
    r = ptx ? api.ptx(h, reinterpret_cast<char *>(out.result.cubin.data()))
            : api.cubin(h, out.result.cubin.data());
  }
  if (r != NVJITLINK_SUCCESS) {
    out.failure = {r, "get cubin", error_log(api, h), info_log(api, h)};
    api.destroy(&h);
    return out;
  }
  out.result.info_log = info_log(api, h);
  api.destroy(&h);
  out.result.link_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.ok = true;
  return out;
}

// Defined by unit_probe_blob.S: unit_probe.cu compiled to LTO-IR for sm_80.
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_unit_probe_fatbin_end[];

namespace {

// The trial: the few lines of unit_probe.cu compiled alone must give a relocatable cubin that
// still defines the function nothing calls. What an ELF looks like is read from the header and
// the symbol names in its string table; cubin.cpp's full reader is for linked modules.
std::string try_unit_compile() {
  auto lib = process_nvjitlink();
  if (!lib)
    return lib.error().str();
  const std::string which = "nvJitLink " + (*lib)->version();
  std::vector<std::string> options{"-arch=sm_80", "-lto"};
  options.insert(options.end(), std::begin(nvjitlink_unit_options),
                 std::end(nvjitlink_unit_options));
  NvJitLinkInput probe{"unit_probe.cu",
                       {cudaq_rt_unit_probe_fatbin_begin, cudaq_rt_unit_probe_fatbin_end}};
  NvJitLinkOutcome out = nvjitlink_link(options, std::span<const NvJitLinkInput>(&probe, 1));
  if (!out.ok) {
    std::string log = out.failure.error_log.substr(0, out.failure.error_log.find('\n'));
    return cat(which, " refused -lto", " -Xptxas=-c -Xnvvm=--device-c (",
               nvjitlink_result_name(out.failure.result), log.empty() ? "" : ": " + log, ")");
  }
  const std::vector<uint8_t> &elf = out.result.cubin;
  constexpr uint8_t elf_magic[4] = {0x7f, 'E', 'L', 'F'};
  constexpr unsigned et_rel = 1; // e_type, u16 at offset 16
  bool relocatable = elf.size() > 18 && std::equal(elf_magic, elf_magic + 4, elf.begin()) &&
                     (elf[16] | elf[17] << 8) == et_rel;
  static constexpr std::string_view name = "cudaq_rt_unit_probe";
  bool kept = std::search(elf.begin(), elf.end(), name.begin(), name.end()) != elf.end();
  if (!relocatable || !kept)
    return cat(which, " gave ",
               relocatable ? "a unit without its function" : "no relocatable cubin",
               " for -lto -Xptxas=-c -Xnvvm=--device-c");
  return {};
}

} // namespace

std::string nvjitlink_unit_refusal() {
  if (const char *v = std::getenv(force_whole_link_env); v && *v && std::string_view(v) != "0")
    return cat(force_whole_link_env, " is set");
  static const std::string refusal = try_unit_compile();
  return refusal;
}

} // namespace cudaq_rt
