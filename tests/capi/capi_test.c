/* The C API (cudaq_rt/cudaq_rt.h) driven from C, as an application would.
 *
 *   capi_test --cpu [--replace OTHER]   what needs no GPU: errors and their texts, the
 *                                       thread-local last error, this program's own device code;
 *                                       with --replace, OTHER is renamed over this program's file
 *                                       (run a copy: the test harness does) and cudaq_rt_open_self
 *                                       must refuse it
 *   capi_test --gpu PACKAGE             end to end on the GPU (exit 77 where there is none): this
 *                                       program's handlers and PACKAGE's (the example
 *                                       application), the application's own function table, a
 *                                       global, counters, send/receive, and the guards
 *
 * Each check prints what failed; the exit status is 0 when all passed, 1 otherwise. */
#define _POSIX_C_SOURCE 200809L

#include "cudaq_rt/cudaq_rt.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond,     \
              cudaq_rt_last_error());                                                              \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* The last error starts with `prefix` and holds `part` (either may be NULL). */
static int error_is(const char *prefix, const char *part) {
  const char *e = cudaq_rt_last_error();
  if (prefix && strncmp(e, prefix, strlen(prefix)) != 0)
    return 0;
  return !part || strstr(e, part) != NULL;
}

static int has_handler(const cudaq_rt_code *code, const char *name) {
  const char *h;
  size_t i;
  for (i = 0; (h = cudaq_rt_code_handler(code, i)) != NULL; ++i)
    if (strcmp(h, name) == 0)
      return 1;
  return 0;
}

static void *other_thread(void *arg) {
  cudaq_rt_code *code = NULL;
  (void)arg;
  /* A fresh thread starts with no error, and its failures are its own. */
  if (cudaq_rt_last_error()[0] != '\0')
    return (void *)1;
  if (cudaq_rt_open_package("/nonexistent/other.cudaqpkg", &code) != CUDAQ_RT_E_NOT_FOUND)
    return (void *)2;
  if (!error_is("'/nonexistent/other.cudaqpkg': no such package", NULL))
    return (void *)3;
  return NULL;
}

static int cpu_checks(const char *replacement) {
  cudaq_rt_code *code = NULL, *self = NULL;
  cudaq_rt_server *server = NULL;
  cudaq_rt_config cfg;
  cudaq_rt_device_fn fn = 0;
  pthread_t thread;
  void *thread_result = NULL;
  int value = 1;

  CHECK(cudaq_rt_last_error()[0] == '\0');
  CHECK(cudaq_rt_open_package("/nonexistent/app.cudaqpkg", &code) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(code == NULL);
  CHECK(strcmp(cudaq_rt_last_error(), "'/nonexistent/app.cudaqpkg': no such package") == 0);
  CHECK(cudaq_rt_open_package(NULL, &code) == CUDAQ_RT_E_ARGUMENT);
  CHECK(error_is("cudaq_rt_open_package: path and code must not be NULL", NULL));

  /* Another thread's errors do not touch this thread's last error. */
  CHECK(cudaq_rt_open_package("/nonexistent/app.cudaqpkg", &code) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(pthread_create(&thread, NULL, other_thread, NULL) == 0);
  CHECK(pthread_join(thread, &thread_result) == 0);
  CHECK(thread_result == NULL);
  CHECK(strcmp(cudaq_rt_last_error(), "'/nonexistent/app.cudaqpkg': no such package") == 0);

  /* This program's own device code: its handlers, its one global, no dispatch kernel. */
  CHECK(cudaq_rt_open_self(&self) == CUDAQ_RT_OK);
  if (!self)
    return 1;
  CHECK(has_handler(self, "capi_scale"));
  CHECK(has_handler(self, "capi_add_offset"));
  CHECK(!has_handler(self, "add_offset"));
  CHECK(cudaq_rt_code_handler(self, 2) == NULL);
  CHECK(cudaq_rt_find_dispatch_kernel(self, "my_dispatch") == CUDAQ_RT_E_NOT_FOUND);
  CHECK(error_is("'this program (", ")': no dispatch kernel 'my_dispatch': the code exports none "
                                    "('builtin' is the unified kernel, 'warp' the warp-wide "
                                    "one)"));

  cudaq_rt_config_init(&cfg);
  cfg.dispatcher = "my_dispatch";
  CHECK(cudaq_rt_server_create(self, &cfg, &server) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(server == NULL);
  CHECK(error_is(NULL, "no dispatch kernel 'my_dispatch'"));
  cudaq_rt_config_init(&cfg);
  cfg.struct_size = 8;
  CHECK(cudaq_rt_server_create(self, &cfg, &server) == CUDAQ_RT_E_ARGUMENT);
  CHECK(error_is("cudaq_rt_config: struct_size is 8, not ",
                 "(initialise it with cudaq_rt_config_init)"));
  cudaq_rt_config_init(&cfg);
  cfg.grid_blocks = 1;
  CHECK(cudaq_rt_server_create(self, &cfg, &server) == CUDAQ_RT_E_ARGUMENT);
  CHECK(error_is("cudaq_rt_config: grid_blocks and grid_threads are both 0", NULL));

  cudaq_rt_config_init(&cfg);
  CHECK(cudaq_rt_server_create(self, &cfg, &server) == CUDAQ_RT_OK);
  if (server) {
    /* Before a load there is nothing to look up, count or send to. */
    CHECK(cudaq_rt_lookup_handler(server, "capi_scale", &fn) == CUDAQ_RT_E_STATE);
    CHECK(error_is("'this program (", ")': cudaq_rt_lookup_handler 'capi_scale': nothing is "
                                      "loaded (cudaq_rt_load first)"));
    CHECK(cudaq_rt_slot_size(server) == 0);
    CHECK(cudaq_rt_set_global(server, "not an identifier", &value, sizeof value) ==
          CUDAQ_RT_E_ARGUMENT);
    CHECK(error_is(NULL, "global 'not an identifier' is not a C identifier"));
    /* Kept for the load. */
    CHECK(cudaq_rt_set_global(server, "capi_offset", &value, sizeof value) == CUDAQ_RT_OK);
    CHECK(cudaq_rt_set_function(server, 7, 0x1234) == CUDAQ_RT_E_STATE);
    CHECK(error_is(NULL, "cudaq_rt_set_function: nothing is loaded (cudaq_rt_load first)"));
    cudaq_rt_server_destroy(server);
  }

  if (replacement) {
    /* Someone replaces this program's file: its device code is now another binary's. */
    char self_path[4096];
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    cudaq_rt_code *replaced = NULL;
    CHECK(n > 0);
    if (n > 0) {
      self_path[n] = '\0';
      CHECK(rename(replacement, self_path) == 0);
      CHECK(cudaq_rt_open_self(&replaced) == CUDAQ_RT_E_REFUSED);
      CHECK(replaced == NULL);
      CHECK(error_is(NULL, "is not the binary this process runs (it was replaced on disk since "
                           "the process started): its device code is another binary's"));
      fprintf(stderr, "replaced binary refused: %s\n", cudaq_rt_last_error());
    }
  }
  cudaq_rt_code_destroy(self);
  return failures;
}

static uint32_t id_of(const char *name) {
  return cudaq_rt_function_id(name);
}

/* One call of a handler taking and returning one int. */
static int call_int(cudaq_rt_server *s, uint32_t function_id, int arg, int *result,
                    int32_t *status) {
  uint32_t len = 0;
  int rc =
      cudaq_rt_call(s, function_id, &arg, sizeof arg, result, sizeof *result, &len, status, 10.0);
  if (rc == CUDAQ_RT_OK && *status == 0 && len != sizeof *result)
    return -1;
  return rc;
}

/* A failed link is retried: a load with an option nvJitLink refuses fails and leaves nothing
 * loaded; the same server, configured right, then loads. Exits 77 where there is no GPU. */
static cudaq_rt_server *load_after_failed_link(cudaq_rt_code *self) {
  cudaq_rt_server *mine = NULL;
  cudaq_rt_config cfg;
  const char *bad_options[] = {"-no-such-nvjitlink-option"};
  int offset = 1000, rc;

  cudaq_rt_config_init(&cfg);
  cfg.link_options = bad_options;
  cfg.num_link_options = 1;
  CHECK(cudaq_rt_server_create(self, &cfg, &mine) == CUDAQ_RT_OK);
  if (!mine)
    return NULL;
  rc = cudaq_rt_load(mine);
  if (rc == CUDAQ_RT_E_NO_GPU) {
    printf("SKIPPED: %s\n", cudaq_rt_last_error());
    exit(77);
  }
  CHECK(rc == CUDAQ_RT_E_FAILED);
  fprintf(stderr, "failed link: %s\n", cudaq_rt_last_error());
  CHECK(cudaq_rt_slot_size(mine) == 0);
  CHECK(cudaq_rt_start(mine) == CUDAQ_RT_E_FAILED);
  cudaq_rt_config_init(&cfg);
  CHECK(cudaq_rt_server_configure(mine, &cfg) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_global(mine, "capi_offset", &offset, sizeof offset) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_load(mine) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_slot_size(mine) > 24);
  return mine;
}

/* Globals: the wrong size, a name the module lacks. */
static void check_globals(cudaq_rt_server *mine) {
  int offset = 1000;
  CHECK(cudaq_rt_set_global(mine, "capi_offset", &offset, 2) == CUDAQ_RT_E_ARGUMENT);
  CHECK(error_is(NULL, "global 'capi_offset' is 4 bytes, but 2 bytes were given"));
  CHECK(cudaq_rt_set_global(mine, "no_such_global", &offset, sizeof offset) ==
        CUDAQ_RT_E_NOT_FOUND);
}

/* Lookups, by export name; a name the code lacks. */
static void look_up_handlers(cudaq_rt_server *mine, cudaq_rt_device_fn *scale,
                             cudaq_rt_device_fn *add) {
  CHECK(cudaq_rt_lookup_handler(mine, "capi_scale", scale) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_lookup_handler(mine, "capi_add_offset", add) == CUDAQ_RT_OK);
  CHECK(*scale != 0 && *add != 0 && *scale != *add);
  CHECK(cudaq_rt_lookup_handler(mine, "capi_missing", scale) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(error_is(NULL, "no handler 'capi_missing': the code exports "));
  CHECK(cudaq_rt_lookup_handler(mine, "capi_scale", scale) == CUDAQ_RT_OK);
}

/* A forged entry is refused at start, and nothing runs; the same server then starts with a
 * good table. */
static void check_forged_entry_refused(cudaq_rt_server *mine, cudaq_rt_device_fn scale) {
  CHECK(cudaq_rt_set_function(mine, id_of("double_it"), scale + 16) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(mine) == CUDAQ_RT_E_REFUSED);
  CHECK(error_is(NULL, "did not come from cudaq_rt_lookup_handler on this server's load"));
  fprintf(stderr, "forged entry: %s\n", cudaq_rt_last_error());
  CHECK(cudaq_rt_check(mine) == CUDAQ_RT_E_STATE);
  CHECK(cudaq_rt_clear_functions(mine) == CUDAQ_RT_OK);
}

/* The application's own table: function_ids of its choosing, and only those. One of them is
 * another handler's export name: the table, not the name, says what it calls (a whole-program
 * link's direct calls must check the pointer, not trust the id). */
static void check_application_table(cudaq_rt_server *mine, cudaq_rt_device_fn scale,
                                    cudaq_rt_device_fn add) {
  int result = 0;
  int32_t status = 0;
  CHECK(cudaq_rt_set_function(mine, id_of("double_it"), scale) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(mine, id_of("offset_it"), add) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(mine, id_of("capi_add_offset"), scale) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(mine, id_of("offset_it"), scale) == CUDAQ_RT_E_ARGUMENT);
  CHECK(error_is(NULL, "is in the function table already"));
  CHECK(cudaq_rt_start(mine) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_check(mine) == CUDAQ_RT_OK);
  CHECK(call_int(mine, id_of("double_it"), 21, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == 0 && result == 42);
  CHECK(call_int(mine, id_of("offset_it"), 5, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == 0 && result == 1005);
  CHECK(call_int(mine, id_of("capi_add_offset"), 21, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == 0 && result == 42);
  CHECK(call_int(mine, id_of("capi_scale"), 5, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == CUDAQ_RT_STATUS_UNKNOWN_FUNCTION);
  CHECK(cudaq_rt_set_function(mine, 1, scale) == CUDAQ_RT_E_STATE);
}

/* A raw frame through send and receive. */
static void check_raw_frame(cudaq_rt_server *mine) {
  unsigned char frame[24 + 4], response[1024];
  cudaq_rt_request_header h;
  cudaq_rt_response_header r;
  int arg = -7, accepted = 0, polls = 0;
  size_t size = 0;
  h.magic = CUDAQ_RT_REQUEST_MAGIC;
  h.function_id = id_of("double_it");
  h.arg_len = 4;
  h.request_id = 777;
  h.ptp_timestamp = 123456789u;
  memcpy(frame, &h, sizeof h);
  memcpy(frame + 24, &arg, sizeof arg);
  CHECK(cudaq_rt_send(mine, frame, sizeof frame, &accepted) == CUDAQ_RT_OK);
  CHECK(accepted == 1);
  while (size == 0 && polls++ < 10000000)
    CHECK(cudaq_rt_receive(mine, response, sizeof response, &size) == CUDAQ_RT_OK);
  CHECK(size >= 28);
  memcpy(&r, response, sizeof r);
  memcpy(&arg, response + 24, sizeof arg);
  CHECK(r.magic == CUDAQ_RT_RESPONSE_MAGIC && r.status == 0 && r.result_len == 4);
  CHECK(r.request_id == 777 && r.ptp_timestamp == 123456789u && arg == -14);
}

/* The counters of everything above, printed; then the kernel stops. */
static void check_counters_and_stop(cudaq_rt_server *mine) {
  cudaq_rt_dispatch_stats st;
  CHECK(cudaq_rt_get_stats(mine, &st) == CUDAQ_RT_OK);
  CHECK(st.requests == 5 && st.ok == 4 && st.protocol_errors == 1 && st.handler_errors == 0);
  printf("counters: requests %llu ok %llu handler_errors %llu protocol_errors %llu\n", st.requests,
         st.ok, st.handler_errors, st.protocol_errors);
  CHECK(cudaq_rt_stop(mine) == CUDAQ_RT_OK);
}

/* The package, with its default table (every handler under its own name): a call, and the address
 * of its sum_i32 looked up. Its server, stopped, or NULL where none was created. */
static cudaq_rt_server *serve_package(cudaq_rt_code *app, cudaq_rt_device_fn *sum_i32) {
  cudaq_rt_server *theirs = NULL;
  cudaq_rt_config cfg;
  int values[3] = {1, 2, 3};
  long long sum = 0;
  uint32_t len = 0;
  int32_t status = 0;
  cudaq_rt_config_init(&cfg);
  CHECK(cudaq_rt_server_create(app, &cfg, &theirs) == CUDAQ_RT_OK);
  if (!theirs)
    return NULL;
  CHECK(cudaq_rt_start(theirs) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_call(theirs, id_of("sum_i32"), values, sizeof values, &sum, sizeof sum, &len,
                      &status, 10.0) == CUDAQ_RT_OK);
  CHECK(status == 0 && len == 8 && sum == 6);
  CHECK(cudaq_rt_lookup_handler(theirs, "sum_i32", sum_i32) == CUDAQ_RT_OK);
  /* Its kernel stops (the module stays loaded, and the address looked up): loading or starting
   * while another persistent kernel of this process runs could wait behind it (cudaq_rt.h). */
  CHECK(cudaq_rt_stop(theirs) == CUDAQ_RT_OK);
  return theirs;
}

/* Device code from another binary: an address looked up on the package's server is refused
 * in this program's table. */
static void check_other_binary_refused(cudaq_rt_server *mine, cudaq_rt_device_fn sum_i32) {
  CHECK(cudaq_rt_clear_functions(mine) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(mine, id_of("sum_i32"), sum_i32) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(mine) == CUDAQ_RT_E_REFUSED);
  CHECK(error_is(NULL, "was looked up on a server of '"));
  CHECK(error_is(NULL, "': device code from another binary cannot serve here"));
  fprintf(stderr, "other binary: %s\n", cudaq_rt_last_error());
  CHECK(cudaq_rt_check(mine) == CUDAQ_RT_E_STATE);
}

/* Back to the default table: it starts again on the same bridge instance, and counts on. */
static void check_default_table_again(cudaq_rt_server *mine) {
  cudaq_rt_dispatch_stats st;
  int result = 0;
  int32_t status = 0;
  CHECK(cudaq_rt_clear_functions(mine) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(mine) == CUDAQ_RT_OK);
  CHECK(call_int(mine, id_of("capi_scale"), 8, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == 0 && result == 16);
  CHECK(call_int(mine, id_of("capi_add_offset"), -1000, &result, &status) == CUDAQ_RT_OK);
  CHECK(status == 0 && result == 0);
  CHECK(cudaq_rt_get_stats(mine, &st) == CUDAQ_RT_OK);
  CHECK(st.requests == 7 && st.ok == 6);
}

static int gpu_checks(const char *package) {
  cudaq_rt_code *self = NULL, *app = NULL;
  cudaq_rt_server *mine, *theirs;
  cudaq_rt_device_fn scale = 0, add = 0, sum_i32 = 0;

  /* Everything this process loads, loaded at once: a module CUDA loads lazily while a persistent
   * kernel runs can wait behind it. */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  CHECK(cudaq_rt_open_self(&self) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_open_package(package, &app) == CUDAQ_RT_OK);
  if (!self || !app)
    return 1;
  mine = load_after_failed_link(self);
  if (!mine)
    return 1;
  check_globals(mine);
  look_up_handlers(mine, &scale, &add);
  check_forged_entry_refused(mine, scale);
  check_application_table(mine, scale, add);
  check_raw_frame(mine);
  check_counters_and_stop(mine);
  theirs = serve_package(app, &sum_i32);
  if (!theirs)
    return 1;
  check_other_binary_refused(mine, sum_i32);
  check_default_table_again(mine);

  /* mine's kernel first: freeing theirs (cudaFree, the module's unload) waits for every kernel on
   * the device, so it would wait for mine's forever (cudaq_rt.h). */
  cudaq_rt_server_destroy(mine);
  cudaq_rt_server_destroy(theirs);
  cudaq_rt_code_destroy(app);
  cudaq_rt_code_destroy(self);
  return failures;
}

int main(int argc, char **argv) {
  int failed;
  if (argc >= 2 && strcmp(argv[1], "--cpu") == 0)
    failed = cpu_checks(argc == 4 && strcmp(argv[2], "--replace") == 0 ? argv[3] : NULL);
  else if (argc == 3 && strcmp(argv[1], "--gpu") == 0)
    failed = gpu_checks(argv[2]);
  else {
    fprintf(stderr, "usage: capi_test --cpu [--replace OTHER] | --gpu PACKAGE\n");
    return 2;
  }
  if (failed) {
    fprintf(stderr, "%d check(s) failed\n", failed);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
