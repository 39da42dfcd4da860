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
                                   const CubinPolicy &policy) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  CubinChoice c;
  c.arch = arch.str();
  const std::string what =
      cat(c.arch, " (bridge ", plan.bridge, ", dispatcher ", plan.dispatcher, ")");

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
    return store_links(package.dir(), plan, std::span<const ArchLink>(&a, 1), cache.trust());
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
