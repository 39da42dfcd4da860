/* cudaq_rt/cudaq_rt.h: the C API. What cudaq-rt-run does, from an application's own process:
 * open device code (a package, or the program's own), choose a bridge and a dispatch kernel,
 * look handlers up by name, set globals, start, call handlers or feed frames, read counters,
 * stop. It is a thin layer over the runtime's one load path (runtime/src/load/server.h): links,
 * caches, checks and error texts are the same as the tools'.
 *
 * The life of a server:
 *
 *   cudaq_rt_code *code;                      cudaq_rt_open_self(&code) or
 *                                             cudaq_rt_open_package("app.cudaqpkg", &code)
 *   cudaq_rt_config cfg; cudaq_rt_config_init(&cfg); cfg.bridge = "loopback"; ...
 *   cudaq_rt_server *srv;                     cudaq_rt_server_create(code, &cfg, &srv)
 *   cudaq_rt_load(srv);                       the GPU: a cubin (package, cache, or a link now),
 *                                             the module, every handler's address
 *   cudaq_rt_lookup_handler(srv, "decode", &fn);            optional: the application's own
 *   cudaq_rt_set_function(srv, my_id, fn);                  function table
 *   cudaq_rt_set_global(srv, "table", bytes, size);         optional
 *   cudaq_rt_start(srv);                      launches the dispatch kernel (loads first if needed)
 *   cudaq_rt_call(srv, id, arg, len, out, cap, &out_len, &status, 1.0);   or send/receive
 *   cudaq_rt_get_stats(srv, &stats);
 *   cudaq_rt_stop(srv); cudaq_rt_server_destroy(srv); cudaq_rt_code_destroy(code);
 *
 * Every function returns CUDAQ_RT_OK (0) or an error code, and on an error sets the calling
 * thread's last error, a one-line text (cudaq_rt_last_error). No C++ exception crosses this
 * interface. Handles are opaque and freed only by their destroy function; a server must be
 * destroyed before the code it was created from. One thread at a time may use a server, except
 * cudaq_rt_get_stats, which any thread may call while another sends and receives.
 *
 * The guards:
 * - the function table holds only addresses that cudaq_rt_lookup_handler returned for this
 *   server's loaded module: any other address (made up, or looked up on another server, i.e. in
 *   another binary's device code) is refused by cudaq_rt_start with CUDAQ_RT_E_REFUSED, before
 *   anything is launched;
 * - cudaq_rt_open_self reads the device code of the files this process was started from, and
 *   refuses (CUDAQ_RT_E_REFUSED) a file on disk that is no longer the one mapped in the process
 *   (replaced or rebuilt since): that would be another binary's device code;
 * - a failed load or start leaves nothing running and can be retried on the same server, with
 *   the cause fixed (cudaq_rt_server_configure, cudaq_rt_clear_functions, ...).
 *
 * Persistent kernels: cudaq_rt_load and cudaq_rt_start load modules and copy synchronously, which
 * can wait behind a persistent kernel already running in the process (CUDA-Q realtime met this
 * deadlock under CUDA's lazy loading). Load and start every server before any other's kernel runs
 * (or stop it first), and set CUDA_MODULE_LOADING=EAGER before the process's first CUDA call.
 * Destroying a server frees GPU memory and unloads its module, which waits for every kernel on
 * the device: stop (or destroy) the servers whose kernels still run first, as
 * tests/capi/capi_test.c does.
 *
 * Link with libcudaq_rt (CMake: cudaq-rt::runtime). The header compiles as C99 and as C++. */
#ifndef CUDAQ_RT_C_API_H
#define CUDAQ_RT_C_API_H

#include "cudaq_rt/dispatch.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
#define CUDAQ_RT_OK 0
#define CUDAQ_RT_E_ARGUMENT 1 /* a NULL handle or pointer, a bad config value */
#define CUDAQ_RT_E_STATE 2 /* not now: e.g. a lookup before cudaq_rt_load, a start while running */
#define CUDAQ_RT_E_NOT_FOUND 3 /* no such package, handler, dispatch kernel or global */
#define CUDAQ_RT_E_REFUSED 4   /* a guard said no (see above) */
#define CUDAQ_RT_E_NO_GPU 5    /* no CUDA driver or no device on this machine */
#define CUDAQ_RT_E_TIMEOUT 6   /* a call's response did not come in time */
#define CUDAQ_RT_E_FAILED 7    /* anything else: a link, a load, a kernel that faulted */

/* Device code to serve: a package, or this program's own. */
typedef struct cudaq_rt_code cudaq_rt_code;
/* A dispatch kernel on a GPU, its bridge instance, and its function table. */
typedef struct cudaq_rt_server cudaq_rt_server;

/* A handler's address in a server's loaded module, as cudaq_rt_lookup_handler returns it. */
typedef uint64_t cudaq_rt_device_fn;

typedef struct cudaq_rt_config {
  size_t struct_size;        /* sizeof(cudaq_rt_config): set by cudaq_rt_config_init */
  int device;                /* CUDA device ordinal (0) */
  const char *bridge;        /* bridge name or library path; NULL: the package's, else loopback */
  const char *bridge_config; /* the bridge instance's "KEY=VALUE,..."; NULL: its defaults */
  /* A custom dispatch kernel the code exports, or "builtin"; NULL: the one the code exports if
   * exactly one, else the built-in unified kernel. */
  const char *dispatcher;
  /* Launch shape; 0: the kernel's own (one block). The warp dispatcher takes B blocks of 32
   * threads, one serving warp each (cudaq-rt-run --grid). */
  unsigned grid_blocks, grid_threads;
  int allow_link;                  /* 1: link at load when no cubin is found (default 1) */
  int use_cache;                   /* 1: read and write the link cache (default 1) */
  const char *cache_dir;           /* NULL: CUDAQ_RT_CACHE_DIR, else the default */
  const char *const *link_options; /* extra nvJitLink options of a link at load */
  size_t num_link_options;
  double stop_timeout_s; /* how long cudaq_rt_stop waits for the kernel (5) */
  /* Public keys (PEM files, or directories of *.pem and *.pub), ':'-separated. NULL: those of
   * CUDAQ_RT_TRUST, if set. With any, cudaq_rt_load refuses a package that none of them signed
   * (CUDAQ_RT_E_REFUSED, the reason in cudaq_rt_last_error) before the GPU is touched, and uses
   * only link cache entries one of them signed. cudaq_rt_open_self's code is the program's own
   * and needs no signature. */
  const char *trust;
  /* The libnvJitLink links at load use: a path or a soname. NULL: CUDAQ_RT_NVJITLINK, else the
   * toolkit's. A process links with one: naming another than the one already in use is refused
   * by cudaq_rt_server_create and _configure (CUDAQ_RT_E_ARGUMENT), as is one that cannot read
   * cudaq-rt's device code (another CUDA major). */
  const char *nvjitlink;
} cudaq_rt_config;

/* Fills *config with the defaults above. */
void cudaq_rt_config_init(cudaq_rt_config *config);

/* The calling thread's last error: one line, never NULL ("" when none). Valid until the thread's
 * next failing call. */
const char *cudaq_rt_last_error(void);

/* Opens a package directory (NAME.cudaqpkg), verifying every blob, or a registry reference
 * (oci://HOST[:PORT]/REPO[:TAG]), pulled into the store under the link cache's directory as
 * cudaq-rt-run does. No GPU work. */
int cudaq_rt_open_package(const char *path, cudaq_rt_code **code);
/* Opens this program's own device code: the __nv_relfatbin of /proc/self/exe and of every
 * shared object it has loaded that exports handlers (a .cudaq_rt_exports section), bridge
 * libraries excepted. Built with -rdc and LTO-IR, as for cudaq-rt-pack. No GPU work. */
int cudaq_rt_open_self(cudaq_rt_code **code);
void cudaq_rt_code_destroy(cudaq_rt_code *code);

/* The code's handler exports, by index from 0 (NULL past the last), and its aliases' wire names
 * (cudaq-rt-pack --alias). The strings live as long as the code. */
const char *cudaq_rt_code_handler(const cudaq_rt_code *code, size_t index);
/* Checks the code's signature as cudaq_rt_load will, under `trust` (config.trust's syntax; NULL:
 * CUDAQ_RT_TRUST, if set): CUDAQ_RT_E_REFUSED, with cudaq_rt_load's reason, when none of the keys
 * signed it (or a key cannot be read); CUDAQ_RT_OK when one did, or when no key is given. For a
 * refusal at the open, before any server exists. No GPU work. */
int cudaq_rt_code_check_trust(const cudaq_rt_code *code, const char *trust);
/* CUDAQ_RT_OK when the code exports the dispatch kernel `name` (CUDAQ_RT_EXPORT_DISPATCH_KERNEL),
 * else CUDAQ_RT_E_NOT_FOUND with the names it does export. */
int cudaq_rt_find_dispatch_kernel(const cudaq_rt_code *code, const char *name);

/* A server over `code`, which must outlive it. Copies the config and its strings; a NULL config
 * is the one cudaq_rt_config_init makes (the loopback bridge, the unified kernel, the cache's
 * defaults). No GPU work. */
int cudaq_rt_server_create(cudaq_rt_code *code, const cudaq_rt_config *config,
                           cudaq_rt_server **server);
/* Replaces the config while the server is not running; the next load uses it (a loaded module
 * is dropped, and with it every address looked up and every function set). */
int cudaq_rt_server_configure(cudaq_rt_server *server, const cudaq_rt_config *config);
/* Stops the kernel if it runs, and frees everything. */
void cudaq_rt_server_destroy(cudaq_rt_server *server);

/* Finds or links the cubin for the GPU, loads it, reads every handler's address, writes the
 * globals set so far, creates the bridge instance. Not while running. */
int cudaq_rt_load(cudaq_rt_server *server);
/* A handler's address in the loaded module, by export name or alias. */
int cudaq_rt_lookup_handler(cudaq_rt_server *server, const char *name, cudaq_rt_device_fn *fn);
/* The application's function table, after a load. Without any cudaq_rt_set_function since the
 * last load, the kernel serves every handler under FNV-1a of its name and of each of its
 * aliases; with some, it serves exactly those entries. Checked by cudaq_rt_start (see the
 * guards). A function_id given twice is an error. Not while running. */
int cudaq_rt_set_function(cudaq_rt_server *server, uint32_t function_id, cudaq_rt_device_fn fn);
/* Back to the default table. */
int cudaq_rt_clear_functions(cudaq_rt_server *server);
/* Writes `size` bytes into the __device__ global `name` (exported with CUDAQ_RT_EXPORT_GLOBAL;
 * exactly its size): now when loaded, else at the load; kept for later loads and reloads. While
 * the kernel runs, between two requests: the kernel answers what it took and stops, the bytes are
 * written, and it starts again on the same ring (requests sent meanwhile wait there), so that no
 * request sees part of the old value and part of the new. A size over CUDAQ_RT_MAX_GLOBAL_SIZE is
 * CUDAQ_RT_E_ARGUMENT, before anything is copied. */
#define CUDAQ_RT_MAX_GLOBAL_SIZE ((size_t)1 << 30)
int cudaq_rt_set_global(cudaq_rt_server *server, const char *name, const void *data, size_t size);

/* Launches the dispatch kernel, loading first if needed. On an error nothing runs. After
 * cudaq_rt_stop, starts it again on the same bridge instance. */
int cudaq_rt_start(cudaq_rt_server *server);
/* Sets the shutdown flag and waits up to stop_timeout_s; an error names a hung or failed kernel. */
int cudaq_rt_stop(cudaq_rt_server *server);
/* CUDAQ_RT_OK while the kernel runs; an error naming the fault once it ended by itself. */
int cudaq_rt_check(cudaq_rt_server *server);

/* Hot reload: what cudaq_rt_reload did, in milliseconds on the host's clock. */
typedef struct cudaq_rt_reload_info {
  int swapped;      /* 1: the new code serves; 0: it was the code and globals already serving */
  double stage_ms;  /* the new code read, verified and its cubin found or linked, the old serving */
  double hold_ms;   /* the bridge held new requests, the old kernel answered what it had, stopped */
  double swap_ms;   /* the new module loaded, resolved and written, the old one unloaded */
  double launch_ms; /* the new kernel launched and the bridge taking requests again */
} cudaq_rt_reload_info;

/* Swaps a running server's code for `code` (another package, or a new build's), keeping its GPU,
 * config, bridge instance (and what is in its ring), counters and globals. First, with the old
 * kernel serving: `code` is opened, every blob verified, its signature checked under
 * config.trust, its cubin for this GPU found or linked, and its exports checked against the
 * function table and the globals set. A refusal there (CUDAQ_RT_E_REFUSED, the reason in
 * cudaq_rt_last_error: another bridge or dispatch kernel, a handler the table serves that `code`
 * lacks, a global it lacks or sizes differently, no cubin for this GPU, no trusted signature)
 * changes nothing. Then, between two requests: the old kernel answers what it took and stops,
 * the new module is loaded and its table and globals written, the old module unloaded, the new
 * kernel started on the same ring. Requests sent in between wait in the ring; none is lost or
 * answered twice. A failure there (CUDAQ_RT_E_FAILED) starts the old kernel again as it was.
 * The function table carries over by handler name: an application's (cudaq_rt_set_function)
 * keeps its function_ids, each now served by the handler of the same name in `code`; the
 * default one becomes `code`'s. Addresses looked up before are no longer valid. The same code
 * and globals again swap nothing (info->swapped 0). `code` must outlive the server; the old code
 * may be destroyed once this returns CUDAQ_RT_OK. `info` may be NULL. */
int cudaq_rt_reload(cudaq_rt_server *server, cudaq_rt_code *code, cudaq_rt_reload_info *info);

/* Bytes per frame slot of the bridge instance (0 before a load): a request's arg_len and a
 * result are at most this less 24. */
uint32_t cudaq_rt_slot_size(const cudaq_rt_server *server);
/* The counters, read live from mapped memory. */
int cudaq_rt_get_stats(const cudaq_rt_server *server, cudaq_rt_dispatch_stats *stats);

/* Host-fed bridges (loopback): queue a whole request frame (*accepted 0: every slot is in
 * flight, try again), take the oldest response (*size 0: none yet). */
int cudaq_rt_send(cudaq_rt_server *server, const void *frame, size_t size, int *accepted);
int cudaq_rt_receive(cudaq_rt_server *server, void *buffer, size_t capacity, size_t *size);
/* One request and its response: builds the frame, sends it, waits up to timeout_s. *status is
 * the response's (0 ok, > 0 the handler's, < 0 a protocol error, cudaq_rt/wire.h); the result's
 * bytes go to `result` (at most `capacity`; a longer one is an error). */
int cudaq_rt_call(cudaq_rt_server *server, uint32_t function_id, const void *arg, uint32_t arg_len,
                  void *result, uint32_t capacity, uint32_t *result_len, int32_t *status,
                  double timeout_s);

/* Many requests to one function, up to `inflight` in flight (at most the bridge's slots), and all
 * their answers: request i's arguments are arg_lens[i] bytes at args + i * arg_stride (every one
 * arg_stride bytes when arg_lens is NULL); its result goes to results + i * result_stride, its
 * length to result_lens[i] and its status to statuses[i], whatever order the answers come in.
 * Every request's length is checked before the first is sent (CUDAQ_RT_E_ARGUMENT: nothing was
 * sent). CUDAQ_RT_OK once every request is answered, handler errors included (statuses[i] > 0);
 * CUDAQ_RT_E_TIMEOUT when an answer does not come within timeout_s of the last, CUDAQ_RT_E_FAILED
 * for a kernel that failed or an answer that does not fit result_stride. */
int cudaq_rt_call_batch(cudaq_rt_server *server, uint32_t function_id, const void *args,
                        size_t arg_stride, const uint32_t *arg_lens, size_t count, void *results,
                        size_t result_stride, uint32_t *result_lens, int32_t *statuses,
                        uint32_t inflight, double timeout_s);

/* What cudaq_rt_bench measured (cudaq-rt-run --bench's summary). Latencies in microseconds, from
 * handing a request to the bridge to taking its answer; percentiles are nearest-rank. */
typedef struct cudaq_rt_bench_report {
  size_t struct_size; /* sizeof(cudaq_rt_bench_report): set by the caller */
  uint64_t requests;  /* measured, after the warm-up */
  uint64_t wrong;     /* answers with a status other than 0, another request's id, a wrong echo */
  double seconds, requests_per_s;
  double min_us, mean_us, p50_us, p90_us, p99_us, p999_us, max_us;
} cudaq_rt_bench_report;

/* Sends `warmup` and then `requests` requests to `function_id` with the same `arg_len` bytes,
 * `inflight` at a time (at most the bridge's slots), as cudaq-rt-run --bench does, and measures
 * the latter. expect_echo 1: the handler echoes its input, and each request carries its id in
 * its first 4 bytes (when arg_len >= 4), so that every result is checked to be its own request's.
 * Where the bridge has several feeders (the loopback bridge's feeders=N), one thread drives each,
 * with its share of `inflight` and of the requests; cudaq_rt_call and cudaq_rt_call_batch use
 * the first feeder's slots alone. CUDAQ_RT_E_TIMEOUT when an answer does not come within
 * timeout_s. */
int cudaq_rt_bench(cudaq_rt_server *server, uint32_t function_id, const void *arg, uint32_t arg_len,
                   uint64_t requests, uint32_t inflight, uint64_t warmup, int expect_echo,
                   double timeout_s, cudaq_rt_bench_report *report);

#ifdef __cplusplus
}
#endif

#endif /* CUDAQ_RT_C_API_H */
