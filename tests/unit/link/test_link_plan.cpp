// plan_link and LinkPlan without a link: which dispatcher and bridge are chosen, the inputs in link
// order (dispatcher, bridge hooks, application), the units of a per-TU link, the options and keys
// per arch and mode, the built-in dispatcher's direct form in a whole-program link, the targets
// the inputs can reach, and every refusal before nvJitLink runs (two dispatchers or bridges, an
// unknown one, a bridge without device code, a non-concurrent handler for the warp kernel, an
// option that is not UTF-8, LTO-IR from a newer or another toolkit, a bad CUDAQ_RT_LTO).
// Packages of the example app, the loopback bridge's hooks and the pack tests' inputs.
#include "link/link.h"

#include "cudaq_rt/wire.h"
#include "formats/fatbin.h"

#include <doctest/doctest.h>

#include "package_fixture.h"
#include "scratch_dir.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using namespace package_fixture;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;
const std::string example_app = CUDAQ_RT_TEST_EXAMPLE_APP;
const std::string loopback = CUDAQ_RT_TEST_LOOPBACK_BRIDGE;

struct Fixture {
  ScratchDir dir{"cudaq_rt_test_link_plan"};

  Fixture() {
    // The echo bridge (no device code of its own) and the installed loopback bridge.
    const std::string path =
        cat(CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, ":", fs::path(loopback).parent_path().string());
    ::setenv("CUDAQ_RT_BRIDGE_PATH", path.c_str(), 1);
    ::unsetenv(lto_mode_env);
  }

  fs::path pack_of(const std::string &name, std::vector<PackInput> ins) {
    PackOptions o;
    o.inputs = std::move(ins);
    o.output_dir = dir.path;
    o.name = name;
    return packed(o);
  }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

// The example app with the loopback bridge's hooks packed as bridge `echo`.
const fs::path &example() {
  static const fs::path p = fixture().pack_of("example", example_inputs("echo"));
  return p;
}

std::string error_of(const Package &p, const LinkSettings &settings = {}) {
  auto plan = plan_link(p, settings);
  return plan ? std::string("(planned)") : plan.error().str();
}

LinkSettings with_mode(LtoMode mode) {
  LinkSettings s;
  s.lto_mode = mode;
  return s;
}

std::vector<std::string> strings(std::initializer_list<std::string> l) {
  return l;
}

} // namespace

TEST_CASE("the default plan: built-in dispatcher, the packed bridge, the app; per TU by default") {
  const Package p = open_package(example());
  const Manifest &m = p.manifest();
  const LinkPlan plan = plan_of(p);
  CHECK(plan.subject == example().string());
  CHECK(plan.dispatcher == "builtin");
  CHECK(plan.kernel == "cudaq_rt_unified_dispatch");
  CHECK(plan.bridge == "echo");
  CHECK(plan.lto);
  CHECK(plan.mode == default_lto_mode);
  CHECK(plan.mode == LtoMode::per_tu);
  CHECK_FALSE(plan.direct_calls); // per TU, handlers are called through the table
  CHECK(plan.packed == packed_code(m));

  // Inputs in link order: the dispatcher, the bridge's containers, the app's, as the manifest has
  // them.
  std::vector<const ContainerRecord *> bridge, app;
  for (const ContainerRecord &c : m.containers)
    (c.role == Role::bridge ? bridge : app).push_back(&c);
  REQUIRE(plan.inputs.size() == 1 + bridge.size() + app.size());
  CHECK(plan.inputs[0].name == "dispatcher builtin");
  for (size_t k = 0; k < bridge.size(); ++k) {
    const LinkInput &in = plan.inputs[1 + k];
    CHECK(in.digest == bridge[k]->digest);
    CHECK(in.name == cat("bridge echo libcudaq_rt_bridge_loopback.so#", k));
    CHECK(sha256(in.bytes) == in.digest);
  }
  for (size_t k = 0; k < app.size(); ++k) {
    const LinkInput &in = plan.inputs[1 + bridge.size() + k];
    CHECK(in.digest == app[k]->digest);
    CHECK(in.name == cat(fs::path(example_app).filename().string(), "#", k));
    CHECK(in.entries.size() == app[k]->entries.size());
  }
  CHECK(plan.input_digests().size() == plan.inputs.size());
  for (size_t k = 0; k < plan.inputs.size(); ++k)
    CHECK(plan.input_digests()[k] == plan.inputs[k].digest);

  // The built-in dispatcher is new to the package: recorded, as added by the link.
  REQUIRE(plan.new_containers.size() == 1);
  CHECK(plan.new_containers[0].record.digest == plan.inputs[0].digest);
  CHECK(plan.new_containers[0].record.added_by == "cudaq-rt-link");
  CHECK(plan.new_containers[0].record.role == Role::dispatcher);
  CHECK_FALSE(plan.new_containers[0].source);

  // Exports: every handler, as in the manifest, its pointer global, and the host-set global.
  std::vector<std::string> handlers;
  for (const ExportEntry &e : m.exports)
    if (e.kind == "handler")
      handlers.push_back(e.name);
  CHECK(plan.handlers == handlers);
  REQUIRE(plan.handler_symbols.size() == handlers.size());
  for (size_t k = 0; k < handlers.size(); ++k)
    CHECK(plan.handler_symbols[k] == "cudaq_rt_handler__" + handlers[k]);
  CHECK(plan.globals == strings({"cudaq_rt_example_lut"}));

  // Per TU: the dispatcher with the bridge's hooks, then each application container alone.
  REQUIRE(plan.units.size() == 1 + app.size());
  CHECK(plan.units[0].name == "dispatcher builtin + bridge echo");
  CHECK(plan.units[0].first == 0);
  CHECK(plan.units[0].count == 1 + bridge.size());
  CHECK(plan.units[0].dispatcher);
  CHECK(plan.units[0].compile);
  for (size_t k = 0; k < app.size(); ++k) {
    const LinkUnit &u = plan.units[1 + k];
    CHECK(u.first == 1 + bridge.size() + k);
    CHECK(u.count == 1);
    CHECK(u.name == plan.inputs[u.first].name);
    CHECK(u.compile);
    CHECK_FALSE(u.dispatcher);
  }
}

TEST_CASE("options per arch and mode: units, the final link, the whole program, the fallback") {
  const Package p = open_package(example());
  const LinkPlan per_tu = plan_of(p);
  const auto unit = strings({"-arch=sm_90", "-lto", "-Xptxas=-c", "-Xnvvm=--device-c",
                             "-kernels-used=cudaq_rt_unified_dispatch"});
  CHECK(per_tu.unit_options(arch("sm_90")) == unit);
  CHECK(per_tu.options(arch("sm_90")) == unit); // what the record says: the units' options
  CHECK(per_tu.final_options(arch("sm_90")) == strings({"-arch=sm_90"}));
  CHECK(per_tu.unit_options(arch("sm_100a"))[0] == "-arch=sm_100a");

  std::vector<std::string> whole = {"-arch=sm_90", "-lto",
                                    "-kernels-used=cudaq_rt_unified_dispatch"};
  for (const std::string &s : per_tu.handler_symbols)
    whole.push_back("-variables-used=" + s);
  whole.push_back("-variables-used=cudaq_rt_example_lut");
  const LinkPlan whole_plan = plan_of(p, with_mode(LtoMode::whole));
  CHECK(whole_plan.mode == LtoMode::whole);
  CHECK(whole_plan.units.empty());
  CHECK(whole_plan.options(arch("sm_90")) == whole);

  // The fallback from per TU: a whole-program link with split compile, after the opt level.
  const LinkPlan fallback = per_tu.as_whole_fallback();
  CHECK(fallback.mode == LtoMode::whole);
  CHECK(fallback.units.empty());
  CHECK(fallback.split_compile);
  std::vector<std::string> split = whole;
  split.insert(split.begin() + 2, "-split-compile-extended=0");
  CHECK(fallback.options(arch("sm_90")) == split);

  // Settings: the opt level after -lto, extra options last, -verbose -time after them.
  LinkSettings s = with_mode(LtoMode::whole);
  s.opt_level = "-O3";
  s.extra_options = {"-Xptxas=-v"};
  s.verbose = true;
  s.kernels_used = false;
  CHECK(plan_of(p, s).options(arch("sm_80")) ==
        strings({"-arch=sm_80", "-lto", "-O3", "-Xptxas=-v", "-verbose", "-time"}));
  s.lto_mode = LtoMode::per_tu;
  CHECK(plan_of(p, s).unit_options(arch("sm_80")) ==
        strings({"-arch=sm_80", "-lto", "-Xptxas=-c", "-Xnvvm=--device-c", "-O3", "-Xptxas=-v",
                 "-verbose", "-time"}));
  CHECK(plan_of(p, s).final_options(arch("sm_80")) ==
        strings({"-arch=sm_80", "-verbose", "-time"}));
}

TEST_CASE("a whole-program link of handlers with named calls takes the direct dispatcher") {
  const Package p = open_package(example());
  const LinkPlan per_tu = plan_of(p);
  const LinkPlan whole = plan_of(p, with_mode(LtoMode::whole));
  REQUIRE(whole.direct_calls);
  CHECK(whole.direct_calls->digest() == sha256(as_bytes(whole.direct_calls->source())));
  CHECK(whole.direct_calls->source().find("cudaq_rt_handler_call__echo") != std::string::npos);
  // Only the dispatcher differs; each plan knows both forms, as a record of either mode has them.
  REQUIRE(whole.inputs.size() == per_tu.inputs.size());
  CHECK(whole.inputs[0].digest != per_tu.inputs[0].digest);
  for (size_t k = 1; k < whole.inputs.size(); ++k)
    CHECK(whole.inputs[k].digest == per_tu.inputs[k].digest);
  for (const LinkPlan *plan : {&per_tu, &whole}) {
    CHECK(plan->input_digests(LtoMode::per_tu) == per_tu.input_digests());
    CHECK(plan->input_digests(LtoMode::whole) == whole.input_digests());
  }
  // The fallback from per TU keeps the plain form.
  CHECK(per_tu.as_whole_fallback().inputs[0].digest == per_tu.inputs[0].digest);
}

TEST_CASE("keys: one per arch, mode, option and unit; the same plan gives the same keys") {
  const Package p = open_package(example());
  const LinkPlan a = plan_of(p), b = plan_of(p);
  CHECK(a.key(arch("sm_90")).digest == b.key(arch("sm_90")).digest);
  CHECK(a.key(arch("sm_90")).digest != a.key(arch("sm_80")).digest);
  CHECK(a.key(arch("sm_90")).digest != a.key(arch("sm_90a")).digest);
  CHECK(a.key(arch("sm_90")).form.mode == LtoMode::per_tu);
  CHECK(a.key(arch("sm_90")).units.size() == a.units.size());
  CHECK(a.key(arch("sm_90")).inputs == a.input_digests());
  const LinkPlan whole = plan_of(p, with_mode(LtoMode::whole));
  CHECK(whole.key(arch("sm_90")).digest != a.key(arch("sm_90")).digest);
  // The unit of direct calls is no input, but its source is part of the whole program's key.
  std::vector<Digest> keyed = whole.input_digests();
  keyed.push_back(whole.direct_calls->digest());
  CHECK(whole.key(arch("sm_90")).inputs == keyed);
  CHECK(a.as_whole_fallback().key(arch("sm_90")).digest != whole.key(arch("sm_90")).digest);

  LinkSettings other;
  other.extra_options = {"-O0"};
  CHECK(plan_of(p, other).key(arch("sm_90")).digest != a.key(arch("sm_90")).digest);

  // Each unit's key depends on its own inputs: all differ, and none is the module's.
  std::set<Digest> unit_keys;
  for (const LinkUnit &u : a.units) {
    const LinkKey k = a.unit_key(arch("sm_90"), u);
    CHECK(k.object());
    CHECK(k.inputs.size() == u.count);
    CHECK(k.options == a.unit_options(arch("sm_90")));
    unit_keys.insert(k.digest);
  }
  CHECK(unit_keys.size() == a.units.size());
  CHECK(unit_keys.count(a.key(arch("sm_90")).digest) == 0);
  CHECK(a.unit_key(arch("sm_90"), a.units[1]).digest ==
        b.unit_key(arch("sm_90"), b.units[1]).digest);
}

TEST_CASE("CUDAQ_RT_LTO picks the mode the settings leave open") {
  const Package p = open_package(example());
  ::setenv(lto_mode_env, "whole", 1);
  CHECK(plan_of(p).mode == LtoMode::whole);
  CHECK(plan_of(p, with_mode(LtoMode::per_tu)).mode == LtoMode::per_tu); // the settings win
  ::setenv(lto_mode_env, "fast", 1);
  CHECK(error_of(p) ==
        "'" + example().string() + "': CUDAQ_RT_LTO='fast': expected per-tu or whole");
  ::unsetenv(lto_mode_env);
  CHECK(plan_of(p).mode == LtoMode::per_tu);
}

TEST_CASE("targets: LTO-IR reaches its arch and newer, a cubin only its own") {
  const Package p = open_package(example());
  const LinkPlan plan = plan_of(p);
  for (const char *ok : {"sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120"})
    CHECK_MESSAGE(plan.check_target(arch(ok)), ok);
  Status old = plan.check_target(arch("sm_75"));
  REQUIRE_FALSE(old);
  CHECK(old.error().str() == "'" + example().string() +
                                 "': cannot link for sm_75: dispatcher builtin holds ltoir sm_80; "
                                 "this package can serve sm_80 and newer");

  // An application built for sm_80 without LTO-IR: only sm_80, and a whole-program link.
  const fs::path nolto = fixture().pack_of(
      "nolto", {{inputs + "/nolto.o", Role::application, ""}, {loopback, Role::bridge, "echo"}});
  const Package q = open_package(nolto);
  const LinkPlan cubin = plan_of(q, with_mode(LtoMode::per_tu));
  CHECK(cubin.lto); // the dispatcher and the hooks carry LTO-IR
  CHECK(cubin.check_target(arch("sm_80")));
  Status newer = cubin.check_target(arch("sm_90"));
  REQUIRE_FALSE(newer);
  CHECK(newer.error().str() == "'" + nolto.string() +
                                   "': cannot link for sm_90: nolto.o#0 holds cubin sm_80; this "
                                   "package can serve only sm_80");
  // Its unit is not compiled: its cubin goes into the final link as it is.
  REQUIRE(cubin.units.size() == 2);
  CHECK_FALSE(cubin.units[1].compile);
  CHECK(cubin.units[0].compile);

  CHECK(describe_entries({}) == "no code");
  EntryRecord lto, bin;
  lto.kind = "ltoir";
  lto.arch = 80;
  bin.kind = "cubin";
  bin.arch = 90;
  CHECK(describe_entries({lto, bin}) == "ltoir sm_80, cubin sm_90");
}

TEST_CASE("dispatchers: the package's only custom kernel, one by name, or builtin and warp") {
  const fs::path custom =
      fixture().pack_of("custom", {{example_app, Role::application, ""},
                                   {loopback, Role::bridge, "echo"},
                                   {inputs + "/dispatcher.o", Role::dispatcher, ""}});
  const Package p = open_package(custom);
  const LinkPlan plan = plan_of(p);
  CHECK(plan.dispatcher == "test_custom_dispatch");
  CHECK(plan.kernel == "test_custom_dispatch");
  CHECK(plan.inputs[0].name == "dispatcher dispatcher.o#0");
  CHECK(plan.new_containers.empty()); // everything came from the package
  CHECK(plan.direct_calls);           // a custom kernel may call the unit of direct calls
  CHECK(plan.units[0].name == "dispatcher test_custom_dispatch + bridge echo");
  CHECK(plan.unit_options(arch("sm_90")).back() == "-kernels-used=test_custom_dispatch");

  LinkSettings builtin;
  builtin.dispatcher = "builtin";
  CHECK(plan_of(p, builtin).kernel == "cudaq_rt_unified_dispatch");
  LinkSettings warp;
  warp.dispatcher = "warp";
  const LinkPlan w = plan_of(p, warp);
  CHECK(w.dispatcher == "warp");
  CHECK(w.kernel != "cudaq_rt_unified_dispatch");
  CHECK(w.inputs[0].name == "dispatcher warp");
  LinkSettings unknown;
  unknown.dispatcher = "nope";
  CHECK(error_of(p, unknown) == "'" + custom.string() +
                                    "': no dispatch kernel 'nope' in the package (it exports "
                                    "test_custom_dispatch; 'builtin' is the unified kernel, "
                                    "'warp' the warp-wide one)");

  const fs::path two =
      fixture().pack_of("two_dispatchers", {{example_app, Role::application, ""},
                                            {loopback, Role::bridge, "echo"},
                                            {CUDAQ_RT_TEST_TIMED_DISPATCH, Role::dispatcher, ""},
                                            {CUDAQ_RT_TEST_BLOCK_DISPATCH, Role::dispatcher, ""}});
  const Package q = open_package(two);
  CHECK(error_of(q) ==
        "'" + two.string() + "': the package exports 2 dispatch kernels: choose one by name");
  LinkSettings timed;
  timed.dispatcher = "timed_dispatch";
  CHECK(plan_of(q, timed).kernel == "timed_dispatch");

  // The warp kernel runs handlers concurrently: one not exported as safe for that is refused.
  const fs::path nolto = fixture().pack_of(
      "serial", {{inputs + "/nolto.o", Role::application, ""}, {loopback, Role::bridge, "echo"}});
  CHECK(error_of(open_package(nolto), warp) ==
        "'" + nolto.string() +
            "': handler 'cubin_only' is not exported as safe to run concurrently, and the warp "
            "dispatcher runs up to 32 handlers at once: export it with "
            "CUDAQ_RT_EXPORT_HANDLER_CONCURRENT, or link with the unified dispatcher");
}

TEST_CASE("bridges: the package's only one, one by name, else the installed loopback bridge") {
  // No bridge packed: the installed loopback bridge's hooks, read from its file.
  const fs::path bare = fixture().pack_of("bare", {{example_app, Role::application, ""}});
  const Package p = open_package(bare);
  const LinkPlan plan = plan_of(p);
  CHECK(plan.bridge == "loopback");
  REQUIRE(plan.inputs.size() >= 2);
  CHECK(plan.inputs[1].name == "bridge loopback " + loopback + "#0");
  // New to the package: the dispatcher, and the hooks with the library they came from.
  size_t hooks = 0;
  for (const NewContainer &nc : plan.new_containers) {
    if (nc.record.role != Role::bridge)
      continue;
    ++hooks;
    CHECK(nc.record.bridge == "loopback");
    CHECK(nc.record.added_by == "cudaq-rt-link");
    REQUIRE(nc.source);
    CHECK(nc.source->path == fs::canonical(loopback).string());
    CHECK(nc.source->kind == "shared-library");
    CHECK(nc.source->size == fs::file_size(loopback));
  }
  CHECK(hooks >= 1);
  CHECK(hooks == plan.units[0].count - 1);

  // A bridge by name that has no device code of its own.
  LinkSettings echo;
  echo.bridge = "echo";
  const std::string echo_lib =
      std::string(CUDAQ_RT_TEST_ECHO_BRIDGE_DIR) + "/libcudaq_rt_bridge_echo.so";
  CHECK(error_of(p, echo) == "'" + echo_lib +
                                 "': bridge 'echo' carries no device code (no __nv_relfatbin): "
                                 "its hooks cannot be linked");
  LinkSettings missing;
  missing.bridge = "no_such_bridge";
  CHECK(error_of(p, missing).find("unknown bridge 'no_such_bridge'") != std::string::npos);

  // Two packed: one must be named.
  const fs::path two =
      fixture().pack_of("two_bridges", {{example_app, Role::application, ""},
                                        {loopback, Role::bridge, "echo"},
                                        {inputs + "/bridge.o", Role::bridge, "other"}});
  const Package q = open_package(two);
  CHECK(error_of(q) == "'" + two.string() + "': the package holds 2 bridges: choose one by name");
  LinkSettings other;
  other.bridge = "other";
  const LinkPlan o = plan_of(q, other);
  CHECK(o.bridge == "other");
  CHECK(o.inputs[1].name == "bridge other bridge.o#0");
  CHECK(o.units[0].count == 2);
}

TEST_CASE("refused before nvJitLink runs: an option that is not UTF-8, LTO-IR of another toolkit") {
  const Package p = open_package(example());
  LinkSettings bad;
  bad.extra_options = {"-O3", "-Xptxas=\xff"};
  CHECK(error_of(p, bad) ==
        "'" + example().string() +
            "': nvJitLink option '-Xptxas=\\xff' is not valid UTF-8: a link record could not say "
            "what was used");

  // The app's first container as a raw fatbin, its LTO-IR entry claiming a newer minor version,
  // then another major.
  const LinkPlan plan = plan_of(p);
  const LinkInput &first_app = plan.inputs[plan.units[1].first];
  std::string c(reinterpret_cast<const char *>(first_app.bytes.data()), first_app.bytes.size());
  auto parsed = parse_container(first_app.bytes, "app", "container");
  REQUIRE(parsed);
  auto ltoir = std::find_if(parsed->entries.begin(), parsed->entries.end(),
                            [](const Entry &e) { return e.is_ltoir(); });
  REQUIRE(ltoir != parsed->entries.end());
  const uint16_t major = ltoir->version_major, minor = ltoir->version_minor;
  auto with_version = [&](const std::string &name, uint16_t maj, uint16_t min) {
    std::string bytes = c;
    std::memcpy(bytes.data() + ltoir->offset + 0x18, &min, 2);
    std::memcpy(bytes.data() + ltoir->offset + 0x1a, &maj, 2);
    const fs::path file = fixture().dir.path / (name + ".fatbin");
    std::ofstream(file, std::ios::binary) << bytes;
    return open_package(fixture().pack_of(
        name, {{file.string(), Role::application, ""}, {loopback, Role::bridge, "echo"}}));
  };
  const std::string ours = cat("(LTO-IR ", major, ".", minor, ")");
  const Package newer = with_version("newer", major, uint16_t(minor + 1));
  const std::string e = error_of(newer);
  CHECK(e.rfind("'" + newer.dir().string() + "': newer.fatbin#0: LTO-IR version " +
                    cat(major, ".", minor + 1) +
                    " was written by a newer CUDA toolkit than this nvJitLink ",
                0) == 0);
  CHECK(e.find(ours + ": rebuild it with this toolkit or link with a newer one") !=
        std::string::npos);
  const Package other = with_version("other_major", uint16_t(major + 1), 0);
  CHECK(error_of(other).find(": LTO-IR version " + cat(major + 1, ".0") +
                             " was written by another major CUDA version than this nvJitLink") !=
        std::string::npos);
  // An older minor of the same major is fine.
  if (minor > 0)
    CHECK(plan_link(with_version("older", major, uint16_t(minor - 1)), {}));
}

TEST_CASE("packed_code: what cudaq-rt-pack packed, not what links added") {
  Manifest m;
  ContainerRecord app, hooks, added;
  app.digest = sha256(std::string_view("app"));
  hooks.digest = sha256(std::string_view("hooks"));
  hooks.role = Role::bridge;
  hooks.bridge = "echo";
  added.digest = sha256(std::string_view("dispatcher"));
  added.role = Role::dispatcher;
  added.added_by = "cudaq-rt-link";
  m.containers = {app, added, hooks};
  const auto code = packed_code(m);
  REQUIRE(code.size() == 2);
  CHECK(code[0] == std::make_tuple(app.digest, Role::application, std::string()));
  CHECK(code[1] == std::make_tuple(hooks.digest, Role::bridge, std::string("echo")));
}
