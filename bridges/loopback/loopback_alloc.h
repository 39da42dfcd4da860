// The loopback ring's memory: allocated and released with the CUDA runtime, for every bridge whose
// device side is the loopback ring's (the loopback bridge itself, and the UDP bridge, whose host
// threads feed the same ring from a socket). loopback_ring.h explains the layout.
#ifndef CUDAQ_RT_LOOPBACK_ALLOC_H
#define CUDAQ_RT_LOOPBACK_ALLOC_H

#include "loopback_host.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace cudaq_rt::loopback {

// Allocates the rings (mapped pinned host memory) and the device context and staging frames
// (device memory) of `b` for that shape (check_ring_shape, loopback_host.h, said yes), in the
// current CUDA context; frames of at least bulk_min bytes travel in bulk (0: never). On failure,
// says why in `error` and leaves nothing allocated.
bool allocate_ring(cudaq_rt_bridge *b, uint32_t slots, uint32_t slot_size, uint32_t layout,
                   uint32_t bulk_min, std::string &error);

// Frees what allocate_ring allocated (the dispatch kernel must have stopped).
void release_ring(cudaq_rt_bridge *b);

} // namespace cudaq_rt::loopback

#endif // CUDAQ_RT_LOOPBACK_ALLOC_H
