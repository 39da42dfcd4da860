// Two versions of one application, for the hot-reload tests (test_reload.py, reload_capi.c):
// compiled twice, with CUDAQ_RT_TEST_RELOAD_VERSION 1 and 2, and packed as two packages.
//
//   versioned: answers its payload behind one byte, the version that answered: a client sees
//              which code served each request.
//   checked:   reads cudaq_rt_test_reload_table, 4,096 words the host writes whole
//              (--global, cudaq_rt_set_global): word 0 a generation, the last word the sum of the
//              others. Status 0 and the generation when the sum holds, status 1 when it does not:
//              a request that saw part of an old table and part of a new one says so.
#include "cudaq_rt/exports.h"

#include <stdint.h>

#ifndef CUDAQ_RT_TEST_RELOAD_VERSION
#error "CUDAQ_RT_TEST_RELOAD_VERSION: 1 or 2"
#endif

#define CUDAQ_RT_TEST_RELOAD_WORDS 4096

extern "C" {
__device__ uint32_t cudaq_rt_test_reload_table[CUDAQ_RT_TEST_RELOAD_WORDS];
}
CUDAQ_RT_EXPORT_GLOBAL(cudaq_rt_test_reload_table);

static __device__ int versioned(const void *input, void *output, uint32_t arg_len,
                                uint32_t max_result_len, uint32_t *result_len) {
  if (max_result_len < arg_len + 1)
    return 2;
  const uint8_t *in = static_cast<const uint8_t *>(input);
  uint8_t *out = static_cast<uint8_t *>(output);
  out[0] = CUDAQ_RT_TEST_RELOAD_VERSION;
  for (uint32_t i = 0; i < arg_len; ++i)
    out[i + 1] = in[i];
  *result_len = arg_len + 1;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(versioned, versioned);

static __device__ int checked(const void *, void *output, uint32_t, uint32_t max_result_len,
                              uint32_t *result_len) {
  if (max_result_len < 8)
    return 2;
  const volatile uint32_t *t = cudaq_rt_test_reload_table;
  uint32_t sum = 0;
  for (uint32_t i = 0; i + 1 < CUDAQ_RT_TEST_RELOAD_WORDS; ++i)
    sum += t[i];
  const uint32_t words[2] = {t[0], (uint32_t)CUDAQ_RT_TEST_RELOAD_VERSION};
  uint8_t *out = static_cast<uint8_t *>(output);
  for (int i = 0; i < 8; ++i)
    out[i] = (uint8_t)(words[i / 4] >> (8 * (i % 4)));
  *result_len = 8;
  return sum == t[CUDAQ_RT_TEST_RELOAD_WORDS - 1] ? 0 : 1;
}
CUDAQ_RT_EXPORT_HANDLER(checked, checked);
