// interpose/: libcudaq_rt_nvjitlink.so, the nvJitLink interposer: the nvJitLink C API of the
// toolkit it is built against, with every link a program makes through it looked up in the link
// cache (cache/) and, with CUDAQ_RT_NVJITLINK_RECORD, recorded as a package (package/) that
// cudaq-rt-link links again for other archs. It stands on base/, formats/, package/ and cache/;
// nothing else in cudaq-rt calls it. man/cudaq-rt-nvjitlink.7 is its user's guide.
//
// This file: the real library's entry points, which every call ends in.
#pragma once

#include "cudaq_rt/error.h"

#include <nvJitLink.h>

namespace cudaq_rt {

// The API of the toolkit this is built against (nvJitLink.h): a toolkit whose header declares
// other versioned names does not compile this.
struct RealNvJitLink {
  decltype(&__nvJitLinkCreate_13_0) create = nullptr;
  decltype(&__nvJitLinkDestroy_13_0) destroy = nullptr;
  decltype(&__nvJitLinkAddData_13_0) add_data = nullptr;
  decltype(&__nvJitLinkAddFile_13_0) add_file = nullptr;
  decltype(&__nvJitLinkComplete_13_0) complete = nullptr;
  decltype(&__nvJitLinkGetLinkedCubinSize_13_0) cubin_size = nullptr;
  decltype(&__nvJitLinkGetLinkedCubin_13_0) cubin = nullptr;
  decltype(&__nvJitLinkGetLinkedPtxSize_13_0) ptx_size = nullptr;
  decltype(&__nvJitLinkGetLinkedPtx_13_0) ptx = nullptr;
  decltype(&__nvJitLinkGetErrorLogSize_13_0) error_log_size = nullptr;
  decltype(&__nvJitLinkGetErrorLog_13_0) error_log = nullptr;
  decltype(&__nvJitLinkGetInfoLogSize_13_0) info_log_size = nullptr;
  decltype(&__nvJitLinkGetInfoLog_13_0) info_log = nullptr;
  decltype(&nvJitLinkVersion) version = nullptr;
  void *library = nullptr; // the dlopen handle, when it was loaded by path

  // Any entry point by name, in the real library (null where it has none).
  void *symbol(const char *name) const;
};

// The version node of the toolkit's library (nm -D libnvJitLink.so: "nvJitLinkCreate@@...").
constexpr const char *nvjitlink_version_node = "libnvJitLink.so.13";
// Where the real library is loaded from when this library stands in for it on the loader's path
// (no other definition follows this one): $CUDAQ_RT_NVJITLINK_REAL, else the toolkit's.
constexpr const char *nvjitlink_real_env = "CUDAQ_RT_NVJITLINK_REAL";

// The real library: the next definition after this library's (LD_PRELOAD), else the library
// loaded by path. Found on the first call, remembered; an error when there is none.
Expected<const RealNvJitLink *> real_nvjitlink();

} // namespace cudaq_rt
