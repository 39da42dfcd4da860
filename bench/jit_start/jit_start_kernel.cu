// jit_start_app's persistent kernel: the shape of CUDA-Q realtime's dispatcher, cut down to one
// request slot. One thread polls the mailbox, calls handler[function_index] through the function
// table (device function pointers in a __device__ array, defined by the generated table unit,
// jit_start_table.cu), writes the response, and starts over until the host sets shutdown.
// Relocatable device code: the table and the handlers are other translation units, which only the
// application's nvJitLink link at run time resolves.
#include "jit_start_mailbox.h"

typedef int (*jit_start_handler_fn)(const void *input, void *output, uint32_t arg_len,
                                    uint32_t max_result_len, uint32_t *result_len);

extern "C" {
extern __device__ jit_start_handler_fn jit_start_handler_table[];
extern __device__ uint32_t jit_start_handler_count;
}

extern "C" __global__ void jit_start_dispatch(JitStartMailbox *mailbox) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  volatile JitStartMailbox *mb = mailbox;
  uint32_t answered = mb->response_seq;
  for (;;) {
    uint32_t seq;
    while ((seq = mb->request_seq) == answered && !mb->shutdown) {
    }
    if (seq == answered)
      return;               // shutdown
    __threadfence_system(); // the payload was written before request_seq
    uint32_t index = mb->function_index;
    uint32_t arg_len = min(mb->arg_len, JIT_START_MAX_ARG);
    uint32_t in[JIT_START_MAX_ARG / 4], out[JIT_START_MAX_RESULT / 4] = {};
    for (uint32_t i = 0; i < JIT_START_MAX_ARG / 4; ++i)
      in[i] = mb->arg[i];
    uint32_t result_len = 0;
    int status = JIT_START_STATUS_NO_HANDLER;
    if (index < jit_start_handler_count)
      status = jit_start_handler_table[index](in, out, arg_len, JIT_START_MAX_RESULT, &result_len);
    result_len = min(result_len, JIT_START_MAX_RESULT);
    mb->status = status;
    mb->result_len = result_len;
    mb->handler_count = jit_start_handler_count;
    for (uint32_t i = 0; i < JIT_START_MAX_RESULT / 4; ++i)
      mb->result[i] = out[i];
    __threadfence_system(); // the response before response_seq
    mb->response_seq = seq;
    answered = seq;
  }
}
