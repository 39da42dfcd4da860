// The nvJitLink library a process links with, loaded with dlopen, and nvJitLink's C API as a
// table of function pointers looked up by name (the tools' library here; the interposer's real
// library in interpose/real_nvjitlink.cpp).
//
// Why by name, at run time: a fleet links with the nvJitLink it chooses (a newer 13.x that knows
// newer GPUs, the one its containers ship), not only the one cudaq-rt was built against. The
// header's inline wrappers bind a program to one minor release's versioned names
// (nvJitLinkCreate -> __nvJitLinkCreate_13_0); every release of both majors (12.x, 13.x) also
// exports the unversioned names, under its own version node, so those are what a library of any
// release is asked for. The C declarations are the same shape in 12.x and 13.x.
#pragma once

#include "cudaq_rt/error.h"

#include <nlohmann/json.hpp>
#include <nvJitLink.h>

#include <functional>
#include <string>

namespace cudaq_rt {

// nvJitLink's C API, every function the tools and the interposer call on their own account.
struct NvJitLinkFunctions {
  nvJitLinkResult (*create)(nvJitLinkHandle *, uint32_t, const char *const *) = nullptr;
  nvJitLinkResult (*destroy)(nvJitLinkHandle *) = nullptr;
  nvJitLinkResult (*add_data)(nvJitLinkHandle, nvJitLinkInputType, const void *, size_t,
                              const char *) = nullptr;
  nvJitLinkResult (*add_file)(nvJitLinkHandle, nvJitLinkInputType, const char *) = nullptr;
  nvJitLinkResult (*complete)(nvJitLinkHandle) = nullptr;
  nvJitLinkResult (*cubin_size)(nvJitLinkHandle, size_t *) = nullptr;
  nvJitLinkResult (*cubin)(nvJitLinkHandle, void *) = nullptr;
  nvJitLinkResult (*ptx_size)(nvJitLinkHandle, size_t *) = nullptr;
  nvJitLinkResult (*ptx)(nvJitLinkHandle, char *) = nullptr;
  nvJitLinkResult (*error_log_size)(nvJitLinkHandle, size_t *) = nullptr;
  nvJitLinkResult (*error_log)(nvJitLinkHandle, char *) = nullptr;
  nvJitLinkResult (*info_log_size)(nvJitLinkHandle, size_t *) = nullptr;
  nvJitLinkResult (*info_log)(nvJitLinkHandle, char *) = nullptr;
  nvJitLinkResult (*version)(unsigned *, unsigned *) = nullptr;

  // Fills every pointer through `lookup(name)` (an unversioned name, "nvJitLinkCreate"); the
  // name of the first one it lacks, or empty when it has them all.
  std::string find_all(const std::function<void *(const char *)> &lookup);
};

// A loaded libnvJitLink: where it came from, its version, its entry points.
struct NvJitLinkLibrary {
  std::string path;     // as asked for: a path, or a soname the loader searched for
  std::string resolved; // the file the loader opened (realpath)
  unsigned major = 0, minor = 0;
  NvJitLinkFunctions api;
  // Where the library is the nvJitLink interposer (libcudaq_rt_nvjitlink_cuNN.so) standing in for
  // the real one: its hooks, so that links it would cache twice bypass it, and the real library's
  // nvJitLinkVersion for the link cache's key.
  void (*bypass)(int) = nullptr;
  void *real_version = nullptr;

  std::string version() const; // "13.5"
  // "nvJitLink 13.5 (/path/libnvJitLink.so.13)"
  std::string describe() const;
};

// Where the library is chosen, highest first: a tool's --nvjitlink or the C API's
// cudaq_rt_config.nvjitlink (choose_nvjitlink), $CUDAQ_RT_NVJITLINK, else the toolkit's
// (libnvJitLink.so.<major of the CUDA cudaq-rt was built with> through the loader's search, then
// the toolkit's library directory).
constexpr const char *nvjitlink_env = "CUDAQ_RT_NVJITLINK";

// Chooses the process's library by path before its first link; choosing the library already in
// use again is fine, another one is an error (a process links with one nvJitLink: the link cache
// keys every entry by it). Loads it at once, so that a bad path is a usage error.
Expected<const NvJitLinkLibrary *> choose_nvjitlink(const std::string &path);

// The process's library: the chosen one, else the environment's, else the toolkit's; loaded on
// the first call and kept.
Expected<const NvJitLinkLibrary *> process_nvjitlink();

// The process's library if it has been loaded, else null (loads nothing: for reports).
const NvJitLinkLibrary *loaded_nvjitlink();
// The same for --json: {"version": "13.5", "path": "..."}, or null where nothing needed one.
nlohmann::json loaded_nvjitlink_json();

// Why `lib` cannot link the device code this runtime ships (the built-in dispatch kernels and the
// bridges' hooks, LTO-IR made by the CUDA that built cudaq-rt), or empty: nvJitLink reads no LTO-IR
// of another major, nor of a newer release than its own.
std::string nvjitlink_refuses_runtime_code(const NvJitLinkLibrary &lib);

// "13.0": the CUDA release whose nvcc made the runtime's device code.
std::string runtime_device_code_cuda();

} // namespace cudaq_rt
