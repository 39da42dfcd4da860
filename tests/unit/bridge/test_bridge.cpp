#include "cudaq_rt/bridge.h"
#include "cudaq_rt/dispatch.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

using namespace cudaq_rt;

namespace {

// Sets an environment variable for one test case.
struct ScopedEnv {
  std::string name;
  std::string old;
  bool had;
  ScopedEnv(std::string n, const std::string &value) : name(std::move(n)) {
    const char *v = std::getenv(name.c_str());
    had = v != nullptr;
    if (had)
      old = v;
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

} // namespace

TEST_CASE("the loopback bridge is found by name in the build tree") {
  auto lib = BridgeLibrary::open("loopback");
  REQUIRE_MESSAGE(lib, (lib ? "" : lib.error().str()));
  CHECK(lib->name() == "loopback");
  CHECK(lib->path().filename() == "libcudaq_rt_bridge_loopback.so");
  CHECK(lib->ops().abi_version == CUDAQ_RT_BRIDGE_ABI_VERSION);
  CHECK(lib->ops().struct_size == sizeof(cudaq_rt_bridge_ops));
  CHECK((lib->ops().capabilities & CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES) != 0);

  SUBCASE("and by its path") {
    auto again = BridgeLibrary::open(lib->path().string());
    REQUIRE(again);
    CHECK(again->name() == "loopback");
  }
}

TEST_CASE("CUDAQ_RT_BRIDGE_PATH comes first in the search path") {
  ScopedEnv env("CUDAQ_RT_BRIDGE_PATH", "/nonexistent/a::/nonexistent/b");
  auto dirs = bridge_search_path();
  REQUIRE(dirs.size() >= 3);
  CHECK(dirs[0] == "/nonexistent/a");
  CHECK(dirs[1] == "/nonexistent/b");
  CHECK(bridge_library_file_name("udp") == "libcudaq_rt_bridge_udp.so");
}

TEST_CASE("an unknown bridge name says where it looked") {
  ScopedEnv env("CUDAQ_RT_BRIDGE_PATH", "/nonexistent/bridges");
  auto lib = BridgeLibrary::open("xyz");
  REQUIRE(!lib);
  std::string searched;
  for (const auto &dir : bridge_search_path())
    searched += (searched.empty() ? "" : ", ") + dir.string();
  CHECK(lib.error().str() == "unknown bridge 'xyz' (searched: " + searched + ")");
  CHECK(lib.error().str().rfind("unknown bridge 'xyz' (searched: /nonexistent/bridges, ", 0) == 0);
}

TEST_CASE("a bad bridge name is refused before any search") {
  auto lib = BridgeLibrary::open("a b");
  REQUIRE(!lib);
  CHECK(lib.error().str() ==
        "bad bridge name 'a b': use letters, digits, '_' and '-', or a path to a shared library");
}

TEST_CASE("a shared library without the entry point is not a bridge") {
  auto lib = BridgeLibrary::open(CUDAQ_RT_TEST_NOT_A_BRIDGE);
  REQUIRE(!lib);
  CHECK(lib.error().str() == std::string("'") + CUDAQ_RT_TEST_NOT_A_BRIDGE +
                                 "': not a cudaq-rt bridge: no symbol cudaq_rt_bridge_entry");
}

TEST_CASE("a missing library file is named") {
  auto lib = BridgeLibrary::open("/nonexistent/libfoo.so");
  REQUIRE(!lib);
  CHECK(lib.error().str() == "'/nonexistent/libfoo.so': no such bridge library");
}

TEST_CASE("a file that is not a shared library cannot be loaded") {
  auto lib = BridgeLibrary::open(__FILE__);
  REQUIRE(!lib);
  CHECK(lib.error().str().rfind(std::string("'") + __FILE__ + "': cannot load bridge: ", 0) == 0);
}

TEST_CASE("loopback rejects a bad configuration with a clear message") {
  auto lib = BridgeLibrary::open("loopback");
  REQUIRE(lib);
  auto bridge = lib->create("slots=4,colour=blue");
  REQUIRE(!bridge);
  CHECK(bridge.error().message ==
        "bridge 'loopback': unknown option 'colour' (known: slots=N, slot_size=BYTES, "
        "layout=slots|lanes, bulk=BYTES, response_bulk=BYTES, spare_frame=0|1, feeders=N, "
        "warps=N)");
  auto lanes = lib->create("slots=48,layout=lanes");
  REQUIRE(!lanes);
  CHECK(lanes.error().message ==
        "bridge 'loopback': layout=lanes needs a multiple of 32 slots, not slots=48");
  auto layout = lib->create("layout=rows");
  REQUIRE(!layout);
  CHECK(layout.error().message ==
        "bridge 'loopback': option 'layout' is slots or lanes, got 'rows'");
  auto odd = lib->create("slot_size=100");
  REQUIRE(!odd);
  CHECK(odd.error().message == "bridge 'loopback': slot_size=100 must be a multiple of 16 in "
                               "32..1048576");
  auto feeders = lib->create("slots=64,feeders=3");
  REQUIRE(!feeders);
  CHECK(feeders.error().message ==
        "bridge 'loopback': feeders=3 must divide 32 (1, 2, 4, 8, 16 or 32)");
  auto feeders_slots = lib->create("slots=48,feeders=2");
  REQUIRE(!feeders_slots);
  CHECK(feeders_slots.error().message ==
        "bridge 'loopback': feeders=2 needs a multiple of 32 slots, not slots=48");
}

TEST_CASE("loopback lays its ring out for the warp form, unless the configuration names it") {
  auto lib = BridgeLibrary::open("loopback");
  REQUIRE(lib);
  auto config = [&](uint32_t polling_lanes, const std::string &given) {
    auto c = lib->instance_config({polling_lanes, 0}, given);
    return c ? *c : "error: " + c.error().str();
  };
  CHECK(config(CUDAQ_RT_WARP_LANES, "slots=256") == "slots=256,layout=lanes,bulk=0");
  CHECK(config(CUDAQ_RT_WARP_LANES, "") == "layout=lanes,bulk=0");
  CHECK(config(CUDAQ_RT_WARP_LANES, "layout=slots,bulk=64") == "layout=slots,bulk=64");
  CHECK(config(1, "slots=256") == "slots=256");
  CHECK(config(0, "slots=256") == "slots=256");
  CHECK(config(1, "slots=8,slots=16") ==
        "error: '" + lib->path().string() + "': bridge 'loopback': option 'slots' is given twice");
  // Several feeders only for the warp form, whose lanes serve their own slots.
  CHECK(config(CUDAQ_RT_WARP_LANES, "slots=256,feeders=2") ==
        "slots=256,feeders=2,layout=lanes,bulk=0");
  CHECK(config(1, "slots=256,feeders=2") ==
        "error: '" + lib->path().string() +
            "': bridge 'loopback': feeders=2 needs a kernel whose 32 lanes serve their own slots "
            "(the warp dispatcher); this one serves every slot in order from one thread");
  // The warp dispatcher of several blocks: a warp each, and the ring must split among them.
  CHECK(config(2 * CUDAQ_RT_WARP_LANES, "slots=256,feeders=2") ==
        "slots=256,feeders=2,layout=lanes,bulk=0,warps=2");
  CHECK(config(2 * CUDAQ_RT_WARP_LANES, "slots=256,warps=4") ==
        "error: '" + lib->path().string() +
            "': bridge 'loopback': warps=4 does not match the kernel, which serves with 2 warps "
            "(the warp dispatcher's blocks: --grid 2,32)");
  auto few = lib->create("slots=32,warps=2");
  REQUIRE(!few);
  CHECK(few.error().message ==
        "bridge 'loopback': warps=2 needs a multiple of 64 slots, not slots=32");
  auto many = lib->create("slots=1024,warps=16");
  REQUIRE(!many);
  CHECK(many.error().message == "bridge 'loopback': warps=16 is out of range 1..8");
  // The same parser refuses the same text at create.
  auto twice = lib->create("slots=8,slots=16");
  REQUIRE(!twice);
  CHECK(twice.error().message == "bridge 'loopback': option 'slots' is given twice");
}

TEST_CASE("instance_config's protocol: the size it needs, then the text in a buffer that size") {
  auto lib = BridgeLibrary::open("loopback");
  REQUIRE(lib);
  const cudaq_rt_bridge_ops &ops = lib->ops();
  REQUIRE(ops.struct_size >= offsetof(cudaq_rt_bridge_ops, instance_config) + sizeof(void *));
  REQUIRE(bool(ops.instance_config));
  const cudaq_rt_bridge_launch launch{sizeof launch, CUDAQ_RT_WARP_LANES, 0};
  const std::string expected = "slots=64,layout=lanes,bulk=0";
  size_t needed = 0;
  CHECK(ops.instance_config(&launch, "slots=64", nullptr, 0, &needed) == CUDAQ_RT_BRIDGE_AGAIN);
  CHECK(needed == expected.size() + 1);
  char out[64];
  std::memset(out, '#', sizeof out);
  CHECK(ops.instance_config(&launch, "slots=64", out, expected.size(), &needed) ==
        CUDAQ_RT_BRIDGE_AGAIN);
  CHECK(out[0] == '#');
  CHECK(ops.instance_config(&launch, "slots=64", out, expected.size() + 1, &needed) ==
        CUDAQ_RT_BRIDGE_OK);
  CHECK(std::string(out) == expected);
  CHECK(ops.instance_config(&launch, "slots", out, sizeof out, &needed) == CUDAQ_RT_BRIDGE_ERROR);
  CHECK(std::string(ops.last_error(nullptr)) ==
        "option 'slots' has no '=': options are KEY=VALUE[,KEY=VALUE...]");
}

TEST_CASE("a bridge whose table ends before instance_config gets its configuration unchanged") {
  // host_bridge.c's table sets instance_config, to one that fails, past its struct_size.
  auto lib = BridgeLibrary::open(CUDAQ_RT_TEST_HOST_BRIDGE);
  REQUIRE_MESSAGE(lib, (lib ? "" : lib.error().str()));
  REQUIRE(lib->ops().struct_size == offsetof(cudaq_rt_bridge_ops, instance_config));
  REQUIRE(bool(lib->ops().instance_config));
  auto config = lib->instance_config({CUDAQ_RT_WARP_LANES, 3}, "slots=8,port=5000");
  REQUIRE_MESSAGE(config, (config ? "" : config.error().str()));
  CHECK(*config == "slots=8,port=5000");
  // It cannot be told of several warps, so it is not launched with them.
  auto warps = lib->instance_config({2 * CUDAQ_RT_WARP_LANES, 0}, "slots=64");
  REQUIRE(!warps);
  CHECK(warps.error().str() ==
        "'" + lib->path().string() +
            "': bridge 'host' cannot be told of 2 serving warps (it has no instance_config): "
            "launch the warp dispatcher as one block");
}
