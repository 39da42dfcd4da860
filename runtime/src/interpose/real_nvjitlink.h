// interpose/: libcudaq_rt_nvjitlink_cu12.so and _cu13.so, the nvJitLink interposer, one build of
// one source per nvJitLink major: the nvJitLink C API under every name the newest library of that
// major exports, with every link a program makes through it looked up in the link cache (cache/)
// and, with CUDAQ_RT_NVJITLINK_RECORD, recorded as a package (package/) that cudaq-rt-link links
// again for other archs. It stands on base/, formats/, package/ and cache/; nothing else in
// cudaq-rt calls it. man/cudaq-rt-nvjitlink.7 is its user's guide.
//
// This file: the real library, which every call ends in.
#pragma once

#include "base/nvjitlink_library.h"
#include "cudaq_rt/error.h"

#include <string>

namespace cudaq_rt {

// What differs between the nvJitLink majors the interposer is built for (nvjitlink_api.cpp
// fills it from the build's CUDAQ_RT_NVJITLINK_MAJOR and _NEWEST_MINOR).
struct NvJitLinkMajor {
  unsigned major = 13;
  unsigned newest_minor = 0; // the newest release whose names the build defines
  const char *version_node;  // "libnvJitLink.so.13": the node and the library's file name
  const char *wheel_lib_dir; // where NVIDIA's wheel puts it under site-packages
  // The codes the real library answers where the interposer answers itself. CUDA 12's header
  // maps the codes 13 added onto older ones (NULL_INPUT -> INVALID_INPUT, OUTDATED_LIBRARY ->
  // INTERNAL), and so does its library.
  nvJitLinkResult null_input;
  nvJitLinkResult outdated;
};

// The real library: its entry points under the unversioned names (the calls the interposer makes
// on its own account), and any name on request (the one the program called).
struct RealNvJitLink {
  NvJitLinkFunctions api;
  void *library = nullptr; // the dlopen handle, or RTLD_NEXT (preloaded)
  const char *version_node = "libnvJitLink.so.13";
  std::string path; // where it was loaded from, for messages

  // Entry point `name` of the real library (under its version node, else unversioned), never the
  // interposer's; null where it has none.
  void *symbol(const char *name) const;
};

// Where the real library is loaded from when the interposer stands in for it on the loader's path
// (no other definition follows the interposer's): $CUDAQ_RT_NVJITLINK_REAL, else the CUDA
// toolkit's, else where NVIDIA's wheel puts it in a site-packages directory the process uses.
constexpr const char *nvjitlink_real_env = "CUDAQ_RT_NVJITLINK_REAL";

// The real library of `major`: the next definition after the interposer's (LD_PRELOAD), else the
// library loaded by path. Found on the first call, remembered; an error when there is none, or
// when the program's nvJitLink is another major's.
Expected<const RealNvJitLink *> real_nvjitlink(const NvJitLinkMajor &major);

} // namespace cudaq_rt
