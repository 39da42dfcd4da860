/* cudaq_rt/wire.h: the wire format between clients, bridges and the dispatch kernel.
 *
 * Compatible with CUDA-Q realtime. Every frame is little-endian and starts with a 24-byte header:
 *
 *   request  = { u32 magic 'CUQR', u32 function_id, u32 arg_len,    u32 request_id, u64 ptp_timestamp }
 *              followed by arg_len payload bytes
 *   response = { u32 magic 'CUQS', i32 status,      u32 result_len, u32 request_id, u64 ptp_timestamp }
 *              followed by result_len result bytes; request_id and ptp_timestamp are echoed.
 *
 * status: 0 ok, > 0 handler-defined, < 0 a protocol error (CUDAQ_RT_STATUS_* below); a handler
 * itself never answers < 0 (CUDAQ_RT_STATUS_HANDLER_FAULT). Every request the dispatch kernel takes
 * gets exactly one response. What happens around a stop is the bridge's to say: a request sent
 * after the host set the shutdown flag may get no answer at all (the kernel may already be gone).
 * The loopback bridge answers every request sent before the flag was set.
 * function_id is the FNV-1a 32-bit hash of the handler's exported name.
 *
 * A request is whole when its bytes cover 24 + arg_len. Host-fed bridges refuse to send any other
 * frame, but a bridge that receives one anyway (from a wire, from a raw writer) must not hand it
 * to the dispatch kernel as it is: the staging frame it unpacks into still holds an earlier
 * request's bytes past the end of this one, and a handler would read them as this request's
 * payload (one client's data in another's answer). The bridge instead replaces the header's magic
 * with CUDAQ_RT_TRUNCATED_MAGIC, and zeroes the header bytes it did not receive (so that the
 * echoed request_id and ptp_timestamp are not someone else's). The dispatch kernel answers such a
 * frame CUDAQ_RT_STATUS_TRUNCATED without calling a handler. The marker keeps the device hooks'
 * ABI unchanged (rx_poll hands out a frame, not its length), and a dispatch kernel that only knows
 * CUDA-Q's rules still refuses the frame, as a bad magic.
 *
 * Usable from C, C++ and CUDA (host and device). */
#ifndef CUDAQ_RT_WIRE_H
#define CUDAQ_RT_WIRE_H

#include <stdint.h>

#if defined(__CUDACC__)
#define CUDAQ_RT_HD __host__ __device__
#else
#define CUDAQ_RT_HD
#endif

#define CUDAQ_RT_REQUEST_MAGIC 0x43555152u  /* 'CUQR' */
#define CUDAQ_RT_RESPONSE_MAGIC 0x43555153u /* 'CUQS' */
#define CUDAQ_RT_HEADER_SIZE 24u
/* Not sent by clients: put in place of the magic by a bridge that received fewer bytes than the
 * header claims (see above). A client that sends it anyway is answered CUDAQ_RT_STATUS_TRUNCATED. */
#define CUDAQ_RT_TRUNCATED_MAGIC 0x43555154u /* 'CUQT' */

#define CUDAQ_RT_FNV1A_OFFSET 2166136261u
#define CUDAQ_RT_FNV1A_PRIME 16777619u

/* Protocol errors carried in a response's status. -1 is what CUDA-Q realtime answers to an
 * unknown function or a bad magic; the others narrow down what was wrong with the frame. Every
 * response with one of them carries no result bytes (result_len 0). */
#define CUDAQ_RT_STATUS_OK 0
#define CUDAQ_RT_STATUS_UNKNOWN_FUNCTION (-1)
#define CUDAQ_RT_STATUS_BAD_MAGIC (-1)
#define CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE (-2) /* arg_len > slot_size - 24 */
#define CUDAQ_RT_STATUS_RESULT_TOO_LARGE (-3)  /* the handler claimed result_len > max_result_len */
#define CUDAQ_RT_STATUS_TRUNCATED (-4) /* fewer bytes arrived than 24 + arg_len (magic 'CUQT') */
/* The handler returned a negative status. Negative statuses are the protocol's, so that a client
 * can tell "my frame was refused" from "the handler failed"; a handler that returns one breaks its
 * contract, and whatever it wrote is not sent. */
#define CUDAQ_RT_STATUS_HANDLER_FAULT (-5)
/* More bytes arrived than 24 + arg_len. Only a bridge that receives whole datagrams can tell (the
 * UDP bridge answers it without the GPU); the dispatch kernel never sees such a frame. */
#define CUDAQ_RT_STATUS_BAD_LENGTH (-6)

typedef struct cudaq_rt_request_header {
  uint32_t magic;
  uint32_t function_id;
  uint32_t arg_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rt_request_header;

typedef struct cudaq_rt_response_header {
  uint32_t magic;
  int32_t status;
  uint32_t result_len;
  uint32_t request_id;
  uint64_t ptp_timestamp;
} cudaq_rt_response_header;

#ifdef __cplusplus
static_assert(sizeof(cudaq_rt_request_header) == CUDAQ_RT_HEADER_SIZE,
              "request header is 24 bytes");
static_assert(sizeof(cudaq_rt_response_header) == CUDAQ_RT_HEADER_SIZE,
              "response header is 24 bytes");
#endif

/* FNV-1a, 32 bits, over a NUL-terminated name. */
static inline CUDAQ_RT_HD uint32_t cudaq_rt_function_id(const char *name) {
  uint32_t h = CUDAQ_RT_FNV1A_OFFSET;
  for (; *name; ++name) {
    h ^= (uint8_t)*name;
    h *= CUDAQ_RT_FNV1A_PRIME;
  }
  return h;
}

#ifdef __cplusplus
namespace cudaq_rt {
/* The same hash, usable in constant expressions (export records are built at compile time). */
constexpr uint32_t function_id(const char *name, uint32_t h = CUDAQ_RT_FNV1A_OFFSET) {
  return *name ? function_id(name + 1, (h ^ static_cast<uint8_t>(*name)) * CUDAQ_RT_FNV1A_PRIME)
               : h;
}
} // namespace cudaq_rt
#endif

#endif /* CUDAQ_RT_WIRE_H */
