// Which cubin serves a GPU, and what vouches for it before the load path hands it to the driver.
// man/cudaq-rt-run.1 ("How the cubin is chosen") gives the order as a user sees it; this is why.
// It stands on the package (package/package.h: every blob hashed as it is read), the link plan
// and link_arch (link/link.h: the plan, key and checks cudaq-rt-link uses) and the link cache
// (cache/link_cache.h). It needs no GPU: given an arch (cudaq-rt-run --list --arch), it answers
// on a machine without one as on the GPU's.
//
// The first place that has a cubin for the GPU's exact arch wins (an sm_90a cubin is not an
// sm_90 one: cache/link_key.cpp), cheapest first. For the example package on the H200 the cubin
// took 0.43 ms from the package, 0.77 ms from the cache and 5.56 ms linked at load, the first
// response 5.9, 9.4 and 15.0 ms after the CUDA context (bench/load_paths.md); a link grows with
// the handlers (bench/link_bench.md), the other steps do not.
//
//  1. The package's own link record for this arch, bridge and dispatcher, as cudaq-rt-link stored
//     it: one blob read. With --lto, only a record linked in that mode (another is a note);
//     without, a record of either mode serves.
//  2. The local link cache, under the key cudaq-rt-link would compute for the same link.
//  3. The remote link cache, under the same key; a hit is copied into the local cache. A server
//     that is down or slow costs its timeout once per process and a warning, never the load.
//  4. A link at load, the one cudaq-rt-link makes, in this process; its cubin goes into the local
//     cache, and into the remote one unless that is read-only. Per TU, a unit the local cache or
//     the build's shipped units (lib/cudaq-rt/units) hold is not compiled again (-v counts them).
// Steps 2 to 4 are one call of link_arch: the lookups and the link cudaq-rt-link makes.
// CubinPolicy::allow_link false (--no-link) stops before step 4. CubinPolicy::store (--store)
// writes what steps 2 to 4 found into the package, under its lock (store_links), so that the
// next start takes step 1, and warns of the signatures the new manifest no longer matches. Where
// the plan cannot be linked for this arch at all (a GPU older than the package's LTO-IR:
// LinkPlan::check_target), steps 2 to 4 are skipped and the error says what the package can
// serve. When nothing is found the error names the records the package has; with
// CubinPolicy::none_is_error false (--list) that is an answer, not a failure.
//
// A stale record. A link record names its inputs by digest, in link order, and the plan names the
// inputs this process would link: the package's handlers, the hooks of the bridge it would load
// (packed in the package, or an installed library's) and the dispatch kernel it would launch (the
// package's, or this runtime's built-in one). A record whose inputs differ was linked against
// other hooks or another built-in kernel (an older cudaq-rt, a rebuilt bridge library): its
// device code need not match the host side of the bridge that would run, so it is passed over
// with a warning and steps 2 to 4 decide. A whole-program record is compared with both forms of
// the built-in kernel: a whole link takes its direct form where the package has handlers
// callable by name, but the fallback from per-TU mode (LinkPlan::as_whole_fallback) the plain one.
//
// What is verified before use. The package's cubin: its blob's sha256 must be the record's digest
// (for a compressed blob, its frame's stored digest first), and a blob not on disk (a package
// started from a registry) is fetched and checked so; under --trust the manifest that holds the
// record was signed by a trusted key, checked when the package was opened (load/server.cpp). It
// is not checked again as below: cudaq-rt-link did so before it stored it. A cache entry: its
// key, header and cubin digests (cache/cache_entry.cpp), and under --trust a trusted key's
// signature, else it is a miss. A cache hit and a fresh link alike: the cubin must be a loadable
// module for exactly this arch that defines the dispatch kernel and every handler's
// cudaq_rt_handler__<name> global (verify_cubin, link/link.cpp); a remote entry is checked so
// before it is copied into the local cache.
#include "load/select_cubin.h"

#include "package/package.h"

#include <chrono>

namespace cudaq_rt {

const char *cubin_source_name(CubinSource s) {
  switch (s) {
  case CubinSource::package:
    return "package";
  case CubinSource::cache:
    return "cache";
  case CubinSource::remote:
    return "remote cache";
  case CubinSource::link:
    return "link at load";
  }
  return "?";
}

Expected<CubinChoice> select_cubin(const Package &package, const LinkPlan &plan,
                                   const TargetArch &arch, const LinkCache &cache,
                                   const CubinPolicy &policy, const TrustPolicy &trust) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  CubinChoice c;
  c.arch = arch;
  const std::string what =
      cat(c.arch.str(), " (bridge ", plan.bridge, ", dispatcher ", plan.dispatcher, ")");

  // 1. The package. A mode asked for by name takes only a cubin linked in that mode; otherwise
  // the package's cubin serves whichever mode it was linked in.
  // A whole-program link of a built-in dispatcher takes its direct form (input_digests(mode)),
  // but the fallback from per-TU mode to one (LinkPlan::as_whole_fallback) the plain one: a
  // whole-program record may hold either.
  const std::vector<Digest> per_tu_inputs = plan.input_digests(LtoMode::per_tu);
  const std::vector<Digest> whole_inputs = plan.input_digests(LtoMode::whole);
  bool stale = false;
  for (const LinkRecord &l : package.manifest().links) {
    if (l.arch != c.arch || l.bridge != plan.bridge || l.dispatcher != plan.dispatcher)
      continue;
    if (plan.settings.lto_mode && l.lto && *l.lto != *plan.settings.lto_mode) {
      c.notes.push_back(cat("the package's cubin for ", what, " was linked ", lto_mode_name(*l.lto),
                            ", not ", lto_mode_name(*plan.settings.lto_mode), ": not used"));
      continue;
    }
    if (l.inputs != per_tu_inputs && (l.lto == LtoMode::per_tu || l.inputs != whole_inputs)) {
      stale = true;
      continue;
    }
    auto bytes = package.read_blob(l.cubin);
    if (!bytes)
      return std::move(bytes).take_error();
    c.source = CubinSource::package;
    c.cubin.assign(bytes->begin(), bytes->end());
    c.record = l;
    c.ms = elapsed_ms();
    return c;
  }
  if (stale)
    c.warnings.push_back(cat("the package's cubin for ", what,
                             " was linked from other code than this runtime's bridge hooks and "
                             "dispatcher: not used"));

  // 2. The caches, verified as a link's result is, else a link.
  auto store = [&](const ArchLink &a) {
    return store_links(package.dir(), plan, std::span<const ArchLink>(&a, 1), trust);
  };
  auto take = [&](ArchLink a, CubinSource source) -> Expected<CubinChoice> {
    c.warnings.insert(c.warnings.end(), a.warnings.begin(), a.warnings.end());
    if (policy.store) {
      auto broken = store(a);
      if (!broken)
        return std::move(broken).take_error();
      if (auto w = broken_signatures_warning(package.dir().string(), *broken))
        c.warnings.push_back(std::move(*w));
    }
    c.source = source;
    c.cubin = std::move(a.cubin);
    c.record = std::move(*a.record);
    c.ms = elapsed_ms();
    return c;
  };
  const Status reachable = plan.check_target(arch);
  if (reachable) {
    // The local cache, the remote one, then (when allowed) a link, checked as cudaq-rt-link
    // checks it: one lookup, so that a miss costs one request to the remote cache.
    ArchLink a = link_arch(plan, arch, cache,
                           policy.allow_link ? OnCacheMiss::link : OnCacheMiss::return_unlinked);
    c.notes.insert(c.notes.end(), a.notes.begin(), a.notes.end());
    if (!a.fallback.empty())
      c.warnings.push_back(a.fallback);
    if (!a.units.empty()) {
      size_t cached = 0, shipped = 0, compiled = 0;
      for (const UnitLink &u : a.units) {
        cached += u.cache_hit && !u.shipped;
        shipped += u.shipped;
        compiled += u.compiled;
      }
      c.notes.push_back(cat("linked per TU: ", cached, " of ", a.units.size(),
                            " units from the cache, ", shipped, " shipped with cudaq-rt, ",
                            compiled, " compiled"));
    }
    if (a.error)
      return std::move(*a.error);
    if (a.record) {
      const CubinSource source = a.remote_hit  ? CubinSource::remote
                                 : a.cache_hit ? CubinSource::cache
                                               : CubinSource::link;
      return take(std::move(a), source);
    }
    c.warnings.insert(c.warnings.end(), a.warnings.begin(), a.warnings.end());
  }

  // 3. Nothing to load.
  if (!reachable)
    return make_error(plan.subject, "this GPU is ", c.arch, ": ", reachable.error().message);
  std::string linked;
  for (const LinkRecord &l : package.manifest().links)
    linked += cat(linked.empty() ? "" : ", ", l.arch, " (", l.bridge, ", ", l.dispatcher, ")");
  Error none = make_error(plan.subject, "no cubin for ", what, " in the package",
                          stale ? " that matches this runtime" : "",
                          " or the link cache, and linking "
                          "at load is off; the package has cubins for ",
                          linked.empty() ? std::string("no arch") : linked,
                          ": link it ahead of time for ", c.arch);
  if (policy.none_is_error)
    return none;
  c.found = false;
  c.why_not = none.str();
  return c;
}

} // namespace cudaq_rt
