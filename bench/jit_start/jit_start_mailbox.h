// The one request slot jit_start_app and its persistent kernel share, in mapped pinned host
// memory. Only 4-byte fields: the GPU's wider stores to mapped memory can be seen half-written by
// the host. Each side writes its payload, then (after a fence) its sequence word; the other side
// polls the sequence word and only then reads the payload.
#ifndef JIT_START_MAILBOX_H
#define JIT_START_MAILBOX_H

#include <stdint.h>

#define JIT_START_MAX_ARG 16u
#define JIT_START_MAX_RESULT 16u
// The kernel's status for a function index past the table (a handler returns 0 or its own > 0).
#define JIT_START_STATUS_NO_HANDLER (-1)

struct JitStartMailbox {
  // Host -> GPU, on its own 64-byte line.
  uint32_t request_seq; // the host's last request; the kernel answers each new value once
  uint32_t function_index;
  uint32_t arg_len;
  uint32_t shutdown; // nonzero: the kernel returns
  uint32_t arg[JIT_START_MAX_ARG / 4];
  uint32_t request_pad[8];
  // GPU -> host.
  uint32_t response_seq; // the request_seq answered, written last
  int32_t status;
  uint32_t result_len;
  uint32_t handler_count; // the table's size, as the module holds it
  uint32_t result[JIT_START_MAX_RESULT / 4];
  uint32_t response_pad[8];
};

#endif
