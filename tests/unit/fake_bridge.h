/* What the test bridges (host_bridge.c, self_fed_bridge.c) share: a bridge that takes no
 * configuration but the launch its instance_config was told of ("lanes=L,instance=I", which the
 * instance keeps), allocates nothing on a GPU, and answers a ring of 4 slots of 1024 bytes. The
 * including file defines struct cudaq_rt_bridge (with an `unsigned char device_context[64]` and
 * `unsigned polling_lanes, instance`) and FAKE_BRIDGE_NAME, then these operations go into its
 * cudaq_rt_bridge_ops. */
#ifndef CUDAQ_RT_TESTS_FAKE_BRIDGE_H
#define CUDAQ_RT_TESTS_FAKE_BRIDGE_H

#include "cudaq_rt/bridge_plugin.h"

#include <stdio.h>
#include <stdlib.h>

static const char *create_error = "";

static cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  unsigned lanes = 0, instance = 0;
  int end = 0;
  if (config && *config &&
      !(sscanf(config, "lanes=%u,instance=%u%n", &lanes, &instance, &end) == 2 && end > 0 &&
        config[end] == '\0')) {
    create_error = FAKE_BRIDGE_NAME " bridge: takes no configuration";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = calloc(1, sizeof **out);
  if (!*out)
    return CUDAQ_RT_BRIDGE_ERROR;
  (*out)->polling_lanes = lanes;
  (*out)->instance = instance;
  return CUDAQ_RT_BRIDGE_OK;
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

#endif /* CUDAQ_RT_TESTS_FAKE_BRIDGE_H */
