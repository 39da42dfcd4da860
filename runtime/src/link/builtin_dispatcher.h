// The dispatch kernels that ship inside the runtime library (libdispatch/src/*_dispatch.cu), each
// an LTO-IR-only fatbin for sm_80, linkable for sm_80 and every newer GPU. cudaq-rt-link adds the
// one a link asks for as an NVJITLINK_INPUT_FATBIN next to a bridge's hooks and the application's
// handlers, with -kernels-used=<its kernel>.
#pragma once

#include "cudaq_rt/dispatch.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace cudaq_rt {

// The most blocks the warp dispatcher is launched as (one serving warp and one row of counters
// each); a bridge may take fewer (the loopback ring: CUDAQ_RT_LOOPBACK_MAX_WARPS).
constexpr unsigned kMaxWarpBlocks = 32;

struct BuiltinDispatcher {
  const char *name;   // what --dispatcher takes: "builtin" (the unified kernel) or "warp"
  const char *kernel; // the kernel's name in the linked module
  unsigned threads;   // threads of its one block, unless the launcher is told otherwise
  // Blocks it may be launched as, each serving with its first `threads` threads (the warp
  // dispatcher: one warp a block, cudaq_rt/dispatch.h "Several warps"); 1: only one block serves.
  unsigned max_blocks;
  // It calls handlers from several threads at once: every handler of a package it links must be
  // exported with CUDAQ_RT_EXPORT_HANDLER_CONCURRENT.
  bool concurrent;
  std::span<const uint8_t> fatbin; // one container, static for the life of the process
  // The same kernel compiled with CUDAQ_RT_DIRECT_CALLS: it calls handlers through the unit of
  // direct calls a whole-program link generates (direct_calls.h).
  std::span<const uint8_t> direct_fatbin;
  // The first with the lone form (cudaq_rt/dispatch.h), which a per-TU link takes for a bridge
  // whose device code exports the hooks it calls: the set named lone_hooks
  // (CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone), or (warp_lone) for the warp kernel).
  std::span<const uint8_t> lone_fatbin;
  const char *lone_hooks;
};

// The unified kernel ("builtin", the default) and the warp-wide one ("warp").
std::span<const BuiltinDispatcher> builtin_dispatchers();
// nullptr when `name` is none of them.
const BuiltinDispatcher *find_builtin_dispatcher(std::string_view name);

// The unified kernel's fatbin.
std::span<const uint8_t> builtin_dispatcher_fatbin();

// The SM number their LTO-IR was built for: the oldest GPU they link for.
constexpr unsigned builtin_dispatcher_arch = 80;

} // namespace cudaq_rt
