#include "cudaq_rt/builtin_dispatcher.h"

// Defined by the .incbin object libdispatch builds (builtin_dispatcher_blob.S.in).
extern "C" const uint8_t cudaq_rt_builtin_dispatcher_fatbin_begin[];
extern "C" const uint8_t cudaq_rt_builtin_dispatcher_fatbin_end[];

namespace cudaq_rt {

std::span<const uint8_t> builtin_dispatcher_fatbin() {
  return {cudaq_rt_builtin_dispatcher_fatbin_begin, cudaq_rt_builtin_dispatcher_fatbin_end};
}

} // namespace cudaq_rt
