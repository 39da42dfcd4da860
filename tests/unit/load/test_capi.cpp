// The C API (cudaq_rt.h) without a GPU: every entry point's code and last error for NULL handles
// and pointers and for a bad configuration, the error being the calling thread's own; what an
// unloaded server refuses, and the driver's "no GPU" on this machine. Then, through the test seam
// (capi_gpu.h: a server on a fake GPU, fake_gpu.h) and the echo bridge (echo_bridge.c), what a
// loaded and a running server refuse, and cudaq_rt_call's codes for an answer, a handler's status,
// a timeout, another request's answer and a result too big for the caller's buffer. One link at
// load (the example app, per TU), kept in a link cache for the later loads.
#include "cudaq_rt/cudaq_rt.h"

#include "load/capi_gpu.h"
#include "pack/pack.h"
#include "package/package.h"

#include <doctest/doctest.h>

#include "fake_gpu.h"
#include "package_fixture.h"
#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using package_fixture::example_options;
using package_fixture::packed;

namespace {

std::string last_error() {
  return cudaq_rt_last_error();
}

struct Fixture {
  ScratchDir dir{"cudaq_rt_test_capi"};
  fs::path package, with_dispatcher;
  std::string cache;

  Fixture() {
    ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, 1);
    PackOptions o = example_options(dir.path, "echo");
    o.aliases = {"add_them=sum_i32"};
    package = packed(o);
    o.inputs.push_back({CUDAQ_RT_TEST_UNIT_INPUTS "/dispatcher.o", Role::dispatcher, ""});
    o.name = "custom";
    o.aliases.clear();
    with_dispatcher = packed(o);
    cache = (dir.path / "cache").string();
  }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

// The example package opened, freed at the end of the scope.
struct Code {
  cudaq_rt_code *code = nullptr;
  explicit Code(const fs::path &p) {
    REQUIRE_MESSAGE(cudaq_rt_open_package(p.c_str(), &code) == CUDAQ_RT_OK, last_error());
  }
  ~Code() { cudaq_rt_code_destroy(code); }
};

struct Server {
  cudaq_rt_server *s = nullptr;
  ~Server() { cudaq_rt_server_destroy(s); }
};

cudaq_rt_config config(const char *bridge_config = nullptr) {
  cudaq_rt_config c;
  cudaq_rt_config_init(&c);
  c.cache_dir = fixture().cache.c_str();
  c.bridge_config = bridge_config;
  c.stop_timeout_s = 0.2;
  return c;
}

} // namespace

TEST_CASE("cudaq_rt_config_init: the documented defaults") {
  cudaq_rt_config c;
  std::memset(&c, 0x5a, sizeof c);
  cudaq_rt_config_init(&c);
  CHECK(c.struct_size == sizeof c);
  CHECK(c.device == 0);
  CHECK(c.bridge == nullptr);
  CHECK(c.bridge_config == nullptr);
  CHECK(c.dispatcher == nullptr);
  CHECK(c.grid_blocks == 0);
  CHECK(c.grid_threads == 0);
  CHECK(c.allow_link == 1);
  CHECK(c.use_cache == 1);
  CHECK(c.cache_dir == nullptr);
  CHECK(c.link_options == nullptr);
  CHECK(c.num_link_options == 0);
  CHECK(c.stop_timeout_s == 5);
  cudaq_rt_config_init(nullptr); // ignored
}

// The call's code is CUDAQ_RT_E_ARGUMENT and the thread's last error, read right after it, is
// `message`.
void refused(int rc, const std::string &message) {
  CHECK(rc == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == message);
}

TEST_CASE("NULL handles and pointers: CUDAQ_RT_E_ARGUMENT, naming the call that refused them") {
  cudaq_rt_code *code = reinterpret_cast<cudaq_rt_code *>(0x1);
  cudaq_rt_server *server = reinterpret_cast<cudaq_rt_server *>(0x1);
  cudaq_rt_device_fn fn = 0;
  cudaq_rt_dispatch_stats stats{};
  uint8_t buffer[8];
  size_t size = 0;
  int accepted = 0;
  uint32_t result_len = 0;
  int32_t status = 0;
  cudaq_rt_config cfg = config();
  refused(cudaq_rt_open_package(nullptr, &code),
          "cudaq_rt_open_package: path and code must not be NULL");
  refused(cudaq_rt_open_package("x.cudaqpkg", nullptr),
          "cudaq_rt_open_package: path and code must not be NULL");
  refused(cudaq_rt_open_self(nullptr), "cudaq_rt_open_self: code must not be NULL");
  refused(cudaq_rt_find_dispatch_kernel(nullptr, "mine"),
          "cudaq_rt_find_dispatch_kernel: code and name must not be NULL");
  refused(cudaq_rt_server_create(nullptr, &cfg, &server),
          "cudaq_rt_server_create: code and server must not be NULL");
  refused(cudaq_rt_server_create(code, &cfg, nullptr),
          "cudaq_rt_server_create: code and server must not be NULL");
  refused(cudaq_rt_server_configure(nullptr, &cfg),
          "cudaq_rt_server_configure: server and config must not be NULL");
  refused(cudaq_rt_server_configure(server, nullptr),
          "cudaq_rt_server_configure: server and config must not be NULL");
  refused(cudaq_rt_load(nullptr), "cudaq_rt_load: server must not be NULL");
  refused(cudaq_rt_lookup_handler(nullptr, "echo", &fn),
          "cudaq_rt_lookup_handler: server, name and fn must not be NULL");
  refused(cudaq_rt_lookup_handler(server, nullptr, &fn),
          "cudaq_rt_lookup_handler: server, name and fn must not be NULL");
  refused(cudaq_rt_lookup_handler(server, "echo", nullptr),
          "cudaq_rt_lookup_handler: server, name and fn must not be NULL");
  refused(cudaq_rt_set_function(nullptr, 1, fn), "cudaq_rt_set_function: server must not be NULL");
  refused(cudaq_rt_clear_functions(nullptr), "cudaq_rt_clear_functions: server must not be NULL");
  refused(cudaq_rt_set_global(nullptr, "g", buffer, 1),
          "cudaq_rt_set_global: server, name and data must not be NULL");
  refused(cudaq_rt_set_global(server, nullptr, buffer, 1),
          "cudaq_rt_set_global: server, name and data must not be NULL");
  refused(cudaq_rt_start(nullptr), "cudaq_rt_start: server must not be NULL");
  refused(cudaq_rt_reload(nullptr, code, nullptr),
          "cudaq_rt_reload: server and code must not be NULL");
  refused(cudaq_rt_reload(server, nullptr, nullptr),
          "cudaq_rt_reload: server and code must not be NULL");
  refused(cudaq_rt_stop(nullptr), "cudaq_rt_stop: server must not be NULL");
  refused(cudaq_rt_check(nullptr), "cudaq_rt_check: server must not be NULL");
  refused(cudaq_rt_get_stats(nullptr, &stats),
          "cudaq_rt_get_stats: server and stats must not be NULL");
  refused(cudaq_rt_get_stats(server, nullptr),
          "cudaq_rt_get_stats: server and stats must not be NULL");
  refused(cudaq_rt_send(nullptr, buffer, 8, &accepted),
          "cudaq_rt_send: server, frame and accepted must not be NULL");
  refused(cudaq_rt_send(server, buffer, 8, nullptr),
          "cudaq_rt_send: server, frame and accepted must not be NULL");
  refused(cudaq_rt_receive(nullptr, buffer, 8, &size),
          "cudaq_rt_receive: server, buffer and size must not be NULL");
  refused(cudaq_rt_receive(server, buffer, 8, nullptr),
          "cudaq_rt_receive: server, buffer and size must not be NULL");
  refused(cudaq_rt_call(nullptr, 1, buffer, 1, buffer, 8, &result_len, &status, 1),
          "cudaq_rt_call: server, arg, result, result_len and status must not be NULL");
  refused(cudaq_rt_call(server, 1, buffer, 1, buffer, 8, nullptr, &status, 1),
          "cudaq_rt_call: server, arg, result, result_len and status must not be NULL");
  refused(cudaq_rt_call(server, 1, buffer, 1, buffer, 8, &result_len, nullptr, 1),
          "cudaq_rt_call: server, arg, result, result_len and status must not be NULL");
  // Where there is nowhere to say NULL, nothing is written.
  CHECK(code == reinterpret_cast<cudaq_rt_code *>(0x1));
  CHECK(server == reinterpret_cast<cudaq_rt_server *>(0x1));
  // Functions that cannot fail answer NULL and 0 for NULL.
  CHECK(cudaq_rt_code_handler(nullptr, 0) == nullptr);
  CHECK(cudaq_rt_slot_size(nullptr) == 0);
  cudaq_rt_code_destroy(nullptr);
  cudaq_rt_server_destroy(nullptr);
}

TEST_CASE("the last error is the calling thread's own") {
  CHECK(cudaq_rt_load(nullptr) == CUDAQ_RT_E_ARGUMENT);
  const std::string mine = last_error();
  std::string theirs_before = "(not run)", theirs_after;
  int rc = -1;
  std::thread other([&] {
    theirs_before = cudaq_rt_last_error();
    cudaq_rt_code *code = nullptr;
    rc = cudaq_rt_open_package("/nonexistent/other.cudaqpkg", &code);
    theirs_after = cudaq_rt_last_error();
  });
  other.join();
  CHECK(theirs_before == ""); // a fresh thread has none
  CHECK(rc == CUDAQ_RT_E_NOT_FOUND);
  CHECK(theirs_after == "'/nonexistent/other.cudaqpkg': no such package");
  CHECK(last_error() == mine);
  CHECK(mine == "cudaq_rt_load: server must not be NULL");
}

TEST_CASE("opening code: no such package, not a package, its handlers and aliases") {
  cudaq_rt_code *code = reinterpret_cast<cudaq_rt_code *>(0x1);
  CHECK(cudaq_rt_open_package("/nonexistent/x.cudaqpkg", &code) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(code == nullptr);
  CHECK(last_error() == "'/nonexistent/x.cudaqpkg': no such package");
  ScratchDir s;
  CHECK(cudaq_rt_open_package(s.path.c_str(), &code) == CUDAQ_RT_E_FAILED);
  CHECK(code == nullptr);
  CHECK(last_error().rfind("'" + s.path.string() + "", 0) == 0);

  Code example(fixture().package);
  std::vector<std::string> names;
  for (size_t i = 0; cudaq_rt_code_handler(example.code, i); ++i)
    names.push_back(cudaq_rt_code_handler(example.code, i));
  CHECK(names == std::vector<std::string>{"axpy_f32", "echo", "lut_decode", "parity", "sum_i32",
                                          "add_them"});
  CHECK(cudaq_rt_code_handler(example.code, names.size()) == nullptr);

  CHECK(cudaq_rt_find_dispatch_kernel(example.code, "mine") == CUDAQ_RT_E_NOT_FOUND);
  CHECK(last_error() == "'" + fixture().package.string() +
                            "': no dispatch kernel 'mine': the code exports none ('builtin' is "
                            "the unified kernel, 'warp' the warp-wide one)");
  CHECK(cudaq_rt_find_dispatch_kernel(example.code, nullptr) == CUDAQ_RT_E_ARGUMENT);
  Code custom(fixture().with_dispatcher);
  CHECK(cudaq_rt_find_dispatch_kernel(custom.code, "test_custom_dispatch") == CUDAQ_RT_OK);
  CHECK(cudaq_rt_find_dispatch_kernel(custom.code, "mine") == CUDAQ_RT_E_NOT_FOUND);
  CHECK(last_error() == "'" + fixture().with_dispatcher.string() +
                            "': no dispatch kernel 'mine': the code exports test_custom_dispatch "
                            "('builtin' is the unified kernel, 'warp' the warp-wide one)");
}

TEST_CASE("cudaq_rt_open_package verifies every blob: one flipped byte is refused at the open") {
  // The header promised it and cudaq-rt-pack --list did it, but the open read the manifest only
  // (until b95327a): whatever blob a later load took from the package was trusted.
  ScratchDir s;
  const fs::path copy = package_fixture::copy_package(fixture().package, s.path, "flipped");
  fs::path victim;
  {
    auto pkg = Package::open(copy);
    REQUIRE(pkg);
    REQUIRE(!pkg->manifest().containers.empty());
    victim = copy / "blobs" / "sha256" / pkg->manifest().containers.back().digest.hex();
  }
  {
    Code whole(copy); // untouched, it opens
  }
  fs::permissions(victim, fs::perms::owner_write, fs::perm_options::add);
  std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(100);
  char c = 0;
  f.read(&c, 1);
  c = char(c ^ 0x01);
  f.seekp(100);
  f.write(&c, 1);
  f.close();
  cudaq_rt_code *code = reinterpret_cast<cudaq_rt_code *>(0x1);
  CHECK(cudaq_rt_open_package(copy.c_str(), &code) == CUDAQ_RT_E_FAILED);
  CHECK(code == nullptr);
  CHECK(last_error() == "'" + victim.string() + "': blob does not match its digest sha256:" +
                            victim.filename().string() +
                            " (the package is corrupt or was modified)");
}

TEST_CASE("cudaq_rt_open_self in a program without device code: refused, nothing left behind") {
  // This test program has no __nv_relfatbin: packing it fails, and the private package's
  // temporary directory goes with the failure.
  ScratchDir tmp;
  const char *old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.path.c_str(), 1);
  cudaq_rt_code *code = reinterpret_cast<cudaq_rt_code *>(0x1);
  const int rc = cudaq_rt_open_self(&code);
  old ? ::setenv("TMPDIR", saved.c_str(), 1) : ::unsetenv("TMPDIR");
  CHECK(rc == CUDAQ_RT_E_FAILED);
  CHECK(code == nullptr);
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  CHECK(last_error() == "'" + exe + "': no device code: no __nv_relfatbin section");
  CHECK(fs::is_empty(tmp.path));
}

TEST_CASE("a configuration that cannot be right is refused at create and at configure") {
  Code example(fixture().package);
  const char *const options[] = {"-O3", nullptr};
  struct Case {
    std::function<void(cudaq_rt_config &)> change;
    int rc;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](cudaq_rt_config &c) { c.struct_size = 8; }, CUDAQ_RT_E_ARGUMENT,
       cat("cudaq_rt_config: struct_size is 8, not ", sizeof(cudaq_rt_config),
           " (initialise it with cudaq_rt_config_init)")},
      {[](cudaq_rt_config &c) { c.device = -1; }, CUDAQ_RT_E_ARGUMENT,
       "cudaq_rt_config: device -1 is negative"},
      {[](cudaq_rt_config &c) { c.grid_blocks = 2; }, CUDAQ_RT_E_ARGUMENT,
       "cudaq_rt_config: grid_blocks and grid_threads are both 0 (the default shape) or both "
       "positive"},
      {[](cudaq_rt_config &c) { c.num_link_options = 2; }, CUDAQ_RT_E_ARGUMENT,
       "cudaq_rt_config: link_options is NULL but num_link_options is 2"},
      {[&](cudaq_rt_config &c) {
         c.link_options = options;
         c.num_link_options = 2;
       },
       CUDAQ_RT_E_ARGUMENT, "cudaq_rt_config: link_options[1] is NULL"},
      {[](cudaq_rt_config &c) { c.stop_timeout_s = -1; }, CUDAQ_RT_E_ARGUMENT,
       "cudaq_rt_config: stop_timeout_s must be 0 or more"},
      {[](cudaq_rt_config &c) { c.stop_timeout_s = std::nan(""); }, CUDAQ_RT_E_ARGUMENT,
       "cudaq_rt_config: stop_timeout_s must be 0 or more"},
      {[](cudaq_rt_config &c) { c.dispatcher = "mine"; }, CUDAQ_RT_E_NOT_FOUND,
       "'" + fixture().package.string() +
           "': no dispatch kernel 'mine': the code exports none ('builtin' is the unified "
           "kernel, 'warp' the warp-wide one)"},
  };
  Server good;
  cudaq_rt_config ok = config();
  REQUIRE(cudaq_rt_server_create(example.code, &ok, &good.s) == CUDAQ_RT_OK);
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    cudaq_rt_config c = config();
    cases[i].change(c);
    cudaq_rt_server *s = reinterpret_cast<cudaq_rt_server *>(0x1);
    CHECK(cudaq_rt_server_create(example.code, &c, &s) == cases[i].rc);
    CHECK(s == nullptr);
    CHECK(last_error() == cases[i].message);
    CHECK(cudaq_rt_server_configure(good.s, &c) == cases[i].rc);
    CHECK(last_error() == cases[i].message);
  }
  // A libnvJitLink that is not there, or not one: refused, named, before anything is loaded
  // (whichever the process loaded first, this one is not it).
  for (const char *path : {"/nonexistent/libnvJitLink.so.13", "/etc/passwd"}) {
    CAPTURE(path);
    cudaq_rt_config c = config();
    c.nvjitlink = path;
    cudaq_rt_server *s = nullptr;
    CHECK(cudaq_rt_server_create(example.code, &c, &s) == CUDAQ_RT_E_ARGUMENT);
    CHECK(s == nullptr);
    CHECK(last_error().rfind(cat("cudaq_rt_config: nvjitlink: '", path, "': "), 0) == 0);
    CHECK(cudaq_rt_server_configure(good.s, &c) == CUDAQ_RT_E_ARGUMENT);
  }
  // "builtin" is always there; a NULL config is the defaults.
  ok.dispatcher = "builtin";
  CHECK(cudaq_rt_server_configure(good.s, &ok) == CUDAQ_RT_OK);
  Server defaults;
  CHECK(cudaq_rt_server_create(example.code, nullptr, &defaults.s) == CUDAQ_RT_OK);
  CHECK(defaults.s != nullptr);
}

TEST_CASE("an unloaded server: what needs a module or a running kernel says so") {
  Code example(fixture().package);
  cudaq_rt_config cfg = config();
  Server server;
  REQUIRE(cudaq_rt_server_create(example.code, &cfg, &server.s) == CUDAQ_RT_OK);
  cudaq_rt_server *s = server.s;
  const std::string who = "'" + fixture().package.string() + "': ";
  cudaq_rt_device_fn fn = 0;
  cudaq_rt_dispatch_stats stats{};
  uint8_t buffer[64] = {};
  size_t size = 99;
  int accepted = 7;
  uint32_t result_len = 99;
  int32_t status = 99;

  CHECK(cudaq_rt_lookup_handler(s, "echo", &fn) == CUDAQ_RT_E_STATE);
  CHECK(last_error() ==
        who + "cudaq_rt_lookup_handler 'echo': nothing is loaded (cudaq_rt_load first)");
  CHECK(cudaq_rt_set_function(s, 7, 0x1234) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_set_function: nothing is loaded (cudaq_rt_load first)");
  CHECK(cudaq_rt_check(s) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "nothing is loaded");
  CHECK(cudaq_rt_get_stats(s, &stats) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "nothing is loaded");
  CHECK(cudaq_rt_receive(s, buffer, sizeof buffer, &size) == CUDAQ_RT_E_STATE);
  CHECK(size == 0);
  CHECK(last_error() == who + "nothing is loaded");
  CHECK(cudaq_rt_send(s, buffer, 24, &accepted) == CUDAQ_RT_E_STATE);
  CHECK(accepted == 0);
  CHECK(last_error() == who + "cudaq_rt_send: the dispatch kernel is not running");
  CHECK(cudaq_rt_call(s, 1, buffer, 4, buffer, 8, &result_len, &status, 0) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == "cudaq_rt_call: timeout_s must be more than 0");
  CHECK(cudaq_rt_call(s, 1, nullptr, 4, buffer, 8, &result_len, &status, 1) == CUDAQ_RT_E_ARGUMENT);
  CHECK(cudaq_rt_call(s, 1, buffer, 4, nullptr, 8, &result_len, &status, 1) == CUDAQ_RT_E_ARGUMENT);
  CHECK(cudaq_rt_call(s, 1, buffer, 4, buffer, 8, &result_len, &status, 1) == CUDAQ_RT_E_STATE);
  CHECK(result_len == 0);
  CHECK(status == 0);
  CHECK(last_error() == who + "cudaq_rt_call: the dispatch kernel is not running");
  CHECK(cudaq_rt_set_global(s, "1table", buffer, 4) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "global '1table' is not a C identifier");
  CHECK(cudaq_rt_set_global(s, "table", nullptr, 4) == CUDAQ_RT_E_ARGUMENT);
  // A size no global can have is refused before anything is copied (it was E_FAILED, "internal
  // error: cannot create std::vector larger than max_size()").
  CHECK(cudaq_rt_set_global(s, "table", buffer, SIZE_MAX) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "global 'table': a value of " + std::to_string(SIZE_MAX) +
                            " bytes is over the limit of 1073741824 (CUDAQ_RT_MAX_GLOBAL_SIZE)");
  CHECK(cudaq_rt_set_global(s, "table", buffer, CUDAQ_RT_MAX_GLOBAL_SIZE + 1) ==
        CUDAQ_RT_E_ARGUMENT);
  // What can be done before a load: kept for it.
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_example_lut", buffer, 4) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_clear_functions(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_slot_size(s) == 0);
}

TEST_CASE("on this machine's driver: no GPU, said plainly by load and start") {
  auto why = no_gpu_reason();
  if (!why) {
    MESSAGE("this machine has a GPU: the no-GPU codes are not checked here");
    return;
  }
  Code example(fixture().package);
  cudaq_rt_config cfg = config();
  Server server;
  REQUIRE(cudaq_rt_server_create(example.code, &cfg, &server.s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_load(server.s) == CUDAQ_RT_E_NO_GPU);
  CHECK(last_error() == *why);
  CHECK(cudaq_rt_start(server.s) == CUDAQ_RT_E_NO_GPU);
  CHECK(last_error() == *why);
  CHECK(cudaq_rt_slot_size(server.s) == 0);
}

TEST_CASE("a loaded and a running server: lookups, the table, calls, and what waits for a stop") {
  Code example(fixture().package);
  cudaq_rt_config cfg = config();
  FakeGpu gpu;
  Server server;
  REQUIRE(create_server(example.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
  cudaq_rt_server *s = server.s;
  const std::string who = "'" + fixture().package.string() + "': ";
  REQUIRE_MESSAGE(cudaq_rt_load(s) == CUDAQ_RT_OK, last_error());
  CHECK(cudaq_rt_slot_size(s) == 1024);

  cudaq_rt_device_fn sum = 0, alias = 0, fn = 0;
  CHECK(cudaq_rt_lookup_handler(s, "sum_i32", &sum) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_lookup_handler(s, "add_them", &alias) == CUDAQ_RT_OK);
  CHECK(sum != 0);
  CHECK(alias == sum);
  CHECK(cudaq_rt_lookup_handler(s, "no_such", &fn) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(last_error() == who + "no handler 'no_such': the code exports axpy_f32, echo, lut_decode, "
                              "parity, sum_i32, add_them");
  CHECK(cudaq_rt_set_function(s, 7, sum) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(s, 7, sum) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "function_id 0x7 is in the function table already");
  CHECK(cudaq_rt_clear_functions(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_no_such_global", &fn, 4) == CUDAQ_RT_E_NOT_FOUND);

  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, last_error());
  CHECK(gpu.launches == 1);
  CHECK(cudaq_rt_check(s) == CUDAQ_RT_OK);
  const std::string running = "the dispatch kernel is running";
  CHECK(cudaq_rt_start(s) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_start: " + running);
  CHECK(cudaq_rt_load(s) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_load: " + running + " (stop it first)");
  CHECK(cudaq_rt_server_configure(s, &cfg) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_server_configure: " + running);
  CHECK(cudaq_rt_set_function(s, 9, sum) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_set_function: " + running);
  CHECK(cudaq_rt_clear_functions(s) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_clear_functions: " + running);
  // A global while running: checked against the module first, nothing stops when it is wrong.
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_example_lut", &fn, 4) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(gpu.launches == 1);

  // A call the echo bridge answers: the result, its length and status.
  const uint8_t arg[5] = {1, 2, 3, 4, 5};
  uint8_t result[16] = {};
  uint32_t result_len = 0;
  int32_t status = -1;
  REQUIRE_MESSAGE(cudaq_rt_call(s, cudaq_rt_function_id("echo"), arg, 5, result, sizeof result,
                                &result_len, &status, 1.0) == CUDAQ_RT_OK,
                  last_error());
  CHECK(result_len == 5);
  CHECK(status == 0);
  CHECK(std::equal(arg, arg + 5, result));
  CHECK(cudaq_rt_call(s, 1, arg, 5, result, 2, &result_len, &status, 1.0) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "the result is 5 bytes, more than the 2 the caller has room for");
  std::vector<uint8_t> big(1001);
  CHECK(cudaq_rt_call(s, 1, big.data(), 1001, result, 16, &result_len, &status, 1.0) ==
        CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() ==
        who + "cudaq_rt_call: 1001 bytes of arguments, but the bridge's slots hold 1000");

  // send and receive: a whole frame in, its response out.
  cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, 1, 0, 500, 0};
  int accepted = 0;
  CHECK(cudaq_rt_send(s, &h, sizeof h, &accepted) == CUDAQ_RT_OK);
  CHECK(accepted == 1);
  uint8_t frame[64];
  size_t size = 0;
  CHECK(cudaq_rt_receive(s, frame, sizeof frame, &size) == CUDAQ_RT_OK);
  REQUIRE(size == sizeof(cudaq_rt_response_header));
  cudaq_rt_response_header rs;
  std::memcpy(&rs, frame, sizeof rs);
  CHECK(rs.magic == CUDAQ_RT_RESPONSE_MAGIC);
  CHECK(rs.request_id == 500);
  CHECK(cudaq_rt_receive(s, frame, sizeof frame, &size) == CUDAQ_RT_OK);
  CHECK(size == 0); // none yet

  cudaq_rt_dispatch_stats stats{};
  CHECK(cudaq_rt_get_stats(s, &stats) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_check(s) == CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "the dispatch kernel is not running");
  // Stopped, it may be written again and started on the same load.
  CHECK(cudaq_rt_set_function(s, 9, sum) == CUDAQ_RT_OK);
  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, last_error());
  CHECK(gpu.launches == 2);
}

TEST_CASE("cudaq_rt_call's codes: a handler's status, a timeout, someone else's answer, a fault") {
  Code example(fixture().package);
  const std::string who = "'" + fixture().package.string() + "': ";
  const uint8_t arg[4] = {1, 2, 3, 4};
  uint8_t result[8];
  uint32_t result_len = 0;
  int32_t status = 0;
  auto started = [&](const char *bridge_config, FakeGpu &gpu, Server &server) {
    cudaq_rt_config cfg = config(bridge_config);
    REQUIRE(create_server(example.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
    REQUIRE_MESSAGE(cudaq_rt_start(server.s) == CUDAQ_RT_OK, last_error()); // loads first
    return server.s;
  };
  {
    FakeGpu gpu;
    Server server;
    cudaq_rt_server *s = started("status=3", gpu, server);
    CHECK(cudaq_rt_call(s, 1, arg, 4, result, 8, &result_len, &status, 1.0) == CUDAQ_RT_OK);
    CHECK(status == 3);
    CHECK(result_len == 4);
  }
  {
    FakeGpu gpu;
    Server server;
    cudaq_rt_server *s = started("silent", gpu, server);
    CHECK(cudaq_rt_call(s, 1, arg, 4, result, 8, &result_len, &status, 0.1) == CUDAQ_RT_E_TIMEOUT);
    CHECK(last_error() == who + "sm_90: no response within 0.1 s");
    // The kernel faults while the next call waits: a failure, not a timeout.
    gpu.faults = true;
    CHECK(cudaq_rt_call(s, 1, arg, 4, result, 8, &result_len, &status, 5.0) == CUDAQ_RT_E_FAILED);
    CHECK(last_error().find("sm_90: the dispatch kernel cudaq_rt_unified_dispatch failed: "
                            "CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
  }
  {
    // cudaq_rt_check names a fault once the kernel has ended by itself.
    FakeGpu gpu;
    Server server;
    cudaq_rt_server *s = started("", gpu, server);
    CHECK(cudaq_rt_check(s) == CUDAQ_RT_OK);
    gpu.faults = true;
    CHECK(cudaq_rt_check(s) == CUDAQ_RT_E_FAILED);
    CHECK(last_error() == who + "sm_90: the dispatch kernel cudaq_rt_unified_dispatch failed: "
                                "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
                                "encountered)");
  }
  {
    FakeGpu gpu;
    Server server;
    cudaq_rt_server *s = started("wrong_id", gpu, server);
    CHECK(cudaq_rt_call(s, 1, arg, 4, result, 8, &result_len, &status, 1.0) == CUDAQ_RT_E_FAILED);
    CHECK(last_error() == who + "the response is request 1001's, not request 1's");
  }
}

TEST_CASE("cudaq_rt_call_batch and cudaq_rt_bench: every answer by its request, and the codes") {
  Code example(fixture().package);
  const std::string who = "'" + fixture().package.string() + "': ";
  cudaq_rt_config cfg = config();
  FakeGpu gpu;
  Server server;
  REQUIRE(create_server(example.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
  cudaq_rt_server *s = server.s;
  const uint32_t echo = cudaq_rt_function_id("echo");
  uint32_t lens[3] = {};
  int32_t statuses[3] = {};
  uint8_t results[3 * 8] = {};
  const uint8_t args[3 * 4] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(cudaq_rt_call_batch(s, echo, args, 4, nullptr, 3, results, 8, lens, statuses, 2, 1.0) ==
        CUDAQ_RT_E_STATE);
  CHECK(last_error() == who + "cudaq_rt_call_batch: the dispatch kernel is not running");
  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, last_error());

  // Fixed-size rows, two in flight of the bridge's four slots.
  REQUIRE_MESSAGE(cudaq_rt_call_batch(s, echo, args, 4, nullptr, 3, results, 8, lens, statuses, 2,
                                      1.0) == CUDAQ_RT_OK,
                  last_error());
  for (int i = 0; i < 3; ++i) {
    CHECK(lens[i] == 4);
    CHECK(statuses[i] == 0);
    CHECK(std::equal(args + 4 * i, args + 4 * i + 4, results + 8 * i));
  }
  // Rows of their own lengths; more in flight than the bridge has slots is its slots.
  const uint32_t arg_lens[3] = {0, 3, 1};
  REQUIRE(cudaq_rt_call_batch(s, echo, args, 4, arg_lens, 3, results, 8, lens, statuses, 64, 1.0) ==
          CUDAQ_RT_OK);
  CHECK(lens[0] == 0);
  CHECK(lens[1] == 3);
  CHECK(lens[2] == 1);
  CHECK(results[8 * 2] == args[4 * 2]);
  // Refused whole before anything is sent: a length past the stride, or past the slots.
  const uint32_t too_long[3] = {4, 5, 1};
  CHECK(cudaq_rt_call_batch(s, echo, args, 4, too_long, 3, results, 8, lens, statuses, 2, 1.0) ==
        CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "cudaq_rt_call_batch: request 1: 5 bytes of arguments, but "
                              "arg_stride is 4");
  std::vector<uint8_t> big(2 * 1001);
  CHECK(cudaq_rt_call_batch(s, echo, big.data(), 1001, nullptr, 2, results, 8, lens, statuses, 2,
                            1.0) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error() == who + "cudaq_rt_call_batch: request 0: 1001 bytes of arguments, but the "
                              "bridge's slots hold 1000");
  // An answer that does not fit its row fails the batch, naming the request.
  CHECK(cudaq_rt_call_batch(s, echo, args, 4, nullptr, 3, results, 2, lens, statuses, 1, 1.0) ==
        CUDAQ_RT_E_FAILED);
  CHECK(last_error() == who + "request 0's result is 4 bytes, more than the result_stride of 2");
  CHECK(cudaq_rt_call_batch(s, echo, nullptr, 4, nullptr, 3, results, 8, lens, statuses, 1, 1.0) ==
        CUDAQ_RT_E_ARGUMENT);
  CHECK(cudaq_rt_call_batch(s, echo, args, 0, nullptr, 0, nullptr, 0, nullptr, nullptr, 1, 1.0) ==
        CUDAQ_RT_OK); // an empty batch

  cudaq_rt_bench_report report{};
  CHECK(cudaq_rt_bench(s, echo, args, 4, 100, 4, 10, 1, 1.0, &report) == CUDAQ_RT_E_ARGUMENT);
  CHECK(last_error().find("report->struct_size is 0") != std::string::npos);
  report.struct_size = sizeof report;
  REQUIRE_MESSAGE(cudaq_rt_bench(s, echo, args, 12, 500, 4, 10, 1, 1.0, &report) == CUDAQ_RT_OK,
                  last_error());
  CHECK(report.requests == 500);
  CHECK(report.wrong == 0);
  CHECK(report.requests_per_s > 0);
  CHECK(report.min_us <= report.p50_us);
  CHECK(report.p50_us <= report.max_us);
}

TEST_CASE("cudaq_rt_bench counts a corrupted echo as wrong; a batch refuses an answer that is no "
          "response or not its own, and times out on a silent bridge") {
  Code example(fixture().package);
  const uint32_t echo = cudaq_rt_function_id("echo");
  const uint8_t arg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint32_t len = 0;
  int32_t status = 0;
  uint8_t result[8];
  // A server started on the echo bridge answering as `mode` says (echo_bridge.c).
  auto batch_on = [&](const char *mode, double timeout_s) {
    cudaq_rt_config cfg = config(mode);
    FakeGpu gpu;
    Server server;
    REQUIRE(create_server(example.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
    REQUIRE_MESSAGE(cudaq_rt_start(server.s) == CUDAQ_RT_OK, last_error());
    if (std::string(mode) == "corrupt") {
      cudaq_rt_bench_report report{sizeof report};
      REQUIRE(cudaq_rt_bench(server.s, echo, arg, 8, 50, 2, 0, 1, 1.0, &report) == CUDAQ_RT_OK);
      CHECK(report.wrong == 50);
    }
    return cudaq_rt_call_batch(server.s, echo, arg, 8, nullptr, 1, result, 8, &len, &status, 1,
                               timeout_s);
  };
  CHECK(batch_on("corrupt", 1.0) == CUDAQ_RT_OK); // a batch does not judge results
  CHECK(batch_on("bad_magic", 1.0) == CUDAQ_RT_E_FAILED);
  CHECK_MESSAGE(last_error().find("a response that is not one (magic ") != std::string::npos,
                last_error());
  CHECK(batch_on("wrong_id", 1.0) == CUDAQ_RT_E_FAILED);
  CHECK_MESSAGE(last_error().find("an answer to request 1001, which this batch did not send or "
                                  "had answered already") != std::string::npos,
                last_error());
  CHECK(batch_on("silent", 0.1) == CUDAQ_RT_E_TIMEOUT);
  CHECK(last_error() == "'" + fixture().package.string() + "': sm_90: no response within 0.1 s");
}

TEST_CASE("config.trust: a package no trusted key signed is refused before the GPU; one signed "
          "loads") {
  ScratchDir keys;
  const std::string k1 = unit_files::write_file(keys.path / "k1.pub", test_keys::rfc8032_1_public),
                    k2 = unit_files::write_file(keys.path / "k2.pub", test_keys::rfc8032_2_public);
  auto signer = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  REQUIRE(signer);
  PackOptions o = example_options(keys.path, "echo");
  o.name = "signed";
  o.signer = std::make_shared<const SigningKey>(*signer);
  const fs::path signed_package = packed(o);
  const std::string k1_id = signer->id().short_str();

  Code plain(fixture().package), signed_code(signed_package);
  auto load_with = [&](Code &code, const std::string &trust, FakeGpu &gpu) {
    cudaq_rt_config cfg = config();
    cfg.trust = trust.c_str();
    Server server;
    REQUIRE(create_server(code.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
    return cudaq_rt_load(server.s);
  };
  // cudaq_rt_code_check_trust: the load's verdict and message, with no server and no GPU.
  CHECK(cudaq_rt_code_check_trust(plain.code, k1.c_str()) == CUDAQ_RT_E_REFUSED);
  const std::string unsigned_message = last_error();
  CHECK(cudaq_rt_code_check_trust(signed_code.code, k2.c_str()) == CUDAQ_RT_E_REFUSED);
  const std::string untrusted_message = last_error();
  CHECK(cudaq_rt_code_check_trust(signed_code.code, (k2 + ":" + k1).c_str()) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_code_check_trust(plain.code, nullptr) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_code_check_trust(nullptr, nullptr) == CUDAQ_RT_E_ARGUMENT);
  FakeGpu gpu;
  CHECK(load_with(plain, k1, gpu) == CUDAQ_RT_E_REFUSED);
  CHECK(last_error() == unsigned_message);
  CHECK(last_error() == "'" + fixture().package.string() +
                            "': not signed: no signature in signatures/ (cudaq-rt-pack or "
                            "cudaq-rt-link --sign KEY signs a package)");
  CHECK(load_with(signed_code, k2, gpu) == CUDAQ_RT_E_REFUSED);
  CHECK(last_error() == untrusted_message);
  CHECK(last_error().find("signed only by keys that are not trusted: " + k1_id) !=
        std::string::npos);
  CHECK(gpu.opens == 0);
  CHECK(load_with(signed_code, k2 + ":" + k1, gpu) == CUDAQ_RT_OK);
  CHECK(gpu.opens == 1);
  // No trust configured (NULL, and "" is the same): the unsigned package loads as before.
  CHECK(load_with(plain, "", gpu) == CUDAQ_RT_OK);
}

TEST_CASE("cudaq_rt_reload: the application's table carries over by name; a refusal changes "
          "nothing") {
  Fixture &f = fixture();
  PackOptions o = example_options(f.dir.path, "echo");
  o.name = "example_v2";
  const fs::path v2_path = packed(o);
  PackOptions r;
  r.inputs = {{CUDAQ_RT_TEST_RPC_INCREMENT, Role::application, ""},
              {CUDAQ_RT_TEST_LOOPBACK_BRIDGE, Role::bridge, "echo"}};
  r.output_dir = f.dir.path;
  r.name = "rpc";
  const fs::path rpc_path = packed(r);
  Code v1(f.package), v2(v2_path), rpc(rpc_path);

  cudaq_rt_config cfg = config();
  FakeGpu gpu;
  gpu.device_globals["cudaq_rt_example_lut"] = 256;
  Server server;
  REQUIRE(create_server(v1.code, &cfg, gpu, &server.s) == CUDAQ_RT_OK);
  cudaq_rt_server *s = server.s;
  cudaq_rt_reload_info info{};
  CHECK(cudaq_rt_reload(s, v2.code, &info) == CUDAQ_RT_E_STATE);
  CHECK(last_error().find("cudaq_rt_reload swaps a running kernel's code") != std::string::npos);
  REQUIRE_MESSAGE(cudaq_rt_load(s) == CUDAQ_RT_OK, last_error());
  cudaq_rt_device_fn echo = 0;
  REQUIRE(cudaq_rt_lookup_handler(s, "echo", &echo) == CUDAQ_RT_OK);
  REQUIRE(cudaq_rt_set_function(s, 42, echo) == CUDAQ_RT_OK);
  const std::vector<uint8_t> lut(256, 7);
  REQUIRE(cudaq_rt_set_global(s, "cudaq_rt_example_lut", lut.data(), lut.size()) == CUDAQ_RT_OK);
  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, last_error());
  CHECK(gpu.params.num_functions == 1);

  // rpc exports no `echo`, which the table serves as 42: refused, the old kernel never stopped.
  CHECK(cudaq_rt_reload(s, rpc.code, &info) == CUDAQ_RT_E_REFUSED);
  CHECK(last_error() == "'" + rpc_path.string() +
                            "': does not export handler 'echo', which the running function "
                            "table serves as function_id 0x2a");
  CHECK(gpu.launches == 1);
  CHECK(info.swapped == 0);

  // v2: swapped in; the table is still function_id 42 -> echo, now v2's echo.
  gpu.written.clear();
  CHECK_MESSAGE(cudaq_rt_reload(s, v2.code, &info) == CUDAQ_RT_OK, last_error());
  CHECK(info.swapped == 1);
  CHECK(info.hold_ms >= 0);
  CHECK(gpu.launches == 2);
  CHECK(gpu.params.num_functions == 1);
  // The globals set before were written into the new module.
  CHECK(gpu.written[0x20000] == lut);
  cudaq_rt_device_fn echo2 = 0;
  CHECK(cudaq_rt_lookup_handler(s, "echo", &echo2) == CUDAQ_RT_OK);
  // The same code again: nothing swapped.
  CHECK(cudaq_rt_reload(s, v2.code, &info) == CUDAQ_RT_OK);
  CHECK(info.swapped == 0);
  CHECK(gpu.launches == 2);

  // A global while running: written between two requests (the kernel stopped, then started).
  const std::vector<uint8_t> lut2(256, 9);
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_example_lut", lut2.data(), 4) == CUDAQ_RT_E_ARGUMENT);
  CHECK(gpu.launches == 2);
  CHECK(cudaq_rt_set_global(s, "cudaq_rt_example_lut", lut2.data(), lut2.size()) == CUDAQ_RT_OK);
  CHECK(gpu.written[0x20000] == lut2);
  CHECK(gpu.launches == 3);
  CHECK(cudaq_rt_check(s) == CUDAQ_RT_OK);
  // The old code may go: the server serves v2's.
  cudaq_rt_code_destroy(v1.code);
  v1.code = nullptr;
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);
}
