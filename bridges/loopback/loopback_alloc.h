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
// current CUDA context; requests of at least bulk_min bytes travel in bulk (0: never), and
// responses of at least response_bulk_min (CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS: bulk_min);
// with spare_frame, the device hooks want slot_size bytes of dynamic shared memory (the chain's
// spare frame, loopback_ring.h); `feeders` host threads feed it side by side (check_feeders said
// yes; the caller then makes them, make_feeders); `warps` warps of the warp form serve it side by
// side (check_warps said yes). On failure, says why in `error` and leaves nothing allocated.
bool allocate_ring(cudaq_rt_bridge *b, uint32_t slots, uint32_t slot_size, uint32_t layout,
                   uint32_t bulk_min, uint32_t response_bulk_min, bool spare_frame,
                   uint32_t feeders, uint32_t warps, std::string &error);

// Frees what allocate_ring allocated (the dispatch kernel must have stopped).
void release_ring(cudaq_rt_bridge *b);

// The current CUDA device has the bulk copy engine the device hooks use (compute capability 9 or
// more: their sm_90 build); false where that cannot be told (lay_out_for then keeps the defaults).
bool current_gpu_has_bulk_engine();

} // namespace cudaq_rt::loopback

#endif // CUDAQ_RT_LOOPBACK_ALLOC_H
