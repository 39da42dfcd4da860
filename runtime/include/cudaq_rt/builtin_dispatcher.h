// The unified dispatch kernel that ships inside the runtime library (libdispatch/src/
// unified_dispatch.cu): an LTO-IR-only fatbin for sm_80, linkable for sm_80 and every newer GPU.
// cudaq-rt-link adds it as an NVJITLINK_INPUT_FATBIN next to a bridge's hooks and the
// application's handlers, with -kernels-used=builtin_dispatcher_kernel.
#pragma once

#include "cudaq_rt/dispatch.h"

#include <cstdint>
#include <span>

namespace cudaq_rt {

// One fatbin container, static for the life of the process.
std::span<const uint8_t> builtin_dispatcher_fatbin();

// The kernel's name in the linked module.
constexpr const char *builtin_dispatcher_kernel = CUDAQ_RT_UNIFIED_DISPATCH_KERNEL;

// The SM number its LTO-IR was built for: the oldest GPU it links for.
constexpr unsigned builtin_dispatcher_arch = 80;

} // namespace cudaq_rt
