// The loopback bridge's host side: allocates the ring and feeds it from this process (a
// launcher's one-shot calls, benchmarks, the GPU tests). The ring protocol is explained in
// loopback_ring.h; send and receive are in loopback_host.h. One host thread drives an instance
// (with feeders=N, one thread each feeder), and its kernel serves it (loopback_ring.h), at a
// time.
#include "loopback_alloc.h"

#include <algorithm>
#include <string>
#include <string_view>

namespace {

using namespace cudaq_rt;
using namespace cudaq_rt::loopback;

// Why the last create or instance_config on this thread failed: last_error(NULL).
thread_local std::string create_error;

bool fail_create(std::string message) {
  create_error = std::move(message);
  return false;
}

struct Config {
  uint32_t slots = CUDAQ_RT_LOOPBACK_DEFAULT_SLOTS;
  uint32_t slot_size = CUDAQ_RT_LOOPBACK_DEFAULT_SLOT_SIZE;
  uint32_t layout = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS;
  uint32_t bulk_min = CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN;
  uint32_t response_bulk_min = CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS;
  uint32_t spare_frame = 0;
  uint32_t feeders = 1;
  uint32_t warps = 1;
};

bool parse_config(std::string_view config, Config &c) {
  BridgeOptions options;
  if (std::string why = options.parse(config); !why.empty())
    return fail_create(std::move(why));
  for (const auto &[key, value] : options.items()) {
    if (key == "layout") {
      if (!parse_layout(value, c.layout))
        return fail_create("option 'layout' is slots or lanes, got '" + value + "'");
      continue;
    }
    if (key == "spare_frame") {
      if (!parse_flag(value, c.spare_frame))
        return fail_create("option 'spare_frame' is 0 or 1, got '" + value + "'");
      continue;
    }
    uint32_t *target = key == "slots"           ? &c.slots
                       : key == "slot_size"     ? &c.slot_size
                       : key == "bulk"          ? &c.bulk_min
                       : key == "response_bulk" ? &c.response_bulk_min
                       : key == "feeders"       ? &c.feeders
                       : key == "warps"         ? &c.warps
                                                : nullptr;
    if (!target)
      return fail_create("unknown option '" + key +
                         "' (known: slots=N, slot_size=BYTES, layout=slots|lanes, bulk=BYTES, "
                         "response_bulk=BYTES, spare_frame=0|1, feeders=N, warps=N)");
    if (!parse_u32(value, *target))
      return fail_create("option '" + key + "' needs a number, got '" + value + "'");
  }
  if (std::string why = check_ring_shape(c.slots, c.slot_size, c.layout); !why.empty())
    return fail_create(std::move(why));
  if (std::string why = check_feeders(c.feeders, c.slots); !why.empty())
    return fail_create(std::move(why));
  if (std::string why = check_warps(c.warps, c.slots); !why.empty())
    return fail_create(std::move(why));
  return true;
}

void release(cudaq_rt_bridge *b) {
  release_ring(b);
  delete b;
}

cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  create_error.clear();
  if (!out) {
    create_error = "create: no place for the result";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = nullptr;
  Config c;
  if (!parse_config(config ? config : "", c))
    return CUDAQ_RT_BRIDGE_ERROR;

  auto *b = new cudaq_rt_bridge;
  if (!allocate_ring(b, c.slots, c.slot_size, c.layout, c.bulk_min, c.response_bulk_min,
                     c.spare_frame != 0, c.feeders, c.warps, create_error)) {
    delete b;
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  make_feeders(b, c.feeders);
  *out = b;
  return CUDAQ_RT_BRIDGE_OK;
}

cudaq_rt_bridge_result instance_config(const cudaq_rt_bridge_launch *launch, const char *config,
                                       char *out, size_t capacity, size_t *needed) {
  create_error.clear();
  BridgeOptions options;
  if (std::string why = options.parse(config); !why.empty()) {
    create_error = std::move(why);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  for (std::string why : {check_feeders_for(*launch, options), check_warps_for(*launch, options)})
    if (!why.empty()) {
      create_error = std::move(why);
      return CUDAQ_RT_BRIDGE_ERROR;
    }
  lay_out_for(*launch, options, current_gpu_has_bulk_engine());
  return write_instance_config(options.text(), out, capacity, needed);
}

void destroy(cudaq_rt_bridge *b) {
  if (b)
    release(b);
}

const char *last_error(const cudaq_rt_bridge *b) {
  return b ? b->error.c_str() : create_error.c_str();
}

void *device_context(cudaq_rt_bridge *b) {
  return b->device_ctx;
}
uint32_t slot_size(cudaq_rt_bridge *b) {
  return b->slot_size;
}
uint32_t num_slots(cudaq_rt_bridge *b) {
  return b->num_slots;
}
uint32_t dispatch_shared_bytes(cudaq_rt_bridge *b) {
  return b->spare_bytes;
}
cudaq_rt_bridge *feeder_of(cudaq_rt_bridge *b, uint32_t index) {
  return feeder(b, index);
}

// The ring work is in loopback_host.h, where the tests reach it.
cudaq_rt_bridge_result send(cudaq_rt_bridge *b, const void *frame, size_t size) {
  return send_request(b, frame, size);
}

cudaq_rt_bridge_result receive(cudaq_rt_bridge *b, void *buffer, size_t capacity, size_t *size) {
  return receive_response(b, buffer, capacity, size);
}

cudaq_rt_bridge_result send_batch(cudaq_rt_bridge *b, const void *const *frames,
                                  const size_t *sizes, size_t count, size_t *queued) {
  return send_requests(b, frames, sizes, count, queued);
}

cudaq_rt_bridge_result receive_batch(cudaq_rt_bridge *b, void *buffer, size_t stride, size_t *sizes,
                                     size_t count, size_t *taken) {
  return receive_responses(b, buffer, stride, sizes, count, taken);
}

// The name users pass to --bridge; bench/CMakeLists.txt builds variants of this bridge (other
// knobs of loopback_ring.h) under other names, side by side with it.
#ifndef CUDAQ_RT_LOOPBACK_NAME
#define CUDAQ_RT_LOOPBACK_NAME "loopback"
#endif

// Fed by the host: no start, drain, stop, address, counters or latency.
const cudaq_rt_bridge_ops loopback_ops = {
    .abi_version = CUDAQ_RT_BRIDGE_ABI_VERSION,
    .struct_size = sizeof(cudaq_rt_bridge_ops),
    .name = CUDAQ_RT_LOOPBACK_NAME,
    .description = "a ring of slots in mapped pinned host memory, fed by this process",
    .capabilities = CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES,
    .create = create,
    .destroy = destroy,
    .last_error = last_error,
    .device_context = device_context,
    .slot_size = slot_size,
    .num_slots = num_slots,
    .send = send,
    .receive = receive,
    .send_batch = send_batch,
    .receive_batch = receive_batch,
    .instance_config = instance_config,
    .dispatch_shared_bytes = dispatch_shared_bytes,
    .feeder = feeder_of,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const cudaq_rt_bridge_ops *
cudaq_rt_bridge_entry(void) {
  return &loopback_ops;
}
