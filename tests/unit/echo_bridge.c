/* A host-fed bridge that answers by itself, for the load path's client and C API tests: no kernel
 * runs on their fake GPU, so this bridge plays the dispatch kernel serving an echo handler. Each
 * frame sent is answered at once, in order, with its payload as the result. Its table is ABI
 * version 1's first (up to receive). Its device hooks are not its own: the tests pack the
 * loopback bridge's hooks under this bridge's name, as test_server does for host_bridge.c.
 *
 * The configuration says how it answers: "" echoes with status 0; "status=N" echoes with status
 * N; "wrong_id" answers with another request_id; "corrupt" echoes with the last payload byte
 * flipped; "bad_magic" answers with a header that is no response's; "silent" takes requests and
 * never answers. 4 slots of 1024 bytes, so a fifth
 * request in flight is refused (AGAIN). */
#include "cudaq_rt/bridge_plugin.h"
#include "cudaq_rt/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4
#define SLOT_SIZE 1024

enum mode { ECHO, STATUS, WRONG_ID, CORRUPT, BAD_MAGIC, SILENT };

struct cudaq_rt_bridge {
  enum mode mode;
  int status;
  unsigned head, count; /* the queue of answers, oldest at head */
  size_t sizes[SLOTS];
  unsigned char frames[SLOTS][SLOT_SIZE];
  unsigned char device_context[64];
  const char *error;
};

static const char *create_error = "";

static cudaq_rt_bridge_result create(const char *config, cudaq_rt_bridge **out) {
  struct cudaq_rt_bridge b;
  int end = 0;
  memset(&b, 0, sizeof b);
  b.error = "";
  if (!config || !*config)
    b.mode = ECHO;
  else if (strcmp(config, "wrong_id") == 0)
    b.mode = WRONG_ID;
  else if (strcmp(config, "corrupt") == 0)
    b.mode = CORRUPT;
  else if (strcmp(config, "bad_magic") == 0)
    b.mode = BAD_MAGIC;
  else if (strcmp(config, "silent") == 0)
    b.mode = SILENT;
  else if (sscanf(config, "status=%d%n", &b.status, &end) == 1 && config[end] == '\0')
    b.mode = STATUS;
  else {
    create_error = "echo bridge: unknown configuration";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  *out = malloc(sizeof **out);
  if (!*out)
    return CUDAQ_RT_BRIDGE_ERROR;
  **out = b;
  return CUDAQ_RT_BRIDGE_OK;
}

static void destroy(cudaq_rt_bridge *b) {
  free(b);
}

static const char *last_error(const cudaq_rt_bridge *b) {
  return b ? b->error : create_error;
}

static void *device_context(cudaq_rt_bridge *b) {
  return b->device_context;
}

static uint32_t slot_size(cudaq_rt_bridge *b) {
  (void)b;
  return SLOT_SIZE;
}

static uint32_t num_slots(cudaq_rt_bridge *b) {
  (void)b;
  return SLOTS;
}

static cudaq_rt_bridge_result send(cudaq_rt_bridge *b, const void *frame, size_t size) {
  cudaq_rt_request_header rq;
  cudaq_rt_response_header rs;
  unsigned char *slot;
  if (size < sizeof rq || size > SLOT_SIZE) {
    b->error = "echo bridge: a frame of the wrong size";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  memcpy(&rq, frame, sizeof rq);
  if (rq.arg_len != size - sizeof rq) {
    b->error = "echo bridge: arg_len is not the frame's payload";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  if (b->count == SLOTS)
    return CUDAQ_RT_BRIDGE_AGAIN;
  slot = b->frames[(b->head + b->count) % SLOTS];
  rs.magic = b->mode == BAD_MAGIC ? 0x12345678u : CUDAQ_RT_RESPONSE_MAGIC;
  rs.status = b->mode == STATUS ? b->status : 0;
  rs.result_len = rq.arg_len;
  rs.request_id = b->mode == WRONG_ID ? rq.request_id + 1000 : rq.request_id;
  rs.ptp_timestamp = rq.ptp_timestamp;
  memcpy(slot, &rs, sizeof rs);
  memcpy(slot + sizeof rs, (const unsigned char *)frame + sizeof rq, rq.arg_len);
  if (b->mode == CORRUPT && rq.arg_len > 0)
    slot[sizeof rs + rq.arg_len - 1] ^= 0xff;
  b->sizes[(b->head + b->count) % SLOTS] = sizeof rs + rq.arg_len;
  b->count++;
  return CUDAQ_RT_BRIDGE_OK;
}

static cudaq_rt_bridge_result receive(cudaq_rt_bridge *b, void *buffer, size_t capacity,
                                      size_t *size) {
  if (b->count == 0 || b->mode == SILENT)
    return CUDAQ_RT_BRIDGE_AGAIN;
  if (capacity < b->sizes[b->head]) {
    b->error = "echo bridge: the buffer is smaller than the response";
    return CUDAQ_RT_BRIDGE_ERROR;
  }
  memcpy(buffer, b->frames[b->head], b->sizes[b->head]);
  *size = b->sizes[b->head];
  b->head = (b->head + 1) % SLOTS;
  b->count--;
  return CUDAQ_RT_BRIDGE_OK;
}

static const cudaq_rt_bridge_ops ops = {
    .abi_version = CUDAQ_RT_BRIDGE_ABI_VERSION,
    .struct_size = CUDAQ_RT_BRIDGE_OPS_V1_SIZE,
    .name = "echo",
    .description = "a host-only bridge that answers every request with its payload",
    .capabilities = CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES,
    .create = create,
    .destroy = destroy,
    .last_error = last_error,
    .device_context = device_context,
    .slot_size = slot_size,
    .num_slots = num_slots,
    .send = send,
    .receive = receive,
};

__attribute__((visibility("default"))) const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void) {
  return &ops;
}
