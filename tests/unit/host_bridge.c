/* A bridge whose host side needs no GPU, for test_server: the load path runs against a fake GPU
 * (tests/unit/load/test_server.cpp), and a real bridge's create would allocate CUDA memory. Its
 * device hooks are not its own: the test packs the loopback bridge's hooks under this bridge's
 * name, so the link takes them from the package and never reads this library for device code.
 * send() queues up to four frames; receive() never has an answer (no kernel runs).
 *
 * It is also a bridge built before instance_config: its table's struct_size ends before that
 * operation, which the table still sets, to one that fails every call, so that a launcher that
 * reads past struct_size is caught (test_bridge, test_server). */
#include "cudaq_rt/bridge_plugin.h"

struct cudaq_rt_bridge {
  unsigned queued;
  unsigned polling_lanes, instance;
  unsigned char device_context[64];
};

#define FAKE_BRIDGE_NAME "host"
#include "fake_bridge.h"

static cudaq_rt_bridge_result send(cudaq_rt_bridge *b, const void *frame, size_t size) {
  (void)frame;
  (void)size;
  if (b->queued == 4)
    return CUDAQ_RT_BRIDGE_AGAIN;
  b->queued++;
  return CUDAQ_RT_BRIDGE_OK;
}

static cudaq_rt_bridge_result receive(cudaq_rt_bridge *b, void *buffer, size_t capacity,
                                      size_t *size) {
  (void)b;
  (void)buffer;
  (void)capacity;
  (void)size;
  return CUDAQ_RT_BRIDGE_AGAIN;
}

static cudaq_rt_bridge_result instance_config(const cudaq_rt_bridge_launch *launch,
                                              const char *config, char *out, size_t capacity,
                                              size_t *needed) {
  (void)launch;
  (void)config;
  (void)out;
  (void)capacity;
  (void)needed;
  create_error = "instance_config was called past the table's struct_size";
  return CUDAQ_RT_BRIDGE_ERROR;
}

static const cudaq_rt_bridge_ops ops = {
    .abi_version = CUDAQ_RT_BRIDGE_ABI_VERSION,
    .struct_size = offsetof(cudaq_rt_bridge_ops, instance_config),
    .name = "host",
    .description = "a host-only bridge for the load path's tests",
    .capabilities = CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES,
    .create = create,
    .destroy = destroy,
    .last_error = last_error,
    .device_context = device_context,
    .slot_size = slot_size,
    .num_slots = num_slots,
    .send = send,
    .receive = receive,
    .instance_config = instance_config,
};

__attribute__((visibility("default"))) const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void) {
  return &ops;
}
