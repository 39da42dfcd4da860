// The package store of registry references, as far as it is reached without a registry that
// answers: a store filled as a first start fills it (pull_package of the signatures only, and the
// reference's record), then started --offline or with the registry unreachable (a closed loopback
// port: no HTTP is spoken). A first start's fetches and the eviction beyond max_store_packages
// need a registry that answers: tests/integration/test_oci.py.
#include "oci/store.h"

#include "interpose/link_recording.h"
#include "oci/layout_source.h"
#include "oci/transfer.h"
#include "scratch_dir.h"
#include "unit_files.h"

#include <doctest/doctest.h>
#include <nvJitLink.h>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

const Registry::Getenv no_environment = [](const char *) -> const char * { return nullptr; };

RegistryRef ref_of(const std::string &text) {
  auto r = RegistryRef::parse(text);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().str()));
  return *r;
}

struct Stored {
  fs::path original; // the package the image was made of
  Digest image;      // its image manifest's digest
  fs::path package;  // its copy in the store
};

// A recording of two inputs stored under `store` as a first start of `ref` leaves it:
// packages/<image hex>/NAME.cudaqpkg without its blobs, and refs/<sha256(ref.name())>.
Stored store_recording(const fs::path &src, const fs::path &store, const RegistryRef &ref) {
  const std::vector<std::string> blobs = {"first input", "second input"};
  LinkRecipe r;
  r.options = {"-arch=sm_80", "-lto"};
  r.inputs = {{NVJITLINK_INPUT_LTOIR, "a.ltoir", sha256(blobs[0]), blobs[0].size()},
              {NVJITLINK_INPUT_LTOIR, "b.ltoir", sha256(blobs[1]), blobs[1].size()}};
  r.output = "cubin";
  r.arch = "sm_80";
  r.program = "app";
  r.cache_key = sha256(std::string_view("key"));
  REQUIRE(write_recording(src, r, blobs));
  Stored s;
  s.original = src / (recording_name("app", r.cache_key) + package_suffix);
  auto layout = LayoutSource::open(LayoutRef{s.original, ""});
  REQUIRE(layout);
  auto fetched = (*layout)->get_manifest("");
  REQUIRE(fetched);
  s.image = fetched->digest;
  auto pulled = pull_package(**layout, store / "packages" / s.image.hex(), false, &*fetched,
                             nullptr, PullLayers::signatures);
  REQUIRE_MESSAGE(pulled, (pulled ? "" : pulled.error().str()));
  s.package = pulled->dir;
  fs::create_directories(store / "refs");
  unit_files::write_file(store / "refs" / sha256(ref.name()).hex(), s.image.str() + "\n");
  return s;
}

} // namespace

TEST_CASE("--offline starts the stored copy of a tag, fetching nothing") {
  ScratchDir dir;
  const fs::path store = dir.path / "oci";
  const RegistryRef ref = ref_of("oci://registry.example:5000/team/app:1");
  const Stored s = store_recording(dir.path / "src", store, ref);
  // A pull of the signatures only leaves the blobs for the load path to fetch.
  CHECK_FALSE(Package::open(s.package));

  auto got = package_from_registry(ref, store, true, no_environment);
  REQUIRE_MESSAGE(got, (got ? "" : got.error().str()));
  CHECK(got->package == s.package);
  CHECK(got->manifest == s.image);
  CHECK_FALSE(got->pulled);
  CHECK(got->bytes == 0);
  CHECK(got->warnings.empty());
  REQUIRE(got->source);
  auto pkg = Package::open(got->package, {.source = got->source});
  REQUIRE_MESSAGE(pkg, (pkg ? "" : pkg.error().str()));
  const RecipeInput in = pkg->manifest().recipe->inputs[0];
  // A blob no start has read is not stored: offline, that is an error that says so.
  auto missing = pkg->read_blob(in.digest);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().str().find(cat("oci://registry.example:5000/team/app:1: --offline: blob ",
                                       in.digest.short_str(),
                                       " is not stored (no earlier start of this package read "
                                       "it)")) != std::string::npos);
  // One in the store's blobs (where a start that read it put it) is served from there.
  const fs::path blobs = store / "blobs" / "sha256";
  fs::create_directories(blobs);
  fs::copy_file(s.original / "blobs" / "sha256" / in.digest.hex(), blobs / in.digest.hex());
  auto read = pkg->read_blob(in.digest);
  REQUIRE_MESSAGE(read, (read ? "" : read.error().str()));
  CHECK(*read == "first input");
}

TEST_CASE("--offline with no stored copy of the reference is an error naming the store") {
  ScratchDir dir;
  const fs::path store = dir.path / "oci";
  const RegistryRef stored_ref = ref_of("oci://registry.example/team/app:1");
  const Stored s = store_recording(dir.path / "src", store, stored_ref);
  const std::string packages = "'" + (store / "packages").string() + "'";

  SUBCASE("an empty store") {
    ScratchDir empty;
    auto got = package_from_registry(stored_ref, empty.path / "oci", true, no_environment);
    REQUIRE_FALSE(got);
    CHECK(got.error().str() ==
          "oci://registry.example/team/app:1: --offline, and no copy of it is stored in '" +
              (empty.path / "oci" / "packages").string() + "'");
  }
  SUBCASE("another tag of the repository") {
    auto got = package_from_registry(ref_of("oci://registry.example/team/app:2"), store, true,
                                     no_environment);
    REQUIRE_FALSE(got);
    CHECK(got.error().str() ==
          "oci://registry.example/team/app:2: --offline, and no copy of it is stored in " +
              packages);
  }
  SUBCASE("a tag whose record names an image manifest no longer stored") {
    fs::remove_all(store / "packages" / s.image.hex());
    auto got = package_from_registry(stored_ref, store, true, no_environment);
    REQUIRE_FALSE(got);
    CHECK(got.error().str().ends_with("no copy of it is stored in " + packages));
  }
}

TEST_CASE("a reference by digest needs no record: the store is by image manifest") {
  ScratchDir dir;
  const fs::path store = dir.path / "oci";
  const Stored s = store_recording(dir.path / "src", store, ref_of("oci://r.example/a/b:1"));
  fs::remove_all(store / "refs");
  auto got = package_from_registry(ref_of("oci://elsewhere.example/c/d@" + s.image.str()), store,
                                   true, no_environment);
  REQUIRE_MESSAGE(got, (got ? "" : got.error().str()));
  CHECK(got->package == s.package);
  CHECK(got->manifest == s.image);
}

TEST_CASE("a registry that cannot be reached starts the stored copy, with a warning") {
  ScratchDir dir;
  const fs::path store = dir.path / "oci";
  // Port 1 on the loopback: refused at once.
  const RegistryRef ref = ref_of("oci://127.0.0.1:1/team/app:1#timeout=1s");
  const Stored s = store_recording(dir.path / "src", store, ref);
  auto got = package_from_registry(ref, store, false, no_environment);
  REQUIRE_MESSAGE(got, (got ? "" : got.error().str()));
  CHECK(got->package == s.package);
  CHECK_FALSE(got->pulled);
  REQUIRE(got->warnings.size() == 1);
  CHECK(got->warnings[0].ends_with(": starting the stored copy " + s.image.short_str()));
  // Without a stored copy, the registry's error is the error.
  ScratchDir empty;
  auto none = package_from_registry(ref, empty.path, false, no_environment);
  REQUIRE_FALSE(none);
  CHECK(got->warnings[0].starts_with(none.error().str()));
  CHECK_FALSE(fs::exists(empty.path / "packages"));
}
