/* Hot reload through the C API, under load, on the loopback bridge (exit 77 where there is no GPU):
 *
 *   reload_capi V1 V2 [REQUESTS [RELOADS]]
 *
 * V1 and V2 are packages of tests/gpu/reload_handlers.cu built as version 1 and 2. A server over
 * V1 with the application's own function table (function_id 0x1234 -> versioned, and `checked`
 * under its own name) and the table global set, started; then REQUESTS requests (default
 * 1,000,000) with up to 32 in flight, alternating `versioned` and `checked`; every
 * REQUESTS / (RELOADS + 1) requests, cudaq_rt_reload to the other package (RELOADS times, default
 * 10), and half way between two reloads, cudaq_rt_set_global with the table's next generation,
 * each while requests are in flight in the ring.
 *
 * The reload and the global happen in this thread, between two sends, so what answers each
 * request is exactly known: the version and the table generation at the moment it was sent
 * (those in the ring are answered by the old kernel before it stops). Every response is checked
 * against that; none may be missing, answered twice, or see a torn table (`checked` status 1).
 * Prints each reload's times and the gap's p50 and max. Exit 0 when every check passed. */
#define _POSIX_C_SOURCE 200809L

#include "cudaq_rt/cudaq_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORDS 4096
#define WINDOW 32
#define APP_ID 0x1234u

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (failures < 20)                                                                           \
        fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond,   \
                cudaq_rt_last_error());                                                            \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

static uint32_t fnv1a(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; ++s)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* Generation g of the table: words from a simple generator, the last one their sum. */
static void make_table(uint32_t *t, uint32_t g) {
  uint32_t x = g * 2654435761u + 1, sum = 0;
  t[0] = g;
  sum = g;
  for (int i = 1; i + 1 < WORDS; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = x;
    sum += x;
  }
  t[WORDS - 1] = sum;
}

static int by_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* What a request in flight expects. */
struct expect {
  int used;
  int checked; /* `checked`, else `versioned` */
  uint8_t version;
  uint32_t generation;
  uint64_t tag;
};

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: reload_capi V1.cudaqpkg V2.cudaqpkg [REQUESTS [RELOADS]]\n");
    return 2;
  }
  const long requests = argc > 3 ? atol(argv[3]) : 1000000;
  const int reloads = argc > 4 ? atoi(argv[4]) : 10;
  const long every = requests / (reloads + 1);
  cudaq_rt_code *code[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i)
    if (cudaq_rt_open_package(argv[1 + i], &code[i]) != CUDAQ_RT_OK) {
      fprintf(stderr, "%s\n", cudaq_rt_last_error());
      return 1;
    }
  cudaq_rt_config cfg;
  cudaq_rt_config_init(&cfg);
  cudaq_rt_server *s = NULL;
  CHECK(cudaq_rt_server_create(code[0], &cfg, &s) == CUDAQ_RT_OK);
  int rc = cudaq_rt_load(s);
  if (rc == CUDAQ_RT_E_NO_GPU) {
    printf("no GPU: %s\n", cudaq_rt_last_error());
    return 77;
  }
  CHECK(rc == CUDAQ_RT_OK);
  cudaq_rt_device_fn versioned = 0, checked = 0;
  CHECK(cudaq_rt_lookup_handler(s, "versioned", &versioned) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_lookup_handler(s, "checked", &checked) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(s, APP_ID, versioned) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(s, fnv1a("checked"), checked) == CUDAQ_RT_OK);
  static uint32_t table[WORDS];
  uint32_t generation = 1;
  make_table(table, generation);
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_test_reload_table", table, sizeof table) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(s) == CUDAQ_RT_OK);
  if (failures)
    return 1;

  struct expect pending[65536];
  memset(pending, 0, sizeof pending);
  uint8_t version = 1;
  int current = 0;
  long sent = 0, answered = 0, wrong = 0, torn = 0, in_flight = 0, by_version[3] = {0, 0, 0};
  double gaps[64], holds[64];
  int done_reloads = 0, done_globals = 0;
  unsigned char frame[24 + 8], response[256];
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  double last_answer = 0;
  while (answered + wrong < requests) {
    /* A reload or a new table generation at its turn, with requests in flight. */
    if (sent > 0 && done_reloads < reloads && sent == every * (done_reloads + 1)) {
      cudaq_rt_reload_info info;
      current ^= 1;
      rc = cudaq_rt_reload(s, code[current], &info);
      CHECK(rc == CUDAQ_RT_OK && info.swapped == 1);
      if (rc != CUDAQ_RT_OK)
        break;
      version = (uint8_t)(current + 1);
      gaps[done_reloads] = info.hold_ms + info.swap_ms + info.launch_ms;
      holds[done_reloads] = info.hold_ms;
      printf("reload %d to v%d with %ld in flight: staged %.2f ms, gap %.3f ms (hold %.3f, swap "
             "%.3f, launch %.3f)\n",
             done_reloads + 1, version, in_flight, info.stage_ms, gaps[done_reloads], info.hold_ms,
             info.swap_ms, info.launch_ms);
      ++done_reloads;
    }
    if (sent > 0 && done_globals < reloads && sent == every * done_globals + every / 2) {
      make_table(table, ++generation);
      rc = cudaq_rt_set_global(s, "cudaq_rt_test_reload_table", table, sizeof table);
      CHECK(rc == CUDAQ_RT_OK);
      ++done_globals;
    }
    while (sent < requests && in_flight < WINDOW) {
      if (done_reloads < reloads && sent == every * (done_reloads + 1))
        break;
      if (done_globals < reloads && sent == every * done_globals + every / 2)
        break;
      cudaq_rt_request_header h;
      const int is_checked = (sent & 1) != 0;
      const uint64_t tag = 0x5eed000000000000ull + (uint64_t)sent;
      h.magic = CUDAQ_RT_REQUEST_MAGIC;
      h.function_id = is_checked ? fnv1a("checked") : APP_ID;
      h.arg_len = 8;
      h.request_id = (uint32_t)sent;
      h.ptp_timestamp = tag;
      memcpy(frame, &h, sizeof h);
      memcpy(frame + 24, &tag, 8);
      int accepted = 0;
      CHECK(cudaq_rt_send(s, frame, sizeof frame, &accepted) == CUDAQ_RT_OK);
      if (!accepted)
        break;
      struct expect *e = &pending[sent & 65535];
      CHECK(!e->used);
      *e = (struct expect){1, is_checked, version, generation, tag};
      ++sent;
      ++in_flight;
    }
    size_t size = 0;
    CHECK(cudaq_rt_receive(s, response, sizeof response, &size) == CUDAQ_RT_OK);
    clock_gettime(CLOCK_MONOTONIC, &now);
    const double t = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (size == 0) {
      if (last_answer > 0 && t - last_answer > 5) {
        fprintf(stderr, "no response for 5 s with %ld in flight\n", in_flight);
        ++failures;
        break;
      }
      continue;
    }
    last_answer = t;
    cudaq_rt_response_header r;
    memcpy(&r, response, sizeof r);
    struct expect *e = &pending[r.request_id & 65535];
    int ok = e->used && r.request_id < (uint32_t)sent && r.ptp_timestamp == e->tag;
    if (ok && e->checked) {
      uint32_t got[2];
      memcpy(got, response + 24, 8);
      if (r.status == 1)
        ++torn;
      ok = r.status == 0 && r.result_len == 8 && got[0] == e->generation && got[1] == e->version;
    } else if (ok) {
      ok = r.status == 0 && r.result_len == 9 && response[24] == e->version &&
           memcmp(response + 25, &e->tag, 8) == 0;
    }
    if (ok) {
      ++answered;
      ++by_version[e->version];
    } else {
      if (wrong < 5)
        fprintf(stderr,
                "wrong answer to request %u: status %d, %u bytes (expected version %u, "
                "generation %u)\n",
                r.request_id, r.status, r.result_len, e->version, e->generation);
      ++wrong;
    }
    e->used = 0;
    --in_flight;
  }
  cudaq_rt_dispatch_stats st;
  CHECK(cudaq_rt_get_stats(s, &st) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);
  printf("%ld requests, %d reloads, %d table generations: %ld answered right (%ld by v1, %ld by "
         "v2), %ld wrong, %ld torn, %ld lost; the kernels' counter: %llu\n",
         sent, done_reloads, done_globals, answered, by_version[1], by_version[2], wrong, torn,
         sent - answered - wrong, st.requests);
  CHECK(done_reloads == reloads && done_globals == reloads);
  CHECK(answered == requests && wrong == 0 && torn == 0);
  CHECK(st.requests == (unsigned long long)requests); /* the counters carried over */
  CHECK(by_version[1] > 0 && by_version[2] > 0);
  if (done_reloads > 0) {
    double sorted[64];
    memcpy(sorted, gaps, sizeof(double) * (size_t)done_reloads);
    qsort(sorted, (size_t)done_reloads, sizeof(double), by_double);
    printf("gap (hold + swap + launch) over %d reloads: p50 %.3f ms, max %.3f ms; hold p50 "
           "%.3f ms\n",
           done_reloads, sorted[done_reloads / 2], sorted[done_reloads - 1], holds[0]);
  }
  cudaq_rt_server_destroy(s);
  cudaq_rt_code_destroy(code[0]);
  cudaq_rt_code_destroy(code[1]);
  printf(failures ? "FAILED: %d checks\n" : "all checks passed\n", failures);
  return failures ? 1 : 0;
}
