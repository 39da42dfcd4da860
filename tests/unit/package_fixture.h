// What the tests that pack and open a package share: the example app with the loopback bridge's
// device hooks packed under the name of a host bridge (echo_bridge.c, host_bridge.c or
// self_fed_bridge.c answers for it), a pack that must succeed, a copy of a package for a test to
// write into, and the package, link plan, arch and link cache a test opens, each REQUIREd with the
// error's text. The example's paths come from cudaq_rt_unit_test_inputs (tests/CMakeLists.txt).
#pragma once

#include "cache/link_cache.h"
#include "formats/target.h"
#include "link/link.h"
#include "pack/pack.h"
#include "package/package.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace package_fixture {

using namespace cudaq_rt;

// The example app, and the loopback bridge's hooks as bridge `bridge`.
inline std::vector<PackInput> example_inputs(const std::string &bridge) {
  return {{CUDAQ_RT_TEST_EXAMPLE_APP, Role::application, ""},
          {CUDAQ_RT_TEST_LOOPBACK_BRIDGE, Role::bridge, bridge}};
}

// The example package `name`, with bridge `bridge`, to be written in `dir`.
inline PackOptions example_options(const std::filesystem::path &dir, const std::string &bridge,
                                   const std::string &name = "example") {
  PackOptions o;
  o.inputs = example_inputs(bridge);
  o.output_dir = dir;
  o.name = name;
  return o;
}

// Packs, and returns the package's directory.
inline std::filesystem::path packed(const PackOptions &o) {
  auto p = pack(o);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
  return p->dir;
}

// A copy of `package` named `name` in `dir`.
inline std::filesystem::path copy_package(const std::filesystem::path &package,
                                          const std::filesystem::path &dir,
                                          const std::string &name) {
  const std::filesystem::path to = dir / (name + package_suffix);
  std::filesystem::copy(package, to, std::filesystem::copy_options::recursive);
  return to;
}

inline Package open_package(const std::filesystem::path &dir) {
  auto p = Package::open(dir);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
  return std::move(*p);
}

inline LinkPlan plan_of(const Package &p, const LinkSettings &settings = {}) {
  auto plan = plan_link(p, settings);
  REQUIRE_MESSAGE(plan, (plan ? "" : plan.error().str()));
  return std::move(*plan);
}

inline TargetArch arch(std::string_view text) {
  auto a = parse_arch(text);
  REQUIRE(a);
  return *a;
}

// A link cache in `dir`, with the default bounds.
inline LinkCache open_link_cache(const std::filesystem::path &dir) {
  CacheConfig c;
  c.dir = dir;
  auto opened = LinkCache::open(c);
  REQUIRE_MESSAGE(opened, (opened ? "" : opened.error().str()));
  return std::move(*opened);
}

} // namespace package_fixture
