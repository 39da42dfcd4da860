/* A self-fed bridge whose host side needs no GPU, for the serving tests of test_server: like
 * host_bridge.c, its device hooks are the loopback bridge's, packed under this bridge's name. It
 * has no socket; its counters say how often the launcher called start, drain, hold and stop, and
 * which came last (last_op: 1 start, 2 drain, 3 stop, 4 hold), and responses_sent grows by one on each read of the
 * counters, so that a --count bound is reached without traffic. They also say what the launcher
 * told instance_config (polling_lanes, instance), passed on to create in the configuration. It
 * asks for 512 bytes of dynamic shared memory per polling lane (dispatch_shared_bytes). */
#include "cudaq_rt/bridge_plugin.h"

#include <stdio.h>
#include <string.h>

struct cudaq_rt_bridge {
  uint64_t starts, drains, holds, stops, last_op, reads, drained_while_started;
  int started;
  unsigned polling_lanes, instance;
  unsigned char device_context[64];
};

#define FAKE_BRIDGE_NAME "self-fed"
#include "fake_bridge.h"

/* The launch, for create to keep; a configuration the user gave is passed on for create to
 * refuse. */
static cudaq_rt_bridge_result instance_config(const cudaq_rt_bridge_launch *launch,
                                              const char *config, char *out, size_t capacity,
                                              size_t *needed) {
  char told[48];
  const char *text = config;
  if (!*config) {
    snprintf(told, sizeof told, "lanes=%u,instance=%u", (unsigned)launch->polling_lanes,
             (unsigned)launch->instance);
    text = told;
  }
  *needed = strlen(text) + 1;
  if (capacity < *needed)
    return CUDAQ_RT_BRIDGE_AGAIN;
  memcpy(out, text, *needed);
  return CUDAQ_RT_BRIDGE_OK;
}

static cudaq_rt_bridge_result start(cudaq_rt_bridge *b) {
  b->starts++;
  b->started = 1;
  b->last_op = 1;
  return CUDAQ_RT_BRIDGE_OK;
}

static cudaq_rt_bridge_result drain(cudaq_rt_bridge *b, double timeout_s) {
  (void)timeout_s;
  b->drains++;
  b->drained_while_started += b->started;
  b->last_op = 2;
  return CUDAQ_RT_BRIDGE_OK;
}

static cudaq_rt_bridge_result hold(cudaq_rt_bridge *b, double timeout_s) {
  (void)timeout_s;
  b->holds++;
  b->last_op = 4;
  return CUDAQ_RT_BRIDGE_OK;
}

static void stop(cudaq_rt_bridge *b) {
  b->stops++;
  b->started = 0;
  b->last_op = 3;
}

static const char *address(const cudaq_rt_bridge *b) {
  (void)b;
  return "nowhere:0";
}

static uint32_t counters(const cudaq_rt_bridge *b, cudaq_rt_bridge_counter *out,
                         uint32_t capacity) {
  cudaq_rt_bridge *m = (cudaq_rt_bridge *)b;
  const cudaq_rt_bridge_counter all[] = {{"starts", m->starts},
                                         {"drains", m->drains},
                                         {"holds", m->holds},
                                         {"stops", m->stops},
                                         {"last_op", m->last_op},
                                         {"responses_sent", ++m->reads},
                                         {"drained_while_started", m->drained_while_started},
                                         {"polling_lanes", m->polling_lanes},
                                         {"instance", m->instance}};
  const uint32_t n = sizeof all / sizeof all[0];
  for (uint32_t i = 0; i < n && i < capacity; ++i)
    out[i] = all[i];
  return n;
}

static uint32_t dispatch_shared_bytes(cudaq_rt_bridge *b) {
  return 512u * b->polling_lanes;
}

static const cudaq_rt_bridge_ops ops = {
    .abi_version = CUDAQ_RT_BRIDGE_ABI_VERSION,
    .struct_size = sizeof(cudaq_rt_bridge_ops),
    .name = "selffed",
    .description = "a self-fed bridge without a socket, for the serving tests",
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
    .instance_config = instance_config,
    .dispatch_shared_bytes = dispatch_shared_bytes,
    .hold = hold,
};

__attribute__((visibility("default"))) const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void) {
  return &ops;
}
