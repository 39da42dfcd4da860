/* The C API's one-call round trip, for the Python binding's benchmark (python_call.py): opens a
 * package, serves it on GPU 0 through the loopback bridge, and times N cudaq_rt_call()s of one
 * handler with the same payload, each on its own, after 1,000 not timed. Prints one JSON line:
 * {"calls": N, "p50_us": ..., "p90_us": ..., "p99_us": ..., "mean_us": ...}; percentiles
 * nearest-rank, as cudaq-rt-run --bench's. GAP_US: the host spins that long between one call's
 * return and the next call (default 0), as a caller that does work of its own between calls.
 *   capi_call_rtt PACKAGE HANDLER PAYLOAD_BYTES N [GAP_US] */
#include "cudaq_rt/cudaq_rt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double rank(const double *sorted, size_t n, double p) {
  size_t r = (size_t)ceil(p / 100.0 * (double)n);
  return sorted[r ? r - 1 : 0];
}

static int die(const char *what) {
  fprintf(stderr, "capi_call_rtt: error: %s: %s\n", what, cudaq_rt_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: capi_call_rtt PACKAGE HANDLER PAYLOAD_BYTES N [GAP_US]\n");
    return 2;
  }
  const uint32_t size = (uint32_t)strtoul(argv[3], NULL, 10);
  const size_t n = strtoull(argv[4], NULL, 10);
  const double gap_us = argc == 6 ? strtod(argv[5], NULL) : 0;
  cudaq_rt_code *code = NULL;
  cudaq_rt_server *server = NULL;
  if (cudaq_rt_open_package(argv[1], &code))
    return die("open");
  cudaq_rt_config cfg;
  cudaq_rt_config_init(&cfg);
  cfg.bridge = "loopback";
  if (cudaq_rt_server_create(code, &cfg, &server) || cudaq_rt_start(server))
    return die("start");
  unsigned char *arg = calloc(size ? size : 1, 1), result[1024];
  double *us = malloc(n * sizeof *us);
  const uint32_t fid = cudaq_rt_function_id(argv[2]);
  for (size_t i = 0; i < 1000 + n; ++i) {
    uint32_t len = 0;
    int32_t status = 0;
    const double t0 = now_us();
    if (cudaq_rt_call(server, fid, arg, size, result, sizeof result, &len, &status, 5.0) ||
        status != 0)
      return die("call");
    const double t1 = now_us();
    if (i >= 1000)
      us[i - 1000] = t1 - t0;
    while (now_us() - t1 < gap_us) {
    }
  }
  double mean = 0;
  for (size_t i = 0; i < n; ++i)
    mean += us[i] / (double)n;
  qsort(us, n, sizeof *us, by_value);
  printf("{\"calls\": %zu, \"p50_us\": %.3f, \"p90_us\": %.3f, \"p99_us\": %.3f, "
         "\"mean_us\": %.3f}\n",
         n, rank(us, n, 50), rank(us, n, 90), rank(us, n, 99), mean);
  cudaq_rt_stop(server);
  cudaq_rt_server_destroy(server);
  cudaq_rt_code_destroy(code);
  free(arg);
  free(us);
  return 0;
}
