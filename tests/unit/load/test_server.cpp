// The load path (server.h, select_cubin.h, client.h) against a fake GPU: which cubin is taken,
// what is refused, and how a kernel that hangs or faults is reported, all without a GPU. The
// package is the real example application, packed with the loopback bridge's hooks under the name
// of a host-only bridge (host_bridge.c), and links happen for real with nvJitLink.
#include "base/signing.h"
#include "command/run_command.h"
#include "cudaq_rt/cudaq_rt.h"
#include "formats/cubin.h"
#include "link/nvjitlink.h"
#include "load/capi_gpu.h"
#include "load/client.h"
#include "load/serve.h"
#include "load/server.h"
#include "load/wire_frames.h"
#include "package_fixture.h"
#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace cudaq_rt;
using package_fixture::example_options;
using package_fixture::packed;
namespace fs = std::filesystem;

namespace {

// Plays the driver with host memory. Its kernel serves until the shutdown flag is set, unless it
// is told to hang (never ends) or to fault (ends with a CUDA error). With `gpus` above 1 it plays
// that many GPUs, each kernel on a stream of its own; a service's threads, one per GPU, may then
// call it at once (streams and counters are thread-safe).
class FakeGpu final : public Gpu {
public:
  enum class Kernel { serves, hangs, faults };
  Kernel kernel_behaviour = Kernel::serves;
  int sm = 90;
  int gpus = 1;
  std::map<std::string, size_t> device_globals; // beyond the handlers' pointers
  std::map<GpuPointer, std::vector<uint8_t>> written;
  std::atomic<int> launches = 0, releases = 0, unloads = 0, streams_destroyed = 0,
                   mapped_released = 0;
  unsigned dynamic_shared_limit = 48 * 1024; // what allow_dynamic_shared grants
  std::atomic<unsigned> dynamic_shared_asked = 0, launched_shared_bytes = 0;

  Expected<GpuDevice> open(int ordinal) override {
    if (ordinal < 0 || ordinal >= gpus)
      return make_error("", "no GPU ", ordinal, ": this machine has 1 GPU (0)");
    return GpuDevice{ordinal, "Fake GPU", sm, 13000};
  }
  bool load_fails = false;
  // Places each handler's global where the cubin's symbol table says, as the driver does (a
  // section loaded at 0x10000), instead of by its function_id.
  bool place_as_cubin = false;
  CubinInfo loaded_symbols;
  std::atomic<int> handler_lookups = 0;
  Expected<GpuLibrary> load(std::span<const uint8_t> image) override {
    if (load_fails)
      return make_error("", "no room for the module");
    loaded_bytes = image.size();
    if (place_as_cubin)
      if (auto info = read_cubin(image, "loaded"))
        loaded_symbols = std::move(*info);
    return reinterpret_cast<GpuLibrary>(0x1);
  }
  void unload(GpuLibrary) override { ++unloads; }
  Expected<GpuFunction> kernel(GpuLibrary, const std::string &name) override {
    kernel_name = name;
    return reinterpret_cast<GpuFunction>(0x2);
  }
  Expected<std::optional<GpuGlobal>> global(GpuLibrary, const std::string &name) override {
    if (name.rfind("cudaq_rt_handler__", 0) == 0) {
      ++handler_lookups;
      if (place_as_cubin)
        return std::optional(
            GpuGlobal{0x10000 + loaded_symbols.variable_symbols.at(name).offset, 8});
      return std::optional(GpuGlobal{0x10000 + (cudaq_rt_function_id(name.c_str()) & 0xfff0), 8});
    }
    auto it = device_globals.find(name);
    if (it == device_globals.end())
      return std::optional<GpuGlobal>();
    return std::optional(GpuGlobal{0x20000, it->second});
  }
  Expected<GpuPointer> allocate(size_t) override { return GpuPointer{0x30000}; }
  void release(GpuPointer) override { ++releases; }
  Expected<MappedMemory> allocate_mapped(size_t bytes) override {
    void *p = std::calloc(1, bytes);
    control = p;
    mapped.insert(p);
    return MappedMemory{p, reinterpret_cast<GpuPointer>(p)};
  }
  void release_mapped(MappedMemory m) override {
    mapped.erase(m.host);
    std::free(m.host);
    ++mapped_released;
  }
  // What a server left to a hung kernel, the driver reclaims with the context.
  ~FakeGpu() override {
    for (void *p : mapped)
      std::free(p);
  }
  std::set<void *> mapped;
  Status copy_to_device(GpuPointer dst, std::span<const uint8_t> src) override {
    written[dst].assign(src.begin(), src.end());
    return Status::ok();
  }
  // A handler's pointer global holds an address of this GPU's own (address_base + where the
  // global is), so that two fake GPUs, or two handlers, never share one.
  Status copy_from_device(std::span<uint8_t> dst, GpuPointer src) override {
    std::memset(dst.data(), 0xab, dst.size());
    // The handlers' pointer globals (0x10000 on), read one by one or as a span.
    if (src >= 0x10000 && src < 0x20000)
      for (size_t at = 0; at + sizeof(GpuPointer) <= dst.size(); at += sizeof(GpuPointer)) {
        const GpuPointer address = address_base + src + at;
        std::memcpy(dst.data() + at, &address, sizeof address);
      }
    return Status::ok();
  }
  GpuPointer address_base = 0xab00000000;
  Expected<GpuStream> create_stream() override {
    return reinterpret_cast<GpuStream>(uintptr_t(0x3 + streams_created++));
  }
  void destroy_stream(GpuStream) override { ++streams_destroyed; }
  bool allow_dynamic_shared(GpuFunction, unsigned bytes) override {
    dynamic_shared_asked = bytes;
    return bytes <= dynamic_shared_limit;
  }
  Status launch(GpuFunction, LaunchShape shape, void **args, GpuStream stream) override {
    ++launches;
    launched_shared_bytes = shape.shared_bytes;
    std::lock_guard lock(m);
    params = *static_cast<cudaq_rt_dispatch_params *>(args[0]);
    launched[stream] = params;
    return Status::ok();
  }
  StreamState query(GpuStream stream) override {
    volatile int *shutdown_flag = nullptr;
    {
      std::lock_guard lock(m);
      shutdown_flag = launched.at(stream).shutdown_flag;
    }
    switch (kernel_behaviour) {
    case Kernel::serves:
      return {std::atomic_ref<int>(*const_cast<int *>(shutdown_flag)).load() != 0, std::nullopt};
    case Kernel::hangs:
      return {};
    case Kernel::faults:
      return {true, make_error("", "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
                                   "encountered)")};
    }
    return {};
  }

  // The stats block the kernel would write, in the control block's mapped memory.
  cudaq_rt_dispatch_stats *stats() {
    return reinterpret_cast<cudaq_rt_dispatch_stats *>(static_cast<char *>(control) + 64);
  }

  cudaq_rt_dispatch_params params{}; // of the last launch
  std::mutex m;                      // over params and launched
  std::map<GpuStream, cudaq_rt_dispatch_params> launched;
  std::atomic<uintptr_t> streams_created = 0;
  void *control = nullptr;
  size_t loaded_bytes = 0;
  std::string kernel_name;
};

// The example application packed once per process, with the loopback bridge's hooks packed as
// bridge `host`, whose host side is host_bridge.c.
struct Fixture {
  ScratchDir dir{"cudaq_rt_test_server"};
  fs::path package;

  Fixture() {
    ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_HOST_BRIDGE_DIR, 1);
    package = packed(example_options(dir.path, "host"));
  }

  // A copy of the package as packed, for a test that writes into it.
  fs::path fresh_copy(const std::string &name) {
    return package_fixture::copy_package(package, dir.path, name);
  }

  LoadOptions options(const fs::path &pkg, const std::string &cache) const {
    LoadOptions o;
    o.package = pkg;
    o.cache = {.dir = cache.empty() ? fs::path() : dir.path / cache, .disable = cache.empty()};
    o.stop_timeout_s = 0.2;
    return o;
  }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

std::string error_of(const Expected<std::unique_ptr<Server>> &s) {
  return s ? std::string("(started)") : s.error().str();
}

} // namespace

TEST_CASE("the load path takes the package's cubin, else the cache's, else links at load") {
  Fixture &f = fixture();
  const fs::path pkg = f.fresh_copy("paths");
  FakeGpu gpu;

  auto first = Server::start(f.options(pkg, "paths-cache"), gpu);
  REQUIRE_MESSAGE(first, error_of(first));
  CHECK((*first)->report().source == CubinSource::link);
  CHECK((*first)->report().bridge == "host");
  CHECK((*first)->report().kernel == "cudaq_rt_unified_dispatch");
  CHECK(gpu.kernel_name == "cudaq_rt_unified_dispatch");
  CHECK(gpu.loaded_bytes == (*first)->report().record.cubin_size);
  CHECK((*first)->stop());
  first->reset();

  auto second = Server::start(f.options(pkg, "paths-cache"), gpu);
  REQUIRE_MESSAGE(second, error_of(second));
  CHECK((*second)->report().source == CubinSource::cache);
  second->reset();

  // --store: the link at load lands in the package, and the next start needs neither a cache nor
  // a link.
  LoadOptions store = f.options(pkg, "");
  store.policy.store = true;
  auto third = Server::start(store, gpu);
  REQUIRE_MESSAGE(third, error_of(third));
  CHECK((*third)->report().source == CubinSource::link);
  third->reset();
  auto stored = Package::open(pkg);
  REQUIRE(stored);
  REQUIRE(stored->manifest().links.size() == 1);
  CHECK(stored->manifest().links[0].arch.str() == "sm_90");
  CHECK(stored->manifest().links[0].bridge == "host");

  LoadOptions no_link = f.options(pkg, "");
  no_link.policy.allow_link = false;
  auto fourth = Server::start(no_link, gpu);
  REQUIRE_MESSAGE(fourth, error_of(fourth));
  CHECK((*fourth)->report().source == CubinSource::package);
  CHECK(gpu.launches == 4);
}

TEST_CASE("a package's cubin serves any mode, unless a mode is asked for by name") {
  Fixture &f = fixture();
  const fs::path pkg = f.fresh_copy("modes");
  FakeGpu gpu;
  // Linked at load as a whole program, and stored.
  LoadOptions whole = f.options(pkg, "");
  whole.link.lto_mode = LtoMode::whole;
  whole.policy.store = true;
  auto linked = Server::start(whole, gpu);
  REQUIRE_MESSAGE(linked, error_of(linked));
  CHECK((*linked)->report().source == CubinSource::link);
  CHECK((*linked)->report().record.lto == LtoMode::whole);
  const Digest whole_key = (*linked)->report().record.cache_key;
  const std::vector<Digest> whole_inputs = (*linked)->report().record.inputs;
  linked->reset();

  // A plan of the default mode (per TU) still knows the whole program's cubin as this package's:
  // linked from the built-in kernel's direct form, its first input is not the one a per-TU link
  // takes (LinkPlan::input_digests(mode)).
  LoadOptions any = f.options(pkg, "");
  any.policy.allow_link = false;
  auto served = Server::start(any, gpu);
  REQUIRE_MESSAGE(served, error_of(served));
  CHECK((*served)->report().source == CubinSource::package);
  served->reset();

  LoadOptions per_tu = any;
  per_tu.link.lto_mode = LtoMode::per_tu;
  auto refused = Server::start(per_tu, gpu);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().str().find("no cubin for sm_90 (bridge host, dispatcher builtin) in the "
                                   "package or the link cache") != std::string::npos);

  // Linked at load per TU: a record of that mode, under a key of its own; the dispatcher's unit
  // is the one the build ships, the application's four are compiled.
  per_tu.policy = {.allow_link = true, .store = true};
  auto relinked = Server::start(per_tu, gpu);
  REQUIRE_MESSAGE(relinked, error_of(relinked));
  CHECK((*relinked)->report().source == CubinSource::link);
  CHECK((*relinked)->report().record.lto == LtoMode::per_tu);
  const std::vector<std::string> &notes = (*relinked)->report().notes;
  CHECK(std::count(
            notes.begin(), notes.end(),
            "linked per TU: 0 of 5 units from the cache, 1 shipped with cudaq-rt, 4 compiled") ==
        1);
  CHECK((*relinked)->report().record.cache_key != whole_key);
  const std::vector<Digest> &per_tu_inputs = (*relinked)->report().record.inputs;
  REQUIRE(per_tu_inputs.size() == whole_inputs.size());
  CHECK(per_tu_inputs[0] != whole_inputs[0]);
  CHECK(std::equal(per_tu_inputs.begin() + 1, per_tu_inputs.end(), whole_inputs.begin() + 1));
}

TEST_CASE("the whole program the per-TU fallback linked serves the next start from the package") {
  // That link takes the built-in kernel's plain form, not the direct one --lto whole takes.
  Fixture &f = fixture();
  const fs::path pkg = f.fresh_copy("fallback");
  FakeGpu gpu;
  ::setenv(force_whole_link_env, "1", 1);
  LoadOptions store = f.options(pkg, "");
  store.policy.store = true;
  auto linked = Server::start(store, gpu);
  ::unsetenv(force_whole_link_env);
  REQUIRE_MESSAGE(linked, error_of(linked));
  CHECK((*linked)->report().source == CubinSource::link);
  CHECK((*linked)->report().record.lto == LtoMode::whole);
  linked->reset();

  LoadOptions no_link = f.options(pkg, "");
  no_link.policy.allow_link = false;
  auto served = Server::start(no_link, gpu);
  REQUIRE_MESSAGE(served, error_of(served));
  CHECK((*served)->report().source == CubinSource::package);
  const std::vector<std::string> &warnings = (*served)->report().warnings;
  CHECK(warnings.empty());
}

TEST_CASE("with linking at load off, a GPU the package and cache have no cubin for is refused") {
  Fixture &f = fixture();
  FakeGpu gpu;
  gpu.sm = 100;
  LoadOptions o = f.options(f.package, "");
  o.policy.allow_link = false;
  CHECK(error_of(Server::start(o, gpu)) ==
        "'" + f.package.string() +
            "': no cubin for sm_100 (bridge host, dispatcher builtin) in the package or the "
            "link cache, and linking at load is off; the package has cubins for no arch: link it "
            "ahead of time for sm_100");
  CHECK(gpu.launches == 0);

  // A GPU older than the package's LTO-IR: which archs the package serves, and which this is.
  gpu.sm = 75;
  std::string e = error_of(Server::start(f.options(f.package, ""), gpu));
  CHECK(e.find("this GPU is sm_75: cannot link for sm_75: ") != std::string::npos);
  CHECK(e.find("this package can serve sm_80 and newer") != std::string::npos);
}

TEST_CASE("globals are written by name before launch, and checked against the module") {
  Fixture &f = fixture();
  FakeGpu gpu;
  gpu.device_globals["decoder_table"] = 4;
  LoadOptions o = f.options(f.package, "shared-cache");
  o.globals = {{"decoder_table", {1, 2, 3, 4}}};
  auto s = Server::start(o, gpu);
  REQUIRE_MESSAGE(s, error_of(s));
  CHECK(gpu.written[0x20000] == std::vector<uint8_t>{1, 2, 3, 4});
  s->reset();

  o.globals = {{"decoder_table", {1, 2}}};
  CHECK(error_of(Server::start(o, gpu)) ==
        f.package.string() + ": sm_90: global 'decoder_table' is 4 bytes, but 2 bytes were given");
  o.globals = {{"no_such_table", {1}}};
  CHECK(error_of(Server::start(o, gpu)) ==
        f.package.string() +
            ": sm_90: no __device__ global 'no_such_table' in the linked module (the link keeps a "
            "global visible by name only when it is exported with CUDAQ_RT_EXPORT_GLOBAL)");
}

TEST_CASE("the function table holds every handler, sorted by function_id") {
  Fixture &f = fixture();
  FakeGpu gpu;
  auto s = Server::start(f.options(f.package, "shared-cache"), gpu);
  REQUIRE_MESSAGE(s, error_of(s));
  const auto &handlers = (*s)->report().handlers;
  CHECK(handlers ==
        std::vector<std::string>{"axpy_f32", "echo", "lut_decode", "parity", "sum_i32"});
  const std::vector<uint8_t> &table = gpu.written[0x30000];
  REQUIRE(table.size() == handlers.size() * sizeof(cudaq_rt_function_entry));
  std::vector<cudaq_rt_function_entry> rows(handlers.size());
  std::memcpy(rows.data(), table.data(), table.size());
  for (size_t i = 1; i < rows.size(); ++i)
    CHECK(rows[i - 1].function_id < rows[i].function_id);
  for (const std::string &h : handlers)
    CHECK(std::any_of(rows.begin(), rows.end(), [&](const cudaq_rt_function_entry &r) {
      return r.function_id == cudaq_rt_function_id(h.c_str());
    }));
  CHECK(gpu.params.num_functions == handlers.size());
  CHECK(gpu.params.slot_size == 1024);
  CHECK((*s)->handler_name(cudaq_rt_function_id("parity")) == "parity");
  CHECK((*s)->handler_name(12345) == "");
}

TEST_CASE("a kernel that does not stop is reported hung within the timeout, and left alone") {
  Fixture &f = fixture();
  FakeGpu gpu;
  gpu.kernel_behaviour = FakeGpu::Kernel::hangs;
  {
    auto s = Server::start(f.options(f.package, "shared-cache"), gpu);
    REQUIRE_MESSAGE(s, error_of(s));
    auto frame = build_request_frame("sum_i32", {}, 41, 0);
    REQUIRE(frame);
    REQUIRE((*s)->send(*frame));
    const auto t0 = std::chrono::steady_clock::now();
    Status st = (*s)->stop();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE_FALSE(st);
    CHECK(st.error().str() ==
          "'" + f.package.string() +
              "': sm_90: the dispatch kernel cudaq_rt_unified_dispatch did not stop within 0.2 s: "
              "it is hung, serving request_id 41 (handler 'sum_i32')");
    CHECK(waited >= 0.2);
    CHECK(waited < 2.0);
    CHECK((*s)->hung());
  }
  // Freeing what a running kernel uses would wait for it: nothing was released.
  CHECK(gpu.releases == 0);
  CHECK(gpu.unloads == 0);
  CHECK(gpu.mapped_released == 0);
  CHECK(gpu.streams_destroyed == 0);
}

TEST_CASE("a stopped kernel's resources are all released, and it can be launched again") {
  Fixture &f = fixture();
  FakeGpu gpu;
  {
    auto s = Server::start(f.options(f.package, "shared-cache"), gpu);
    REQUIRE_MESSAGE(s, error_of(s));
    CHECK((*s)->stop());
    CHECK_FALSE((*s)->running());
    CHECK((*s)->relaunch());
    CHECK(gpu.launches == 2);
    CHECK((*s)->running());
  } // the destructor stops it
  CHECK(gpu.releases == 1);
  CHECK(gpu.unloads == 1);
  CHECK(gpu.mapped_released == 1);
  CHECK(gpu.streams_destroyed == 1);
}

TEST_CASE("a kernel that faults is reported with the request it was serving") {
  Fixture &f = fixture();
  FakeGpu gpu;
  auto s = Server::start(f.options(f.package, "shared-cache"), gpu);
  REQUIRE_MESSAGE(s, error_of(s));
  for (uint32_t id : {7u, 8u, 9u}) {
    auto frame = build_request_frame("echo", std::vector<uint8_t>{1, 2}, id, 0);
    REQUIRE(frame);
    REQUIRE((*s)->send(*frame));
  }
  CHECK((*s)->check()); // still running
  // The counters say one request was finished: the kernel died serving the second.
  gpu.stats()->requests = 1;
  gpu.kernel_behaviour = FakeGpu::Kernel::faults;
  Status st = (*s)->check();
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + f.package.string() +
                                "': sm_90: the dispatch kernel cudaq_rt_unified_dispatch failed: "
                                "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was "
                                "encountered), serving request_id 8 (handler 'echo')");
  CHECK_FALSE((*s)->running());
  CHECK_FALSE((*s)->relaunch());
}

TEST_CASE("a call gives up at its timeout when no response comes") {
  Fixture &f = fixture();
  FakeGpu gpu;
  auto s = Server::start(f.options(f.package, "shared-cache"), gpu);
  REQUIRE_MESSAGE(s, error_of(s));
  auto frame = build_request_frame("echo", {}, 1, 0);
  REQUIRE(frame);
  const auto t0 = std::chrono::steady_clock::now();
  auto reply = call(**s, *frame, 0.2);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(reply);
  CHECK(reply.error().str() == "'" + f.package.string() + "': sm_90: no response within 0.2 s");
  CHECK(waited < 2.0);
}

TEST_CASE("a GPU that does not exist, and a bridge configuration the bridge refuses") {
  Fixture &f = fixture();
  FakeGpu gpu;
  LoadOptions o = f.options(f.package, "shared-cache");
  o.device = 3;
  CHECK(error_of(Server::start(o, gpu)) == "no GPU 3: this machine has 1 GPU (0)");
  o.device = 0;
  o.bridge_config = "slots=8";
  std::string e = error_of(Server::start(o, gpu));
  CHECK(e.find("bridge 'host': host bridge: takes no configuration") != std::string::npos);
  CHECK(gpu.launches == 0);
}

// The C API (cudaq_rt.h) over the same load path: what start() refuses and what it launches.
TEST_CASE("the C API: lookups, the application's function table and its guards, retries") {
  Fixture &f = fixture();
  PackOptions po = example_options(f.dir.path, "host", "aliased");
  po.aliases = {"add_them=sum_i32"};
  const fs::path aliased = packed(po);

  cudaq_rt_code *code = nullptr;
  REQUIRE(cudaq_rt_open_package(aliased.c_str(), &code) == CUDAQ_RT_OK);
  std::vector<std::string> names;
  for (size_t i = 0; cudaq_rt_code_handler(code, i); ++i)
    names.push_back(cudaq_rt_code_handler(code, i));
  CHECK(names == std::vector<std::string>{"axpy_f32", "echo", "lut_decode", "parity", "sum_i32",
                                          "add_them"});

  const std::string cache = (f.dir.path / "shared-cache").string();
  cudaq_rt_config cfg;
  cudaq_rt_config_init(&cfg);
  cfg.cache_dir = cache.c_str();
  cfg.stop_timeout_s = 0.2;
  FakeGpu gpu;
  cudaq_rt_server *s = nullptr;
  REQUIRE(create_server(code, &cfg, gpu, &s) == CUDAQ_RT_OK);
  cudaq_rt_device_fn echo = 0, sum = 0, alias = 0;
  CHECK(cudaq_rt_lookup_handler(s, "echo", &echo) == CUDAQ_RT_E_STATE);

  // A load that fails (a bridge there is none of) leaves nothing; the same server loads once
  // configured right.
  cfg.bridge = "no_such_bridge";
  REQUIRE(cudaq_rt_server_configure(s, &cfg) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_load(s) == CUDAQ_RT_E_FAILED);
  CHECK(std::string(cudaq_rt_last_error()).find("no_such_bridge") != std::string::npos);
  CHECK(cudaq_rt_slot_size(s) == 0);
  cfg.bridge = nullptr;
  REQUIRE(cudaq_rt_server_configure(s, &cfg) == CUDAQ_RT_OK);
  REQUIRE_MESSAGE(cudaq_rt_load(s) == CUDAQ_RT_OK, cudaq_rt_last_error());
  CHECK(cudaq_rt_slot_size(s) == 1024);

  CHECK(cudaq_rt_lookup_handler(s, "echo", &echo) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_lookup_handler(s, "sum_i32", &sum) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_lookup_handler(s, "add_them", &alias) == CUDAQ_RT_OK);
  CHECK((echo != 0 && echo != sum && alias == sum));
  CHECK(cudaq_rt_lookup_handler(s, "nope", &echo) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(std::string(cudaq_rt_last_error()) ==
        "'" + aliased.string() +
            "': no handler 'nope': the code exports axpy_f32, echo, lut_decode, parity, sum_i32, "
            "add_them");
  CHECK(cudaq_rt_lookup_handler(s, "echo", &echo) == CUDAQ_RT_OK);

  // A made-up address: refused at start, nothing launched.
  REQUIRE(cudaq_rt_set_function(s, 7, echo + 16) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(s) == CUDAQ_RT_E_REFUSED);
  CHECK(std::string(cudaq_rt_last_error()) ==
        "'" + aliased.string() + "': function table entry for function_id 0x7: " + hex(echo + 16) +
            " did not come from cudaq_rt_lookup_handler on this server's load");
  CHECK(gpu.launches == 0);

  // An address another server (another GPU's module here) handed out: refused, named.
  FakeGpu other_gpu;
  other_gpu.address_base = 0xcd00000000;
  cudaq_rt_server *other = nullptr;
  REQUIRE(create_server(code, &cfg, other_gpu, &other) == CUDAQ_RT_OK);
  REQUIRE_MESSAGE(cudaq_rt_load(other) == CUDAQ_RT_OK, cudaq_rt_last_error());
  cudaq_rt_device_fn foreign = 0;
  REQUIRE(cudaq_rt_lookup_handler(other, "echo", &foreign) == CUDAQ_RT_OK);
  CHECK(foreign != echo);
  REQUIRE(cudaq_rt_clear_functions(s) == CUDAQ_RT_OK);
  REQUIRE(cudaq_rt_set_function(s, 7, foreign) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_start(s) == CUDAQ_RT_E_REFUSED);
  CHECK(std::string(cudaq_rt_last_error()) ==
        "'" + aliased.string() + "': function table entry for function_id 0x7: " + hex(foreign) +
            " was looked up on a server of '" + aliased.string() +
            "': device code from another binary cannot serve here");
  CHECK(gpu.launches == 0);
  cudaq_rt_server_destroy(other);

  // The retry: the application's own table, exactly, sorted.
  REQUIRE(cudaq_rt_clear_functions(s) == CUDAQ_RT_OK);
  REQUIRE(cudaq_rt_set_function(s, 9, sum) == CUDAQ_RT_OK);
  REQUIRE(cudaq_rt_set_function(s, 7, echo) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_function(s, 7, sum) == CUDAQ_RT_E_ARGUMENT);
  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, cudaq_rt_last_error());
  CHECK(gpu.launches == 1);
  CHECK(gpu.params.num_functions == 2);
  std::vector<cudaq_rt_function_entry> rows(2);
  const std::vector<uint8_t> &table = gpu.written[0x30000];
  REQUIRE(table.size() >= sizeof rows[0] * 2);
  std::memcpy(rows.data(), table.data(), sizeof rows[0] * 2);
  CHECK((rows[0].function_id == 7 && reinterpret_cast<uint64_t>(rows[0].handler) == echo));
  CHECK((rows[1].function_id == 9 && reinterpret_cast<uint64_t>(rows[1].handler) == sum));
  CHECK(cudaq_rt_set_function(s, 1, sum) == CUDAQ_RT_E_STATE);
  CHECK(cudaq_rt_start(s) == CUDAQ_RT_E_STATE);
  cudaq_rt_dispatch_stats st{};
  gpu.stats()->ok = 5;
  CHECK(cudaq_rt_get_stats(s, &st) == CUDAQ_RT_OK);
  CHECK(st.ok == 5);
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);

  // Back to the default table: every handler and the alias.
  REQUIRE(cudaq_rt_clear_functions(s) == CUDAQ_RT_OK);
  REQUIRE_MESSAGE(cudaq_rt_start(s) == CUDAQ_RT_OK, cudaq_rt_last_error());
  CHECK(gpu.params.num_functions == 6);
  CHECK((*reinterpret_cast<const uint64_t *>(&gpu.written[0x30000][0]) != 0));

  // Globals: the module's own size, kept for the next load; while running, written between two
  // requests (the kernel stopped and started again).
  gpu.device_globals["decoder_table"] = 4;
  const uint8_t bytes[4] = {1, 2, 3, 4};
  const int launched = gpu.launches;
  CHECK(cudaq_rt_set_global(s, "decoder_table", bytes, 4) == CUDAQ_RT_OK);
  CHECK(gpu.launches == launched + 1);
  CHECK(cudaq_rt_check(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_stop(s) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_set_global(s, "decoder_table", bytes, 2) == CUDAQ_RT_E_ARGUMENT);
  CHECK(std::string(cudaq_rt_last_error()) ==
        aliased.string() + ": sm_90: global 'decoder_table' is 4 bytes, but 2 bytes were given");
  CHECK(cudaq_rt_set_global(s, "decoder_table", bytes, 4) == CUDAQ_RT_OK);
  CHECK(gpu.written[0x20000] == std::vector<uint8_t>{1, 2, 3, 4});
  CHECK(cudaq_rt_set_global(s, "no_table", bytes, 4) == CUDAQ_RT_E_NOT_FOUND);

  cudaq_rt_server_destroy(s);
  cudaq_rt_code_destroy(code);
}

TEST_CASE("the C API: errors before any GPU work") {
  cudaq_rt_code *code = nullptr;
  CHECK(cudaq_rt_open_package("/nonexistent/x.cudaqpkg", &code) == CUDAQ_RT_E_NOT_FOUND);
  CHECK(std::string(cudaq_rt_last_error()) == "'/nonexistent/x.cudaqpkg': no such package");
  CHECK(cudaq_rt_load(nullptr) == CUDAQ_RT_E_ARGUMENT);
  CHECK(std::string(cudaq_rt_last_error()) == "cudaq_rt_load: server must not be NULL");
  Fixture &f = fixture();
  REQUIRE(cudaq_rt_open_package(f.package.c_str(), &code) == CUDAQ_RT_OK);
  CHECK(cudaq_rt_find_dispatch_kernel(code, "mine") == CUDAQ_RT_E_NOT_FOUND);
  CHECK(std::string(cudaq_rt_last_error()) ==
        "'" + f.package.string() +
            "': no dispatch kernel 'mine': the code exports none ('builtin' is the unified kernel, "
            "'warp' the warp-wide one)");
  cudaq_rt_code_destroy(code);
}

// Serving (runtime/src/load/serve.h) on the fake GPU, through self_fed_bridge.c: the loopback
// bridge's hooks packed as bridge `selffed`, whose host side counts what the launcher asked of it.
struct ServeFixture {
  ScratchDir dir{"cudaq_rt_test_serve"};
  fs::path package;
  ServeFixture() {
    fixture(); // sets CUDAQ_RT_BRIDGE_PATH
    package = packed(example_options(dir.path, "selffed", "served"));
  }
  ServeOptions options() const {
    ServeOptions o;
    o.load.package = package;
    o.load.cache = {.dir = dir.path / "cache"};
    o.load.stop_timeout_s = 0.2;
    o.devices = {0};
    return o;
  }
};

ServeFixture &serve_fixture() {
  static ServeFixture f;
  return f;
}

TEST_CASE("serving: a stop request drains the bridge, then stops the kernel, then the bridge") {
  FakeGpu gpu;
  auto s = Service::start(serve_fixture().options(), gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  REQUIRE((*s)->instances().size() == 1);
  CHECK((*s)->instances()[0].address == "nowhere:0");
  CHECK((*s)->instances()[0].report.bridge == "selffed");
  std::atomic<bool> stop{false};
  std::thread signal([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stop = true;
  });
  ServeReport r = (*s)->run(stop);
  signal.join();
  CHECK(r.stopped_by == "signal");
  CHECK(r.errors.empty());
  REQUIRE(r.gpus.size() == 1);
  const ServeCounters &c = r.gpus[0].counters;
  CHECK(c.get("starts") == 1);
  CHECK(c.get("drains") == 1);
  CHECK(c.get("drained_while_started") == 1); // drained while its threads still ran
  CHECK(c.get("stops") == 1);
  CHECK(c.get("last_op") == 3); // stop last: after the kernel ended
  CHECK(gpu.launches == 1);
  // The bridge's hooks asked for dynamic shared memory (512 bytes for the unified kernel's one
  // polling thread), and the kernel was launched with it.
  CHECK(gpu.dynamic_shared_asked == 512);
  CHECK(gpu.launched_shared_bytes == 512);
  CHECK((*s)->instances()[0].report.shape.shared_bytes == 512);
  CHECK(r.seconds >= 0.05);
  CHECK(format_serve_report(r, true).starts_with("served for 0.0"));
}

TEST_CASE("serving: dynamic shared memory the GPU cannot give is left out, with a note") {
  FakeGpu gpu;
  gpu.dynamic_shared_limit = 256;
  auto s = Service::start(serve_fixture().options(), gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  const LoadReport &report = (*s)->instances()[0].report;
  CHECK(report.shape.shared_bytes == 0);
  CHECK(gpu.launched_shared_bytes == 0);
  CHECK(std::find(report.notes.begin(), report.notes.end(),
                  "the bridge's 512 bytes of dynamic shared memory do not fit sm_90 beside the "
                  "kernel's own: launched without them") != report.notes.end());
}

TEST_CASE("serving stops by itself at --count and --duration") {
  FakeGpu gpu;
  std::atomic<bool> never{false};
  ServeOptions o = serve_fixture().options();
  o.count = 5; // the bridge's responses_sent grows by one on each read
  auto s = Service::start(o, gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  ServeReport r = (*s)->run(never);
  CHECK(r.stopped_by == "count");
  CHECK(r.total.answered() >= 5);
  s->reset();

  o.count = 0;
  o.duration_s = 0.1;
  o.stats_interval_s = 0.02;
  s = Service::start(o, gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  int ticks = 0;
  r = (*s)->run(never, [&](const ServeReport &live) {
    ++ticks;
    CHECK(live.gpus.size() == 1);
  });
  CHECK(r.stopped_by == "duration");
  CHECK(r.seconds >= 0.1);
  CHECK(ticks >= 2);
  auto j = serve_report_json(r);
  CHECK(j["stopped_by"] == "duration");
  CHECK(j["gpus"][0]["address"] == "nowhere:0");
  CHECK(j["total"]["bridge"]["starts"] == 1);
}

TEST_CASE("a kernel that fails while serving ends the service, and says so") {
  FakeGpu gpu;
  gpu.kernel_behaviour = FakeGpu::Kernel::faults;
  std::atomic<bool> never{false};
  auto s = Service::start(serve_fixture().options(), gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  ServeReport r = (*s)->run(never);
  CHECK(r.stopped_by == "error");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].str().find("failed: CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
  CHECK(r.gpus[0].counters.get("stops") >= 1); // the bridge's threads are ended too
}

TEST_CASE("the bridge is told how many of the kernel's threads poll, and its place in a service") {
  ServeFixture &f = serve_fixture();
  FakeGpu gpu;
  auto told = [&](const LoadOptions &o) {
    auto s = Server::load(o, gpu);
    REQUIRE_MESSAGE(s, error_of(s));
    std::map<std::string, uint64_t> c;
    for (const auto &[name, value] : (*s)->bridge().counters())
      c[name] = value;
    return std::pair(c["polling_lanes"], c["instance"]);
  };
  LoadOptions o = f.options().load;
  CHECK(told(o) == std::pair<uint64_t, uint64_t>(1, 0)); // the unified kernel: one thread
  o.bridge_instance = 2;
  CHECK(told(o) == std::pair<uint64_t, uint64_t>(1, 2));
  o.link.dispatcher = "warp";
  CHECK(told(o) == std::pair<uint64_t, uint64_t>(CUDAQ_RT_WARP_LANES, 2));
}

TEST_CASE("serving on two GPUs: each bridge instance is told its place") {
  FakeGpu gpu;
  gpu.gpus = 2;
  ServeOptions o = serve_fixture().options();
  o.devices = {0, 1};
  auto s = Service::start(o, gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  const std::vector<ServeCounters> live = (*s)->snapshot();
  REQUIRE(live.size() == 2);
  CHECK(live[0].get("instance") == 0);
  CHECK(live[1].get("instance") == 1);
  CHECK(live[1].get("polling_lanes") == 1);
  CHECK(gpu.launches == 2);
}

TEST_CASE("serving refuses a host-fed bridge, and a GPU list on a one-GPU machine") {
  FakeGpu gpu;
  ServeOptions o = serve_fixture().options();
  o.load.package = fixture().package; // bridge `host`: fed by the launcher
  auto s = Service::start(o, gpu);
  REQUIRE(!s);
  CHECK(s.error().str() == "bridge 'host' is fed by this process, not by clients: serving needs a "
                           "bridge that receives requests itself, such as udp");
  o = serve_fixture().options();
  o.devices = {0, 1};
  s = Service::start(o, gpu);
  REQUIRE(!s);
  CHECK(s.error().str() == "GPU 1: no GPU 1: this machine has 1 GPU (0)");
}

// Hot reload (reload.cpp, Service::reload): the packages a serving process is asked to take.
struct ReloadFixture {
  ScratchDir dir{"cudaq_rt_test_reload"};
  fs::path v2, rpc, corrupt, signed_v1;
  std::string k1_pub;
  ReloadFixture() {
    serve_fixture();
    v2 = packed(example_options(dir.path, "selffed", "served_v2"));
    // Another application: it exports rpc_increment_handler, none of the example's handlers.
    PackOptions r;
    r.inputs = {{CUDAQ_RT_TEST_RPC_INCREMENT, Role::application, ""},
                {CUDAQ_RT_TEST_LOOPBACK_BRIDGE, Role::bridge, "selffed"}};
    r.output_dir = dir.path;
    r.name = "rpc";
    rpc = packed(r);
    // v2 with one byte of a container changed: its size holds, its digest does not.
    corrupt = package_fixture::copy_package(v2, dir.path, "corrupt");
    {
      Package p = package_fixture::open_package(corrupt);
      const fs::path blob = p.blob_path(*p.referenced_blobs().begin());
      fs::permissions(blob, fs::perms::owner_write, fs::perm_options::add);
      std::fstream io(blob, std::ios::binary | std::ios::in | std::ios::out);
      io.seekg(100);
      const char c = char(io.get() ^ 0x5a);
      io.seekp(100);
      io.put(c);
    }
    auto signer = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
    REQUIRE(signer);
    PackOptions s = example_options(dir.path, "selffed", "served_signed");
    s.signer = std::make_shared<const SigningKey>(*signer);
    signed_v1 = packed(s);
    k1_pub = unit_files::write_file(dir.path / "k1.pub", test_keys::rfc8032_1_public);
  }
  // A service over `package`, whose reloads load what `next` holds then.
  std::unique_ptr<Service> serve(FakeGpu &gpu, const fs::path &package,
                                 std::shared_ptr<LoadOptions> next,
                                 std::vector<GlobalValue> globals = {}) {
    ServeOptions o = serve_fixture().options();
    o.load.package = package;
    o.load.globals = std::move(globals);
    *next = o.load;
    o.reload.next = [next]() -> Expected<LoadOptions> { return *next; };
    auto s = Service::start(o, gpu);
    REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
    return std::move(*s);
  }
};

ReloadFixture &reload_fixture() {
  static ReloadFixture f;
  return f;
}

TEST_CASE("reload: the new code is swapped in between two requests, on the same bridge instance") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  auto next = std::make_shared<LoadOptions>();
  auto s = f.serve(gpu, serve_fixture().package, next);
  void *control = gpu.control;
  REQUIRE(gpu.launches == 1);
  next->package = f.v2;
  ReloadRecord r = s->reload("test");
  CHECK_MESSAGE(r.outcome == "swapped", r.why);
  CHECK(r.trigger == "test");
  CHECK(r.package == f.v2.string());
  REQUIRE(r.swaps.size() == 1);
  CHECK(r.swaps[0].gap_ms() >= 0);
  // The old kernel held (drained, stopped), the new one launched on the same control block and
  // bridge instance, the old module unloaded.
  CHECK(gpu.launches == 2);
  CHECK(gpu.unloads == 1);
  CHECK(gpu.control == control);
  const ServeCounters c = s->snapshot()[0];
  CHECK(c.get("starts") == 2);
  CHECK(c.get("holds") == 1); // held for the swap: what arrives waits for the new kernel
  CHECK(c.get("drains") == 0);
  CHECK(c.get("stops") == 1);
  CHECK(c.get("last_op") == 1); // started again: serving
  CHECK(s->instances()[0].report.package == f.v2);
  // The new table: every handler of the new package, in the table the new launch uses.
  CHECK(gpu.params.num_functions == s->instances()[0].report.handlers.size());

  // The same again: nothing changed, nothing swapped.
  r = s->reload("signal");
  CHECK(r.outcome == "unchanged");
  CHECK(gpu.launches == 2);
  std::atomic<bool> stop{true};
  ServeReport report = s->run(stop);
  REQUIRE(report.reloads.size() == 2);
  CHECK(format_serve_report(report, true).find("reloads: 1 done, 0 refused, 1 unchanged") !=
        std::string::npos);
  auto j = serve_report_json(report);
  CHECK(j["reloads"][0]["outcome"] == "swapped");
  CHECK(j["reloads"][0]["swaps"][0].contains("gap_ms"));
  CHECK(j["reloads"][1]["outcome"] == "unchanged");
}

TEST_CASE("reload: a package that fails a check is refused in one line, and the old one serves") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  auto next = std::make_shared<LoadOptions>();
  auto s = f.serve(gpu, serve_fixture().package, next);
  const LoadOptions first = *next;
  auto refused = [&](const std::string &expected) {
    ReloadRecord r = s->reload("signal");
    CHECK(r.outcome == "refused");
    CHECK_MESSAGE(r.why.find(expected) != std::string::npos, r.why);
    CHECK(r.why.find('\n') == std::string::npos);
    CHECK(format_reload(r).ends_with("; the old code serves on"));
    CHECK(gpu.launches == 1); // never stopped
    CHECK(s->snapshot()[0].get("holds") == 0);
    CHECK(s->instances()[0].report.package == serve_fixture().package);
    *next = first;
  };
  next->package = f.corrupt;
  // (its digest, or its stored form's where the blob is compressed: which one, the toolchain's
  // compression decides)
  refused("(the package is corrupt or was modified)");
  next->package = f.rpc;
  refused("rpc.cudaqpkg': does not export handler '");
  next->package = f.rpc;
  refused(", which the running function table serves as function_id 0x");
  next->package = f.v2;
  next->policy.allow_link = false;
  next->cache.disable = true;
  refused("sm_90");
  next->package = f.dir.path / "no_such.cudaqpkg";
  refused("no_such.cudaqpkg");
  // A package whose default table lost an alias the running one serves.
  {
    FakeGpu g2;
    PackOptions a = example_options(f.dir.path, "selffed", "aliased");
    a.aliases = {"add_them=sum_i32"};
    auto next2 = std::make_shared<LoadOptions>();
    auto s2 = f.serve(g2, packed(a), next2);
    next2->package = f.v2;
    ReloadRecord r = s2->reload("signal");
    CHECK(r.outcome == "refused");
    CHECK_MESSAGE(r.why.find("served_v2.cudaqpkg': has no alias of function_id " +
                             hex(cudaq_rt_function_id("add_them")) +
                             ", under which the running function table serves handler "
                             "'sum_i32'") != std::string::npos,
                  r.why);
  }
  next->package = f.v2;
  next->globals = {{"cudaq_rt_example_lut", {1, 2, 3}}};
  refused("global 'cudaq_rt_example_lut' is 256 bytes, but 3 bytes were given");
  next->globals = {{"no_such_table", {1}}};
  refused("no __device__ global 'no_such_table'");
  // And it still serves, and a good package swaps in after all of that.
  next->package = f.v2;
  CHECK(s->reload("signal").outcome == "swapped");
  CHECK(gpu.launches == 2);
}

TEST_CASE("reload under --trust: an unsigned package is refused, the signed one keeps serving") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  auto trusted = TrustedKeys::load({f.k1_pub});
  REQUIRE(trusted);
  ServeOptions o = serve_fixture().options();
  o.load.package = f.signed_v1;
  o.load.trust.trusted = std::make_shared<const TrustedKeys>(std::move(*trusted));
  auto next = std::make_shared<LoadOptions>(o.load);
  o.reload.next = [next]() -> Expected<LoadOptions> { return *next; };
  auto s = Service::start(o, gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  next->package = f.v2;
  ReloadRecord r = (*s)->reload("signal");
  CHECK(r.outcome == "refused");
  CHECK_MESSAGE(r.why.find("not signed") != std::string::npos, r.why);
  CHECK(gpu.launches == 1);
}

TEST_CASE("reload: new values for globals are written between two requests, without a swap") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  gpu.device_globals["cudaq_rt_example_lut"] = 256;
  auto next = std::make_shared<LoadOptions>();
  auto s = f.serve(gpu, serve_fixture().package, next,
                   {{"cudaq_rt_example_lut", std::vector<uint8_t>(256, 1)}});
  CHECK(gpu.written[0x20000] == std::vector<uint8_t>(256, 1));
  next->globals = {{"cudaq_rt_example_lut", std::vector<uint8_t>(256, 2)}};
  ReloadRecord r = s->reload("signal");
  CHECK_MESSAGE(r.outcome == "globals", r.why);
  CHECK(gpu.written[0x20000] == std::vector<uint8_t>(256, 2));
  CHECK(gpu.unloads == 0); // the module stayed
  CHECK(gpu.launches == 2);
  // Written while no kernel ran: the bridge held, the kernel stopped, then started.
  CHECK(s->snapshot()[0].get("holds") == 1);
  CHECK(s->reload("signal").outcome == "unchanged");
}

TEST_CASE("reload: a swap that fails on the GPU launches the old kernel again") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  auto next = std::make_shared<LoadOptions>();
  auto s = f.serve(gpu, serve_fixture().package, next);
  next->package = f.v2;
  gpu.load_fails = true;
  ReloadRecord r = s->reload("signal");
  CHECK(r.outcome == "failed");
  CHECK_MESSAGE(r.why.find("no room for the module (the old code serves on)") != std::string::npos,
                r.why);
  CHECK(gpu.launches == 2); // the old kernel again
  CHECK(gpu.unloads == 0);
  CHECK(s->instances()[0].report.package == serve_fixture().package);
  gpu.load_fails = false;
  CHECK(s->reload("signal").outcome == "swapped");
}

TEST_CASE("reload: SIGHUP's flag and --watch's fingerprint trigger it from the serving loop") {
  ReloadFixture &f = reload_fixture();
  FakeGpu gpu;
  // The package as named is a link: --watch sees it turn to another package.
  const fs::path link = f.dir.path / "current.cudaqpkg";
  fs::remove(link);
  fs::create_directory_symlink(serve_fixture().package, link);
  RunOptions named;
  named.load.package = link;
  auto fp1 = run_fingerprint(named);
  REQUIRE_MESSAGE(fp1, (fp1 ? "" : fp1.error().str()));
  CHECK(*run_fingerprint(named) == *fp1);

  ServeOptions o = serve_fixture().options();
  o.load.package = link;
  o.reload.next = [o]() -> Expected<LoadOptions> { return o.load; };
  o.reload.fingerprint = [named] { return run_fingerprint(named); };
  o.reload.watch_interval_s = 0.01;
  auto s = Service::start(o, gpu);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().str()));
  std::atomic<bool> stop{false}, hup{true}; // a SIGHUP before the loop's first look
  std::vector<ReloadRecord> seen;
  Service::Hooks hooks;
  hooks.reload = &hup;
  hooks.reloaded = [&](const ReloadRecord &r) {
    seen.push_back(r);
    if (seen.size() == 1) { // the package changes under its name
      fs::remove(link);
      fs::create_directory_symlink(f.v2, link);
    } else {
      stop = true;
    }
  };
  std::thread guard([&] {
    for (int i = 0; i < 500 && !stop; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stop = true;
  });
  ServeReport report = (*s)->run(stop, hooks);
  guard.join();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].trigger == "signal");
  CHECK(seen[0].outcome == "unchanged"); // SIGHUP with nothing changed swaps nothing
  CHECK(seen[1].trigger == "watch");
  CHECK_MESSAGE(seen[1].outcome == "swapped", seen[1].why);
  CHECK(*run_fingerprint(named) != *fp1);
  CHECK(report.reloads.size() == 2);
  CHECK(gpu.launches == 2);
  fs::remove(link);
}

TEST_CASE("handler globals are placed from the cubin's symbol table: two lookups, not one each") {
  Fixture &f = fixture();
  FakeGpu per_handler, placed;
  placed.place_as_cubin = true;
  auto a = Server::load(f.options(f.package, "shared-cache"), per_handler);
  REQUIRE_MESSAGE(a, error_of(a));
  auto b = Server::load(f.options(f.package, "shared-cache"), placed);
  REQUIRE_MESSAGE(b, error_of(b));
  const std::vector<std::string> &handlers = (*b)->report().handlers;
  REQUIRE(handlers.size() >= 3);
  // The fake driver places them by function_id: the symbol table's layout does not hold, and
  // each is looked up (after the two lookups that found out).
  CHECK(per_handler.handler_lookups == int(handlers.size()) + 2);
  // Placed as the symbol table says: the section's first and last handler only.
  CHECK(placed.handler_lookups == 2);
  for (const std::string &h : handlers) {
    CAPTURE(h);
    const auto offset =
        placed.loaded_symbols.variable_symbols.at(CUDAQ_RT_HANDLER_SYMBOL_PREFIX + h).offset;
    // The pointer read from where the global is: the fake's memory holds base + its address.
    CHECK((*b)->handler_address(h) == placed.address_base + 0x10000 + offset);
  }
}
