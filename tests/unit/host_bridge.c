/* A bridge whose host side needs no GPU, for test_server: the load path runs against a fake GPU
 * (tests/unit/test_server.cpp), and a real bridge's create would allocate CUDA memory. Its device
 * hooks are not its own: the test packs the loopback bridge's hooks under this bridge's name, so
 * the link takes them from the package and never reads this library for device code. send() queues
 * up to four frames; receive() never has an answer (no kernel runs). */
#include "cudaq_rt/bridge_plugin.h"

#include <stdlib.h>
#include <string.h>

struct cudaq_rt_bridge {
  unsigned queued;
  unsigned char device_context[64];
};

static const char *create_error = "";

static cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  if (config && *config) {
    create_error = "host bridge: takes no configuration";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = calloc(1, sizeof **out);
  return *out ? CUDAQ_RT_BRIDGE_OK : CUDAQ_RT_BRIDGE_ERROR;
}

static void destroy(cudaq_rt_bridge *b) {
  free(b);
}

static const char *last_error(const cudaq_rt_bridge *b) {
  return b ? "" : create_error;
}

static void *device_context(cudaq_rt_bridge *b) {
  return b->device_context;
}

static uint32_t slot_size(cudaq_rt_bridge *b) {
  (void)b;
  return 1024;
}

static uint32_t num_slots(cudaq_rt_bridge *b) {
  (void)b;
  return 4;
}

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

static const cudaq_rt_bridge_ops ops = {
    CUDAQ_RT_BRIDGE_ABI_VERSION,
    sizeof(cudaq_rt_bridge_ops),
    "host",
    "a host-only bridge for the load path's tests",
    CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES,
    0,
    create,
    destroy,
    last_error,
    device_context,
    slot_size,
    num_slots,
    send,
    receive,
};

__attribute__((visibility("default"))) const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void) {
  return &ops;
}
