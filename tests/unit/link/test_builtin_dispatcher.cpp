// The dispatch kernels embedded in the runtime library (link/builtin_dispatcher.h): each one
// container of LTO-IR for the oldest arch they serve, in two forms, found by the names
// --dispatcher takes.
#include "link/builtin_dispatcher.h"

#include "formats/fatbin.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

using namespace cudaq_rt;

namespace {

// The one container a fatbin must be, and its LTO-IR entries' archs.
std::set<uint32_t> ltoir_archs(std::span<const uint8_t> fatbin, const std::string &what) {
  auto parsed = parse_container(fatbin, what, "fatbin");
  REQUIRE(parsed);
  CHECK(parsed->bytes.size() == fatbin.size()); // nothing after the container
  std::set<uint32_t> archs;
  for (const Entry &e : parsed->entries) {
    CHECK(e.is_ltoir()); // no cubin or PTX: linkable for every arch from the oldest on
    archs.insert(e.arch);
  }
  return archs;
}

} // namespace

TEST_CASE("the unified and the warp kernel, by the names --dispatcher takes") {
  const BuiltinDispatcher *unified = find_builtin_dispatcher("builtin");
  const BuiltinDispatcher *warp = find_builtin_dispatcher("warp");
  REQUIRE(unified);
  REQUIRE(warp);
  CHECK(std::string(unified->kernel) == "cudaq_rt_unified_dispatch");
  CHECK(unified->threads == 1);
  CHECK_FALSE(unified->concurrent);
  CHECK(warp->threads == 32);
  CHECK(warp->concurrent);
  CHECK(std::string(warp->kernel) != unified->kernel);
  CHECK(find_builtin_dispatcher("unified") == nullptr);
  CHECK(find_builtin_dispatcher("") == nullptr);
  CHECK(find_builtin_dispatcher("Builtin") == nullptr);

  REQUIRE(builtin_dispatchers().size() == 2);
  CHECK(&builtin_dispatchers()[0] == unified);
  CHECK(&builtin_dispatchers()[1] == warp);
  CHECK(builtin_dispatcher_fatbin().data() == unified->fatbin.data());
}

TEST_CASE("each form is one LTO-IR container for sm_80, and the two forms differ") {
  for (const BuiltinDispatcher &d : builtin_dispatchers()) {
    CAPTURE(std::string(d.name));
    CHECK(ltoir_archs(d.fatbin, d.name) == std::set<uint32_t>{builtin_dispatcher_arch});
    CHECK(ltoir_archs(d.direct_fatbin, d.name) == std::set<uint32_t>{builtin_dispatcher_arch});
    const std::string plain(d.fatbin.begin(), d.fatbin.end());
    const std::string direct(d.direct_fatbin.begin(), d.direct_fatbin.end());
    CHECK(plain != direct);
  }
  CHECK(builtin_dispatchers()[0].fatbin.data() != builtin_dispatchers()[1].fatbin.data());
}
