#include "link/builtin_dispatcher.h"

#include <array>

// Defined by the .incbin object libdispatch builds (builtin_dispatcher_blob.S.in).
extern "C" const uint8_t cudaq_rt_builtin_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_builtin_dispatcher_fatbin_end[];
extern "C" const uint8_t cudaq_rt_warp_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_warp_dispatcher_fatbin_end[];
extern "C" const uint8_t cudaq_rt_builtin_direct_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_builtin_direct_dispatcher_fatbin_end[];
extern "C" const uint8_t cudaq_rt_warp_direct_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_warp_direct_dispatcher_fatbin_end[];
extern "C" const uint8_t cudaq_rt_builtin_lone_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_builtin_lone_dispatcher_fatbin_end[];
extern "C" const uint8_t cudaq_rt_warp_lone_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_warp_lone_dispatcher_fatbin_end[];

namespace cudaq_rt {

std::span<const BuiltinDispatcher> builtin_dispatchers() {
  static const std::array<BuiltinDispatcher, 2> all = {{
      {"builtin",
       CUDAQ_RT_UNIFIED_DISPATCH_KERNEL,
       1,
       1,
       false,
       builtin_dispatcher_fatbin(),
       {cudaq_rt_builtin_direct_dispatcher_fatbin_begin,
        cudaq_rt_builtin_direct_dispatcher_fatbin_end},
       {cudaq_rt_builtin_lone_dispatcher_fatbin_begin, cudaq_rt_builtin_lone_dispatcher_fatbin_end},
       "lone"},
      {"warp",
       CUDAQ_RT_WARP_DISPATCH_KERNEL,
       32,
       kMaxWarpBlocks,
       true,
       {cudaq_rt_warp_dispatcher_fatbin_begin, cudaq_rt_warp_dispatcher_fatbin_end},
       {cudaq_rt_warp_direct_dispatcher_fatbin_begin, cudaq_rt_warp_direct_dispatcher_fatbin_end},
       {cudaq_rt_warp_lone_dispatcher_fatbin_begin, cudaq_rt_warp_lone_dispatcher_fatbin_end},
       "warp_lone"},
  }};
  return all;
}

const BuiltinDispatcher *find_builtin_dispatcher(std::string_view name) {
  for (const BuiltinDispatcher &d : builtin_dispatchers())
    if (name == d.name)
      return &d;
  return nullptr;
}

std::span<const uint8_t> builtin_dispatcher_fatbin() {
  return {cudaq_rt_builtin_dispatcher_fatbin_begin, cudaq_rt_builtin_dispatcher_fatbin_end};
}

} // namespace cudaq_rt
