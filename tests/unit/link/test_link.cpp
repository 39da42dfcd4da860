// link_arch, link_archs, store_links and link_package with the real nvJitLink, per TU: a link
// verified and cached (module and units), the next a hit, a module miss rebuilt from cached
// units into the same bytes, a miss reported without a link, a failed link and an arch out of
// reach, several archs in the order asked, records stored into the package (replaced per arch,
// refused when the package was repacked), cudaq-rt-link's dry run, save-temps and all-or-nothing
// store, and the fallback to a whole-program link. Four links of the example app (sm_90 and
// sm_80 per TU, sm_90 whole) and one of a handler calling a function nothing defines.
#include "link/link.h"

#include "formats/cubin.h"
#include "link/nvjitlink.h"
#include "package/signatures.h"

#include <doctest/doctest.h>

#include "blob_sources.h"
#include "package_fixture.h"
#include "scratch_dir.h"
#include "signing_keys.h"
#include "unit_files.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using namespace package_fixture;
using unit_files::read_file;

namespace {

const std::string example_app = CUDAQ_RT_TEST_EXAMPLE_APP;
const std::string loopback = CUDAQ_RT_TEST_LOOPBACK_BRIDGE;

// Every file under a directory and its bytes, to tell that nothing changed.
std::map<std::string, std::string> snapshot(const fs::path &dir) {
  std::map<std::string, std::string> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[fs::relative(e.path(), dir).string()] = read_file(e.path());
  return out;
}

struct Fixture {
  ScratchDir dir{"cudaq_rt_test_link"};
  fs::path example, unresolved;

  Fixture() {
    ::setenv("CUDAQ_RT_BRIDGE_PATH", CUDAQ_RT_TEST_ECHO_BRIDGE_DIR, 1);
    ::unsetenv(lto_mode_env);
    ::unsetenv(force_whole_link_env);
    example = pack_of("example", {{example_app, Role::application, ""}});
    unresolved =
        pack_of("unresolved", {{CUDAQ_RT_TEST_UNIT_INPUTS "/unresolved.o", Role::application, ""}});
  }

  // The loopback bridge's hooks are packed as bridge `echo` in every package.
  fs::path pack_of(const std::string &name, std::vector<PackInput> ins, bool force = false) {
    ins.push_back({loopback, Role::bridge, "echo"});
    PackOptions o;
    o.inputs = std::move(ins);
    o.output_dir = dir.path;
    o.name = name;
    o.force = force;
    return packed(o);
  }

  fs::path copy(const fs::path &package, const std::string &name) {
    return copy_package(package, dir.path, name);
  }

  LinkCache cache(const std::string &name) const { return open_link_cache(dir.path / name); }
};

Fixture &fixture() {
  static Fixture f;
  return f;
}

std::string error_of(const ArchLink &a) {
  return a.error ? a.error->str() : std::string("(no error)");
}

// The example app's links, made once, in the cache "shared": sm_90 first, sm_80 by the test of
// link_archs.
struct Linked {
  LinkCache cache = fixture().cache("shared");
  ArchLink sm90, sm80;
};

Linked &linked() {
  static Linked l = [] {
    Linked out;
    const Package p = open_package(fixture().example);
    const LinkPlan plan = plan_of(p);
    out.sm90 = link_arch(plan, arch("sm_90"), out.cache);
    REQUIRE_MESSAGE(out.sm90.record, error_of(out.sm90));
    return out;
  }();
  return l;
}

// What every linked module must be: for the arch, loadable, with the kernel and every handler.
void check_module(const LinkPlan &plan, const ArchLink &a, uint32_t sm) {
  REQUIRE_MESSAGE(a.record, error_of(a));
  auto info = read_cubin(a.cubin, a.arch.str());
  REQUIRE_MESSAGE(info, (info ? "" : info.error().str()));
  CHECK(info->arch == sm);
  CHECK_FALSE(info->relocatable);
  CHECK(info->functions.count(plan.kernel) == 1);
  for (const std::string &s : plan.handler_symbols)
    CHECK_MESSAGE(info->variables.count(s) == 1, s);
  const LinkRecord &r = *a.record;
  CHECK(r.arch == a.arch);
  CHECK(r.bridge == plan.bridge);
  CHECK(r.dispatcher == plan.dispatcher);
  CHECK(r.cubin == sha256(a.cubin));
  CHECK(r.cubin_size == a.cubin.size());
  CHECK(r.cache_key == a.key.digest);
  CHECK(r.nvjitlink_version == plan.nvjitlink.version());
  CHECK(r.options == a.options);
}

} // namespace

TEST_CASE("describe_arch: the key, options and inputs of a link, without linking") {
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  const ArchLink a = describe_arch(plan, arch("sm_90"));
  CHECK(a.arch.str() == "sm_90");
  CHECK(a.key.digest == plan.key(arch("sm_90")).digest);
  CHECK(a.options == plan.options(arch("sm_90")));
  REQUIRE(a.input_names.size() == plan.inputs.size());
  for (size_t k = 0; k < plan.inputs.size(); ++k)
    CHECK(a.input_names[k] == plan.inputs[k].name);
  CHECK_FALSE(a.record);
  CHECK_FALSE(a.error);
  CHECK(a.cubin.empty());

  // A whole-program plan names the unit of direct calls it generates, after the dispatcher.
  LinkSettings whole;
  whole.lto_mode = LtoMode::whole;
  const LinkPlan w = plan_of(p, whole);
  const ArchLink d = describe_arch(w, arch("sm_90"));
  REQUIRE(d.input_names.size() == w.inputs.size() + 1);
  CHECK(d.input_names[0] == "dispatcher builtin");
  CHECK(d.input_names[1] == "direct calls (generated) " + w.direct_calls->digest().short_str());
}

TEST_CASE("a per-TU link: each unit compiled, the module verified, recorded and cached") {
  Linked &l = linked();
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  const ArchLink &a = l.sm90;
  check_module(plan, a, 90);
  CHECK_FALSE(a.cache_hit);
  CHECK(a.mode == LtoMode::per_tu);
  CHECK(a.record->lto == LtoMode::per_tu);
  CHECK(a.record->inputs == plan.input_digests());
  CHECK(a.fallback.empty());
  REQUIRE(a.units.size() == plan.units.size());
  for (size_t u = 0; u < a.units.size(); ++u) {
    CAPTURE(u);
    CHECK(a.units[u].name == plan.units[u].name);
    CHECK(a.units[u].key == plan.unit_key(arch("sm_90"), plan.units[u]).digest);
    // The dispatcher's unit is the one the build ships (lib/cudaq-rt/units); the others compile.
    CHECK(a.units[u].compiled == !plan.units[u].dispatcher);
    CHECK(a.units[u].shipped == plan.units[u].dispatcher);
    CHECK(a.units[u].cache_hit == plan.units[u].dispatcher);
    CHECK(a.units[u].size > 0);
  }

  // The next link of the same plan and arch is the cache's module, the same bytes.
  const ArchLink again = link_arch(plan, arch("sm_90"), l.cache);
  REQUIRE_MESSAGE(again.record, error_of(again));
  CHECK(again.cache_hit);
  CHECK(again.cubin == a.cubin);
  CHECK(again.units.empty()); // no unit is looked up when the module hits
  CHECK(again.record->cubin == a.record->cubin);
}

TEST_CASE("a module missing from the cache is relinked from its cached units, the same bytes") {
  Linked &l = linked();
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  // A copy of the shared cache without the module's entry.
  const fs::path copy = fixture().dir.path / "units_only";
  fs::copy(fixture().dir.path / "shared", copy, fs::copy_options::recursive);
  CacheConfig c;
  c.dir = copy;
  auto cache = LinkCache::open(c);
  REQUIRE(cache);
  REQUIRE(fs::remove(cache->entry_path(plan.key(arch("sm_90")).digest)));
  const ArchLink a = link_arch(plan, arch("sm_90"), *cache);
  check_module(plan, a, 90);
  CHECK_FALSE(a.cache_hit);
  REQUIRE(a.units.size() == plan.units.size());
  for (const UnitLink &u : a.units) {
    CHECK(u.cache_hit);
    CHECK_FALSE(u.compiled);
  }
  CHECK(a.cubin == l.sm90.cubin);
}

// A copy of the example package without its packed code, whose blobs come from the package.
struct PartialExample {
  fs::path dir;
  std::shared_ptr<DirectoryBlobSource> source;
  std::vector<Digest> absent;
  std::vector<Digest> files; // the absent blobs' files, by name (a compressed one's frame)

  // A directory of its own each time (each subcase runs the test case again).
  explicit PartialExample(const std::string &name)
      : dir(fixture().copy(fixture().example, cat(name, "_", ++made))),
        source(std::make_shared<DirectoryBlobSource>(fixture().example / "blobs" / "sha256")) {
    const Package whole = open_package(fixture().example);
    for (const ContainerRecord &c : whole.manifest().containers)
      if (c.packed() && std::find(absent.begin(), absent.end(), c.digest) == absent.end()) {
        files.push_back(whole.stored_name(c.digest));
        REQUIRE(fs::remove(dir / "blobs" / "sha256" / files.back().hex()));
        absent.push_back(c.digest);
      }
    REQUIRE(absent.size() >= 2); // the application and the bridge's hooks
  }
  inline static int made = 0;
  Package open() const {
    auto p = Package::open(dir, {.source = source});
    REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
    return std::move(*p);
  }
};

TEST_CASE("blobs from a source: planned without them, fetched only for a link") {
  Linked &l = linked();
  const LinkPlan whole_plan = plan_of(open_package(fixture().example));
  PartialExample partial("partial");
  const Package p = partial.open();
  const LinkPlan plan = plan_of(p);
  CHECK(plan.has_deferred_inputs());
  CHECK_FALSE(whole_plan.has_deferred_inputs());
  CHECK(plan.key(arch("sm_90")).digest == whole_plan.key(arch("sm_90")).digest);
  CHECK(plan.input_digests() == whole_plan.input_digests());
  CHECK(partial.source->fetches == 0);

  SUBCASE("a cache hit fetches nothing") {
    const ArchLink a = link_arch(plan, arch("sm_90"), l.cache);
    REQUIRE_MESSAGE(a.record, error_of(a));
    CHECK(a.cache_hit);
    CHECK(a.cubin == l.sm90.cubin);
    CHECK(partial.source->fetches == 0);
  }
  SUBCASE("a miss fetches the inputs, once each, and links the same module") {
    const fs::path copy = fixture().dir.path / cat("units_only_", partial.dir.stem().string());
    fs::copy(fixture().dir.path / "shared", copy, fs::copy_options::recursive);
    LinkCache cache = open_link_cache(copy);
    REQUIRE(fs::remove(cache.entry_path(plan.key(arch("sm_90")).digest)));
    const ArchLink a = link_arch(plan, arch("sm_90"), cache);
    check_module(plan, a, 90);
    CHECK_FALSE(a.cache_hit);
    CHECK(a.cubin == l.sm90.cubin);
    CHECK(partial.source->fetches == static_cast<int>(partial.absent.size()));
    for (const Digest &d : partial.files)
      CHECK(fs::exists(partial.dir / "blobs" / "sha256" / d.hex()));
  }
  SUBCASE("a miss reported fetches nothing") {
    LinkCache empty = fixture().cache("empty_" + partial.dir.stem().string());
    const ArchLink a = link_arch(plan, arch("sm_90"), empty, OnCacheMiss::return_unlinked);
    CHECK_FALSE(a.record);
    CHECK_FALSE(a.error);
    CHECK(partial.source->fetches == 0);
  }
  SUBCASE("wrong bytes from the source: the link is an error naming the blob, nothing kept") {
    partial.source->tamper = partial.absent.back();
    LinkCache empty = fixture().cache("tampered_" + partial.dir.stem().string());
    const ArchLink a = link_arch(plan, arch("sm_90"), empty);
    CHECK_FALSE(a.record);
    CHECK(error_of(a).find("blob does not match its digest " + partial.absent.back().str()) !=
          std::string::npos);
    CHECK_FALSE(fs::exists(partial.dir / "blobs" / "sha256" / partial.absent.back().hex()));
    auto stats = empty.stats();
    REQUIRE(stats);
    CHECK(stats->entries == 0);
  }
}

TEST_CASE("a miss reported links nothing; an arch out of reach and a failed link are errors") {
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  const LinkCache empty = fixture().cache("empty");
  const ArchLink miss = link_arch(plan, arch("sm_90"), empty, OnCacheMiss::return_unlinked);
  CHECK_FALSE(miss.record);
  CHECK_FALSE(miss.error);
  CHECK(miss.cubin.empty());
  // Neither the module nor any unit was stored.
  CHECK_FALSE(fs::exists(empty.entry_path(plan.key(arch("sm_90")).digest)));
  for (const LinkUnit &unit : plan.units)
    CHECK_FALSE(fs::exists(empty.entry_path(plan.unit_key(arch("sm_90"), unit).digest)));

  const ArchLink old = link_arch(plan, arch("sm_75"), empty);
  CHECK(error_of(old) == "'" + fixture().example.string() +
                             "': cannot link for sm_75: dispatcher builtin holds ltoir sm_80; this "
                             "package can serve sm_80 and newer");
  CHECK_FALSE(old.record);

  // A handler calling a function nothing defines: its unit compiles, the final link cannot.
  const Package u = open_package(fixture().unresolved);
  const LinkPlan up = plan_of(u);
  const ArchLink failed = link_arch(up, arch("sm_90"), linked().cache);
  REQUIRE(failed.error);
  CHECK_FALSE(failed.record);
  const std::string e = failed.error->str();
  CHECK(e.rfind("'" + fixture().unresolved.string() + "': sm_90: nvJitLink failed at ", 0) == 0);
  CHECK(e.find("unresolved symbol: ") != std::string::npos);
  CHECK(failed.details.find("cudaq_rt_test_defined_nowhere") != std::string::npos);
  CHECK(failed.details.find("inputs:\n") != std::string::npos);
  for (const LinkUnit &unit : up.units)
    CHECK(std::any_of(failed.units.begin(), failed.units.end(),
                      [&](const UnitLink &x) { return x.name == unit.name; }));
}

TEST_CASE("link_archs: every arch, in the order asked, each linked or found on its own") {
  Linked &l = linked();
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  const std::vector<TargetArch> archs = {arch("sm_80"), arch("sm_90")};
  std::vector<ArchLink> out = link_archs(plan, archs, l.cache, 2);
  REQUIRE(out.size() == 2);
  CHECK(out[0].arch.str() == "sm_80");
  CHECK(out[1].arch.str() == "sm_90");
  check_module(plan, out[0], 80);
  check_module(plan, out[1], 90);
  CHECK_FALSE(out[0].cache_hit);
  CHECK(out[1].cache_hit);
  CHECK(out[1].cubin == l.sm90.cubin);
  l.sm80 = std::move(out[0]);
}

TEST_CASE("store_links: records and cubins into the package, one per arch, under its lock") {
  Linked &l = linked();
  if (!l.sm80.record) // linked by the link_archs test, unless it did not run
    l.sm80 = link_arch(plan_of(open_package(fixture().example)), arch("sm_80"), l.cache);
  REQUIRE_MESSAGE(l.sm80.record, error_of(l.sm80));
  const fs::path dir = fixture().copy(fixture().example, "stored");
  const Package before = open_package(dir);
  const LinkPlan plan = plan_of(before);
  const std::vector<ArchLink> both = {l.sm90, l.sm80};
  REQUIRE(store_links(dir, plan, both));
  {
    const Package p = open_package(dir);
    const Manifest &m = p.manifest();
    REQUIRE(m.links.size() == 2);
    CHECK(m.links[0].arch.str() == "sm_80"); // sorted by SM number
    CHECK(m.links[1].arch.str() == "sm_90");
    CHECK(m.links[1].cubin == l.sm90.record->cubin);
    auto cubin = p.read_blob(m.links[1].cubin);
    REQUIRE(cubin);
    CHECK(*cubin == std::string(l.sm90.cubin.begin(), l.sm90.cubin.end()));
    // The built-in dispatcher the records name is in the package now, marked as the link's.
    const ContainerRecord *d = m.find_container(plan.inputs[0].digest);
    REQUIRE(d);
    CHECK(d->added_by == "cudaq-rt-link");
    for (const Digest &in : m.links[0].inputs)
      CHECK(m.find_container(in));
    CHECK(packed_code(m) == plan.packed); // what pack packed is as it was
  }
  // Storing an arch again replaces its record.
  REQUIRE(store_links(dir, plan, std::span<const ArchLink>(&l.sm90, 1)));
  CHECK(open_package(dir).manifest().links.size() == 2);

  // A package repacked since the plan was made is not stored into.
  const fs::path repacked = fixture().copy(fixture().example, "repacked");
  const LinkPlan stale = plan_of(open_package(repacked));
  fixture().pack_of("repacked",
                    {{CUDAQ_RT_TEST_UNIT_INPUTS "/unresolved.o", Role::application, ""}},
                    /*force=*/true);
  const auto files = snapshot(repacked);
  auto st = store_links(repacked, stale, std::span<const ArchLink>(&l.sm90, 1));
  REQUIRE_FALSE(st);
  CHECK(st.error().str() == "'" + repacked.string() +
                                "': the package was replaced while it was being linked (by "
                                "cudaq-rt-pack --force?): link it again");
  CHECK(snapshot(repacked) == files);
}

TEST_CASE("store_links under trust: the package as it is under the lock must verify before it is "
          "signed") {
  Linked &l = linked();
  auto k1 = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  REQUIRE(k1);
  auto trusted = std::make_shared<TrustedKeys>();
  trusted->add(k1->public_key());
  const TrustPolicy trust{std::make_shared<const SigningKey>(*k1), trusted};
  const fs::path dir = fixture().copy(fixture().example, "trusted");
  const LinkPlan plan = plan_of(open_package(dir));
  // Unsigned (as a package swapped in after the check would be): refused, nothing written.
  const auto files = snapshot(dir);
  auto st = store_links(dir, plan, std::span<const ArchLink>(&l.sm90, 1), trust);
  REQUIRE_FALSE(st);
  CHECK(st.error().message.starts_with("not signed: "));
  CHECK(snapshot(dir) == files);
  // Signed by the trusted key: stored, and the new manifest signed again by it.
  REQUIRE(sign_package(dir, *k1));
  REQUIRE(store_links(dir, plan, std::span<const ArchLink>(&l.sm90, 1), trust));
  const Package p = open_package(dir);
  CHECK(p.manifest().links.size() == 1);
  auto by = verify_package(p, *trusted);
  REQUIRE(by);
  CHECK(*by == k1->id());
}

TEST_CASE("store_links names the keys whose signatures the new manifest broke") {
  Linked &l = linked();
  auto k1 = SigningKey::from_pem(test_keys::rfc8032_1_private, "k1");
  auto k2 = SigningKey::from_pem(test_keys::rfc8032_2_private, "k2");
  REQUIRE(k1);
  REQUIRE(k2);
  const fs::path dir = fixture().copy(fixture().example, "broken-signatures");
  const LinkPlan plan = plan_of(open_package(dir));
  REQUIRE(sign_package(dir, *k1));
  REQUIRE(sign_package(dir, *k2));
  // Signed by k2 as it stores: only k1's signature is left behind.
  const TrustPolicy by_k2{std::make_shared<const SigningKey>(*k2), nullptr};
  auto broken = store_links(dir, plan, std::span<const ArchLink>(&l.sm90, 1), by_k2);
  REQUIRE_MESSAGE(broken, (broken ? "" : broken.error().str()));
  CHECK(*broken == std::vector<KeyId>{k1->id()});
  CHECK(broken_signatures_warning("p", *broken) ==
        "'p': the stored links changed its manifest: the signature of key " + k1->id().short_str() +
            " no longer holds (sign it again: cudaq-rt-link p --sign KEY)");
  // The same links again, at another time: the record keeps its time, the manifest is what k2
  // signed, so nothing more breaks.
  const Digest signed_manifest = open_package(dir).manifest_digest();
  ::setenv("SOURCE_DATE_EPOCH", "86400", 1);
  broken = store_links(dir, plan, std::span<const ArchLink>(&l.sm90, 1));
  ::unsetenv("SOURCE_DATE_EPOCH");
  REQUIRE(broken);
  CHECK(broken->empty());
  CHECK(open_package(dir).manifest_digest() == signed_manifest);
  // Another arch without a signer: k2's signature, which held, breaks; k1's was broken already.
  broken = store_links(dir, plan, std::span<const ArchLink>(&l.sm80, 1));
  REQUIRE(broken);
  CHECK(*broken == std::vector<KeyId>{k2->id()});
  CHECK_FALSE(broken_signatures_warning("p", {}));
}

TEST_CASE("link_package: plan, link every arch, store all or nothing") {
  Linked &l = linked();
  const fs::path dir = fixture().copy(fixture().example, "cli");
  const auto packed = snapshot(dir);
  LinkOptions o;
  o.package = dir;
  o.archs = {arch("sm_90")};
  o.jobs = 2;

  o.dry_run = true;
  auto dry = link_package(o, l.cache);
  REQUIRE_MESSAGE(dry, (dry ? "" : dry.error().str()));
  REQUIRE(dry->archs.size() == 1);
  CHECK(dry->archs[0].key.digest == l.sm90.key.digest);
  CHECK_FALSE(dry->archs[0].record);
  CHECK(dry->bridge == "echo");
  CHECK(dry->dispatcher == "builtin");
  CHECK(dry->mode == LtoMode::per_tu);
  CHECK(snapshot(dir) == packed);

  o.dry_run = false;
  o.store_in_package = false;
  o.save_temps = fixture().dir.path / "temps";
  auto unstored = link_package(o, l.cache);
  REQUIRE_MESSAGE(unstored, (unstored ? "" : unstored.error().str()));
  CHECK(unstored->ok());
  CHECK(unstored->archs[0].cache_hit);
  CHECK(snapshot(dir) == packed);
  const fs::path temps = *o.save_temps / "sm_90";
  CHECK(read_file(temps / "module.cubin") == std::string(l.sm90.cubin.begin(), l.sm90.cubin.end()));
  std::string options;
  for (const std::string &s : l.sm90.options)
    options += s + "\n";
  CHECK(read_file(temps / "options.txt") == options);
  const LinkPlan plan = plan_of(open_package(dir));
  for (size_t k = 0; k < plan.inputs.size(); ++k) {
    const fs::path in = temps / cat(k, "-", plan.inputs[k].digest.hex().substr(0, 12), ".fatbin");
    CHECK(sha256(read_file(in)) == plan.inputs[k].digest);
  }
  CHECK(fs::exists(temps / "nvjitlink.log"));

  o.store_in_package = true;
  o.save_temps.reset();
  auto stored = link_package(o, l.cache);
  REQUIRE_MESSAGE(stored, (stored ? "" : stored.error().str()));
  CHECK(stored->ok());
  REQUIRE(open_package(dir).manifest().links.size() == 1);
  CHECK(open_package(dir).manifest().links[0].cubin == l.sm90.record->cubin);

  // Errors that stop everything before a link.
  o.archs.clear();
  auto none = link_package(o, l.cache);
  REQUIRE_FALSE(none);
  CHECK(none.error().str() ==
        "'" + dir.string() + "': no target arch: give --arch sm_NN[,sm_NN...]");
  o.archs = {arch("sm_90"), arch("sm_75")};
  auto old = link_package(o, l.cache);
  REQUIRE_FALSE(old);
  CHECK(old.error().str().rfind("'" + dir.string() + "': cannot link for sm_75: ", 0) == 0);

  // A link that fails: reported per arch, and nothing is stored.
  const fs::path bad = fixture().copy(fixture().unresolved, "cli_unresolved");
  const auto bad_files = snapshot(bad);
  LinkOptions u;
  u.package = bad;
  u.archs = {arch("sm_90")};
  auto failed = link_package(u, l.cache);
  REQUIRE_MESSAGE(failed, (failed ? "" : failed.error().str()));
  CHECK_FALSE(failed->ok());
  REQUIRE(failed->archs.size() == 1);
  CHECK(failed->archs[0].error);
  CHECK(snapshot(bad) == bad_files);
}

TEST_CASE("without per-TU compiles the plan is linked as a whole program, and says why") {
  const Package p = open_package(fixture().example);
  const LinkPlan plan = plan_of(p);
  REQUIRE(plan.mode == LtoMode::per_tu);
  ::setenv(force_whole_link_env, "1", 1);
  const ArchLink a = link_arch(plan, arch("sm_90"), fixture().cache("fallback"));
  ::unsetenv(force_whole_link_env);
  check_module(plan, a, 90);
  CHECK(a.fallback ==
        "per-TU link unavailable (CUDAQ_RT_FORCE_WHOLE_LINK is set): linked as a whole program");
  CHECK(a.mode == LtoMode::whole);
  CHECK(a.record->lto == LtoMode::whole);
  CHECK(a.units.empty());
  // The plain form of the built-in kernel, not the direct one --lto whole takes.
  CHECK(a.record->inputs == plan.input_digests());
  CHECK(a.key.digest == plan.as_whole_fallback().key(arch("sm_90")).digest);
  CHECK(std::find(a.options.begin(), a.options.end(), "-split-compile-extended=0") !=
        a.options.end());
}

TEST_CASE("push_links needs a remote cache; LinkReport::ok is every arch without an error") {
  auto pushed = push_links(fixture().example, fixture().cache("no_remote"));
  REQUIRE_FALSE(pushed);
  CHECK(pushed.error().str() == "'" + fixture().example.string() +
                                    "': no remote cache to push to: give --remote-cache URL or "
                                    "set CUDAQ_RT_REMOTE_CACHE");
  LinkReport r;
  CHECK(r.ok());
  r.archs.resize(2);
  CHECK(r.ok());
  r.archs[1].error = make_error("x", "failed");
  CHECK_FALSE(r.ok());
}

TEST_CASE("the example handlers fit a block of 1024 threads: they link with block_dispatch") {
  // block_dispatch (examples/dispatch) is __launch_bounds__(1024): 64 registers a thread, and
  // every handler it may call must fit them. An echo that kept 4 or more 16-byte loads in flight
  // took 69 to 165 and failed this link ("regcount of ..."); the GPU tests were the first to say.
  const fs::path block =
      fixture().pack_of("block", {{example_app, Role::application, ""},
                                  {CUDAQ_RT_TEST_BLOCK_DISPATCH, Role::dispatcher, ""}});
  const Package p = open_package(block);
  LinkSettings s;
  s.dispatcher = "block_dispatch";
  const LinkPlan plan = plan_of(p, s);
  LinkCache cache = fixture().cache("block");
  for (const char *sm : {"sm_80", "sm_90"}) {
    CAPTURE(sm);
    const ArchLink a = link_arch(plan, arch(sm), cache);
    CHECK_MESSAGE(a.record, error_of(a));
  }
}

TEST_CASE("two translation units that define one device symbol: refused before nvJitLink") {
  // nvJitLink 13.0 died with SIGSEGV on this per-TU link (before b95327a): the units' symbol tables
  // are read first, and the link stops with the symbol and both units named.
  const fs::path dup =
      fixture().pack_of("dup", {{CUDAQ_RT_TEST_UNIT_INPUTS "/dup_a.o", Role::application, ""},
                                {CUDAQ_RT_TEST_UNIT_INPUTS "/dup_b.o", Role::application, ""}});
  const Package p = open_package(dup);
  const LinkPlan plan = plan_of(p);
  std::vector<std::string> units;
  for (const LinkUnit &u : plan.units)
    if (u.name.find("dup_") != std::string::npos)
      units.push_back(u.name);
  REQUIRE(units.size() == 2);
  LinkCache cache = fixture().cache("dup");
  const ArchLink a = link_arch(plan, arch("sm_80"), cache);
  CHECK_FALSE(a.record);
  CHECK(error_of(a) == "'" + dup.string() +
                           "': sm_80: the device symbol 'dup_helper' is defined by two translation "
                           "units, " +
                           units[0] + " and " + units[1] +
                           " (one program may define it once: make one static, or rename it)");
  // One of them alone links.
  const fs::path one =
      fixture().pack_of("dup_one", {{CUDAQ_RT_TEST_UNIT_INPUTS "/dup_a.o", Role::application, ""}});
  const ArchLink b = link_arch(plan_of(open_package(one)), arch("sm_80"), cache);
  CHECK_MESSAGE(b.record, error_of(b));
}

TEST_CASE("a handler over the dispatch kernel's register bounds: the link says so in words") {
  // nvJitLink's log ("entry function ... with max regcount of 64 calls function ... with regcount
  // of N") was explained as a missing direct-call function, which it is not.
  const fs::path heavy =
      fixture().pack_of("heavy", {{CUDAQ_RT_TEST_UNIT_INPUTS "/heavy.o", Role::application, ""},
                                  {CUDAQ_RT_TEST_BLOCK_DISPATCH, Role::dispatcher, ""}});
  LinkSettings s;
  s.dispatcher = "block_dispatch";
  const LinkPlan plan = plan_of(open_package(heavy), s);
  LinkCache cache = fixture().cache("heavy");
  const ArchLink a = link_arch(plan, arch("sm_90"), cache);
  REQUIRE_FALSE(a.record);
  const std::string e = error_of(a);
  CHECK(e.find("a function the dispatch kernel calls needs more registers than the kernel's "
               "launch bounds leave a thread") != std::string::npos);
  CHECK(e.find("with max regcount of 64") != std::string::npos);
  CHECK(e.find("export record") == std::string::npos);
}
