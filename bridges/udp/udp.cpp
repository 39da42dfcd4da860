// The UDP bridge: a UDP socket on the host, the loopback ring to the GPU. Its device hooks are the
// loopback bridge's (loopback_device.cu, compiled into this library's own __nv_relfatbin), its ring
// memory is allocated the loopback bridge's way (loopback_alloc.h), and its host threads
// (udp_host.h) move datagrams between the socket and the ring. Configuration, from
// --bridge-arg: bind=ADDR (default 127.0.0.1), port=N (default 0: a free one), slots=N,
// slot_size=BYTES, layout=slots|lanes (as the loopback bridge), wait=spin|block (default spin),
// threads=1|2 (default 1: one thread receives and sends; 2: a thread each), cpu=N (the threads
// run on CPU N, and N+1 for the sending one); instance_config adds the layout for the warp form
// and puts GPU i of several on port N+i, and its threads from CPU N+i*threads.
#include "loopback_alloc.h"
#include "udp_host.h"

#include <memory>
#include <new>
#include <string>
#include <unistd.h>

namespace {

using namespace cudaq_rt;

// Why the last create or instance_config on this thread failed: last_error(NULL).
thread_local std::string create_error;

// The plugin's instance. The runtime only ever holds it as an opaque cudaq_rt_bridge pointer.
struct UdpBridge {
  cudaq_rt_bridge ring; // owns the ring memory
  udp::Socket socket;
  udp::Config config;
  std::unique_ptr<udp::Pump> pump;
  std::string error;
};

UdpBridge *self(cudaq_rt_bridge *b) {
  return reinterpret_cast<UdpBridge *>(b);
}
const UdpBridge *self(const cudaq_rt_bridge *b) {
  return reinterpret_cast<const UdpBridge *>(b);
}

void release(UdpBridge *u) {
  u->pump.reset(); // joins the threads
  if (u->socket.fd >= 0)
    ::close(u->socket.fd);
  loopback::release_ring(&u->ring);
  delete u;
}

cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  create_error.clear();
  if (!out) {
    create_error = "create: no place for the result";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = nullptr;
  auto u = std::make_unique<UdpBridge>();
  // Checked before anything is allocated: the configuration, the ring's shape, the socket.
  if (std::string why = udp::parse_config(config ? config : "", u->config); !why.empty()) {
    create_error = std::move(why);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  std::string why =
      loopback::check_ring_shape(u->config.slots, u->config.slot_size, u->config.layout);
  if (why.empty())
    why = loopback::check_warps(u->config.warps, u->config.slots);
  if (!why.empty()) {
    create_error = std::move(why);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  if (!udp::open_socket(u->config, u->socket, create_error))
    return CUDAQ_RT_BRIDGE_ERROR;
  if (!loopback::allocate_ring(&u->ring, u->config.slots, u->config.slot_size, u->config.layout,
                               u->config.bulk_min, u->config.response_bulk_min,
                               u->config.spare_frame != 0, /*feeders=*/1, u->config.warps,
                               create_error)) {
    ::close(u->socket.fd);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  u->pump = std::make_unique<udp::Pump>(u->ring, u->socket.fd, u->config.spin, u->config.threads,
                                        u->config.cpu);
  *out = reinterpret_cast<cudaq_rt_bridge *>(u.release());
  return CUDAQ_RT_BRIDGE_OK;
}

cudaq_rt_bridge_result instance_config(const cudaq_rt_bridge_launch *launch, const char *config,
                                       char *out, size_t capacity, size_t *needed) {
  create_error.clear();
  std::string text;
  if (std::string why =
          udp::instance_config(*launch, config, loopback::current_gpu_has_bulk_engine(), text);
      !why.empty()) {
    create_error = std::move(why);
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  return write_instance_config(text, out, capacity, needed);
}

void destroy(cudaq_rt_bridge *b) {
  if (b)
    release(self(b));
}

const char *last_error(const cudaq_rt_bridge *b) {
  return b ? self(b)->error.c_str() : create_error.c_str();
}

void *device_context(cudaq_rt_bridge *b) {
  return self(b)->ring.device_ctx;
}
uint32_t slot_size(cudaq_rt_bridge *b) {
  return self(b)->ring.slot_size;
}
uint32_t num_slots(cudaq_rt_bridge *b) {
  return self(b)->ring.num_slots;
}
uint32_t dispatch_shared_bytes(cudaq_rt_bridge *b) {
  return self(b)->ring.spare_bytes;
}

cudaq_rt_bridge_result start(cudaq_rt_bridge *b) {
  UdpBridge *u = self(b);
  return u->pump->start(u->error) ? CUDAQ_RT_BRIDGE_OK : CUDAQ_RT_BRIDGE_ERROR;
}

cudaq_rt_bridge_result drain(cudaq_rt_bridge *b, double timeout_s) {
  return self(b)->pump->drain(timeout_s) ? CUDAQ_RT_BRIDGE_OK : CUDAQ_RT_BRIDGE_AGAIN;
}

cudaq_rt_bridge_result hold(cudaq_rt_bridge *b, double timeout_s) {
  return self(b)->pump->hold(timeout_s) ? CUDAQ_RT_BRIDGE_OK : CUDAQ_RT_BRIDGE_AGAIN;
}

void stop(cudaq_rt_bridge *b) {
  self(b)->pump->stop();
}

const char *address(const cudaq_rt_bridge *b) {
  return self(b)->socket.address.c_str();
}

uint32_t counters(const cudaq_rt_bridge *b, cudaq_rt_bridge_counter *out, uint32_t capacity) {
  return self(b)->pump->counters(out, capacity);
}

void latency(const cudaq_rt_bridge *b, uint64_t *buckets) {
  self(b)->pump->add_latency(buckets);
}

#ifndef CUDAQ_RT_UDP_NAME
#define CUDAQ_RT_UDP_NAME "udp" // bench/CMakeLists.txt builds variants under other names
#endif

// The socket feeds it: no send, receive or their batched forms.
const cudaq_rt_bridge_ops udp_ops = {
    .abi_version = CUDAQ_RT_BRIDGE_ABI_VERSION,
    .struct_size = sizeof(cudaq_rt_bridge_ops),
    .name = CUDAQ_RT_UDP_NAME,
    .description =
        "a UDP socket; host threads move datagrams to and from a ring in mapped pinned memory",
    .capabilities = CUDAQ_RT_BRIDGE_CAP_SELF_FED,
    .create = create,
    .destroy = destroy,
    .last_error = last_error,
    .device_context = device_context,
    .slot_size = slot_size,
    .num_slots = num_slots,
    .start = start,
    .drain = drain,
    .stop = stop,
    .address = address,
    .counters = counters,
    .latency = latency,
    .instance_config = instance_config,
    .dispatch_shared_bytes = dispatch_shared_bytes,
    .hold = hold,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const cudaq_rt_bridge_ops *
cudaq_rt_bridge_entry(void) {
  return &udp_ops;
}
