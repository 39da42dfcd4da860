// The archs' links scheduled (link_archs, link.h): every arch's module looked up, then in whole
// mode linked at once on a miss, in per-TU mode every unit of every arch that missed compiled (or
// found: the caller's cache, then the units the build ships) in parallel, then each arch's final
// link. The threads take make's jobserver tokens (base/jobserver.h) beyond the first.
#include "link/arch_link.h"

#include "base/atomic_file.h"
#include "base/clock.h"
#include "base/jobserver.h"
#include "cudaq_rt/bridge.h"
#include "cudaq_rt/exports.h"
#include "formats/cubin.h"
#include "link/nvjitlink.h"
#include "package/package.h"
#include "package/signatures.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// Runs work(i) for every i < n on up to `jobs` threads (0: one per core), in order of i. Under
// make's jobserver, every thread but the first runs an item only with a token of make's.
void parallel_for(size_t n, unsigned jobs, const std::function<void(size_t)> &work) {
  std::atomic<size_t> next{0};
  Jobserver *js = process_jobserver();
  auto worker = [&](bool first) {
    for (;;) {
      if (js && !first && !js->acquire([&] { return next.load() < n; }))
        return;
      const size_t i = next.fetch_add(1);
      if (i < n)
        work(i);
      if (js && !first)
        js->release();
      if (i >= n)
        return;
    }
  };
  jobs = jobs ? jobs : std::max(1u, std::thread::hardware_concurrency());
  jobs = static_cast<unsigned>(std::min<size_t>(jobs, n));
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < jobs; ++j)
    threads.emplace_back(worker, false);
  worker(true);
  for (std::thread &t : threads)
    t.join();
}

// A unit's relocatable cubin must be one, for the arch, and the dispatcher's must hold the kernel.
std::optional<Error> verify_unit(const LinkPlan &plan, const TargetArch &arch, const LinkUnit &u,
                                 std::span<const uint8_t> object) {
  const std::string subject = cat(plan.subject, ": ", arch.str(), ": ", u.name);
  auto info = read_cubin(object, subject);
  if (!info)
    return info.error();
  if (info->arch != arch.sm || !info->relocatable)
    return make_error(subject, "nvJitLink gave ", info->relocatable ? "" : "a non-relocatable ",
                      "cubin for sm_", info->arch, " where a relocatable one for ", arch.str(),
                      " was asked for");
  if (u.dispatcher && !info->functions.count(plan.kernel))
    return make_error(subject, "the compiled unit does not define the dispatch kernel ",
                      plan.kernel);
  return std::nullopt;
}

// Per-TU mode: one unit of one arch, from the local cache or compiled (and cached). The remote
// cache holds modules only: a unit is worth a request only where the module missed anyway.
struct UnitOutcome {
  UnitLink link;
  std::vector<uint8_t> object;
  std::string info_log;
  std::optional<NvJitLinkFailure> failure;
  std::optional<Error> error;
  std::string warning;
};

// The units the build compiled ahead of time (tools/CMakeLists.txt): the built-in dispatchers
// with the installed bridges' hooks, for the common archs, in a link cache directory `units/`
// beside the bridges (lib/cudaq-rt/units). Read when the caller's cache misses, never written;
// an entry is verified as any cache entry is, and then as a unit. CUDAQ_RT_NO_SHIPPED_UNITS=1
// ignores them (to measure a link without them).
const LinkCache *shipped_units() {
  static const std::optional<LinkCache> store = []() -> std::optional<LinkCache> {
    if (const char *off = std::getenv("CUDAQ_RT_NO_SHIPPED_UNITS"); off && *off && *off != '0')
      return std::nullopt;
    for (const fs::path &bridges : bridge_search_path()) {
      fs::path dir = (bridges / ".." / "units").lexically_normal();
      std::error_code ec;
      if (!fs::is_directory(dir / "v1", ec))
        continue;
      CacheConfig config;
      config.dir = dir;
      config.max_bytes = 0;
      if (auto cache = LinkCache::open(config))
        return std::move(*cache);
    }
    return std::nullopt;
  }();
  return store ? &*store : nullptr;
}

UnitOutcome compile_unit(const LinkPlan &plan, const TargetArch &arch, const LinkUnit &u,
                         const LinkCache &cache) {
  const auto t0 = Clock::now();
  UnitOutcome o;
  o.link.name = u.name;
  if (!u.compile)
    return o;
  LinkKey key = plan.unit_key(arch, u);
  o.link.key = key.digest;
  std::optional<CacheEntry> hit = cache.get(key);
  if (hit && verify_unit(plan, arch, u, hit->cubin))
    hit.reset();
  if (const LinkCache *shipped = u.dispatcher && !hit ? shipped_units() : nullptr) {
    hit = shipped->get(key);
    if (hit && verify_unit(plan, arch, u, hit->cubin))
      hit.reset();
    o.link.shipped = hit.has_value();
    if (hit)
      if (auto st = cache.put(key, hit->cubin, hit->metadata); !st)
        o.warning = cat("not cached: ", u.name, ": ", st.error().str());
  }
  if (hit) {
    o.link.cache_hit = true;
    o.object = std::move(hit->cubin);
    o.info_log = hit->metadata.info_log;
  } else {
    std::vector<NvJitLinkInput> inputs;
    for (size_t k = u.first; k < u.first + u.count; ++k)
      inputs.push_back({plan.inputs[k].name, plan.inputs[k].bytes});
    if (auto st = u.dispatcher ? add_direct_calls(plan, inputs) : Status::ok(); !st) {
      o.error = st.error();
      return o;
    }
    NvJitLinkOutcome out = nvjitlink_link(plan.unit_options(arch), inputs);
    if (!out.ok) {
      o.failure = std::move(out.failure);
      return o;
    }
    if ((o.error = verify_unit(plan, arch, u, out.result.cubin)))
      return o;
    o.link.compiled = true;
    o.object = std::move(out.result.cubin);
    o.info_log = std::move(out.result.info_log);
    LinkMetadata md = LinkMetadata::from_key(key);
    md.info_log = o.info_log;
    md.link_time_ms = out.result.link_ms;
    if (auto st = cache.put(key, o.object, md); !st)
      o.warning = cat("not cached: ", u.name, ": ", st.error().str());
  }
  o.link.size = o.object.size();
  o.link.time_ms = ms_since(t0);
  return o;
}

// The steps of a link_archs, counted for its LinkProgress.
// Steps are counted from the start, but reported only from `show()` on, once the total is known:
// per TU, the lookups that decide which units to compile are counted silently, so that the first
// line already says how many steps there are ("[2/14]", never "[1/2]" then "[3/14]").
class StepCounter {
public:
  explicit StepCounter(const LinkProgress &report) : report_(report) {}
  void expect(size_t steps) {
    std::lock_guard<std::mutex> lock(mutex_);
    total_ += steps;
  }
  // From now on each step is reported; the first report says where the link stands.
  void show() {
    std::lock_guard<std::mutex> lock(mutex_);
    shown_ = true;
    if (report_)
      report_(done_, std::max(total_, done_), "");
  }
  void done(const std::string &step) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    if (report_ && shown_)
      report_(done_, std::max(total_, done_), step);
  }

private:
  const LinkProgress &report_;
  std::mutex mutex_;
  size_t done_ = 0, total_ = 0;
  bool shown_ = false;
};

} // namespace

std::vector<ArchLink> link_archs(const LinkPlan &plan, std::span<const TargetArch> archs,
                                 const LinkCache &cache, unsigned jobs, OnCacheMiss on_miss,
                                 const LinkProgress &progress) {
  if (on_miss == OnCacheMiss::link && plan.has_deferred_inputs()) {
    // The caches first: the inputs are fetched only for the archs that must be linked (which
    // costs those a second lookup, a remote cache's miss included).
    std::vector<ArchLink> out =
        link_archs(plan, archs, cache, jobs, OnCacheMiss::return_unlinked, progress);
    std::vector<size_t> missed;
    std::vector<TargetArch> targets;
    for (size_t i = 0; i < out.size(); ++i)
      if (!out[i].record && !out[i].error) {
        missed.push_back(i);
        targets.push_back(archs[i]);
      }
    if (missed.empty())
      return out;
    auto full = plan.with_inputs();
    if (!full) {
      for (size_t i : missed)
        out[i].error = full.error();
      return out;
    }
    std::vector<ArchLink> linked =
        link_archs(*full, targets, cache, jobs, OnCacheMiss::link, progress);
    for (size_t k = 0; k < missed.size(); ++k)
      out[missed[k]] = std::move(linked[k]);
    return out;
  }
  StepCounter steps(progress);
  steps.expect(archs.size());
  // Whole, every step is an arch's; per TU, the units to compile are known after the lookups.
  if (plan.mode == LtoMode::whole || on_miss == OnCacheMiss::return_unlinked)
    steps.show();
  std::vector<ArchLinkJob> job(archs.size());
  for (size_t i = 0; i < archs.size(); ++i)
    job[i].arch = &archs[i];
  auto results = [&] {
    std::vector<ArchLink> out;
    for (ArchLinkJob &j : job) {
      if (!j.done)
        j.keep_log();
      out.push_back(std::move(j.link));
    }
    return out;
  };

  // The modules, from the caches; in whole mode, linked right away on a miss.
  parallel_for(archs.size(), jobs, [&](size_t i) {
    ArchLinkJob &j = job[i];
    if (!begin_arch(plan, j))
      return;
    if (lookup_module(plan, cache, j))
      finish_arch(plan, cache, j);
    else if (plan.mode == LtoMode::whole && on_miss == OnCacheMiss::link)
      link_whole(plan, cache, j);
    steps.done(j.link.arch.str());
  });
  std::vector<size_t> missed;
  for (size_t i = 0; i < job.size(); ++i)
    if (!job[i].done)
      missed.push_back(i);
  if (missed.empty() || on_miss == OnCacheMiss::return_unlinked)
    return results();

  // Per-TU mode needs an nvJitLink that compiles a unit alone; without one, the whole program.
  if (const std::string why = nvjitlink_unit_refusal(); !why.empty()) {
    const LinkPlan whole = plan.as_whole_fallback();
    std::vector<TargetArch> targets;
    for (size_t i : missed)
      targets.push_back(*job[i].arch);
    std::vector<ArchLink> linked = link_archs(whole, targets, cache, jobs, on_miss, progress);
    for (size_t k = 0; k < missed.size(); ++k) {
      ArchLinkJob &j = job[missed[k]];
      j.keep_log();
      linked[k].notes.insert(linked[k].notes.begin(), j.link.notes.begin(), j.link.notes.end());
      linked[k].warnings.insert(linked[k].warnings.begin(), j.link.warnings.begin(),
                                j.link.warnings.end());
      linked[k].fallback = cat("per-TU link unavailable (", why, "): linked as a whole program");
      j.link = std::move(linked[k]);
      j.done = true;
    }
    return results();
  }

  // Every unit of every arch that missed, then each arch's final link.
  const size_t units = plan.units.size();
  const auto units_t0 = Clock::now();
  std::vector<UnitOutcome> compiled(missed.size() * units);
  steps.expect(compiled.size() + missed.size());
  steps.show();
  parallel_for(compiled.size(), jobs, [&](size_t t) {
    const TargetArch &arch = *job[missed[t / units]].arch;
    compiled[t] = compile_unit(plan, arch, plan.units[t % units], cache);
    steps.done(cat(arch.str(), " ", plan.units[t % units].name));
  });
  for (size_t k = 0; k < missed.size(); ++k) {
    ArchLinkJob &j = job[missed[k]];
    j.objects.resize(units);
    for (size_t u = 0; u < units; ++u) {
      UnitOutcome &o = compiled[k * units + u];
      if (!o.warning.empty())
        j.link.warnings.push_back(o.warning);
      if (!o.info_log.empty())
        j.link.info_log += cat(plan.units[u].name, ":\n", o.info_log);
      j.link.units.push_back(o.link);
      j.objects[u] = std::move(o.object);
      if (j.done)
        continue;
      const LinkUnit &unit = plan.units[u];
      if (o.failure) {
        std::vector<LinkInput> inputs(plan.inputs.begin() + static_cast<ptrdiff_t>(unit.first),
                                      plan.inputs.begin() +
                                          static_cast<ptrdiff_t>(unit.first + unit.count));
        fail_link(plan, j, *o.failure, cat(j.link.arch, ": ", unit.name), inputs);
      } else if (o.error) {
        j.keep_log();
        j.link.error = std::move(o.error);
        j.done = true;
      }
    }
  }
  parallel_for(missed.size(), jobs, [&](size_t k) {
    ArchLinkJob &j = job[missed[k]];
    if (!j.done)
      link_units(plan, *j.arch, cache, j, units_t0);
    steps.done(j.link.arch.str() + " final link");
  });
  return results();
}

} // namespace cudaq_rt
