// Linking one arch, and storing what was linked in the package: the steps after plan_link
// (link_plan.cpp says what goes into a link and why).
//
// A cubin is checked before it is stored or cached: right arch, dispatch kernel defined, every
// handler global defined. A link that lost an export is an error, not a smaller module.
#include "link/link.h"
#include "link/recorded_link.h"

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

// The unit of direct calls in nvJitLink's log and messages.
constexpr const char *direct_calls_input_name = "direct calls (generated)";

Error explain_failure(const std::string &subject, const std::string &arch,
                      const NvJitLinkFailure &f, std::string &details,
                      const std::vector<LinkInput> &inputs) {
  std::string first_line = f.error_log.substr(0, f.error_log.find('\n'));
  details = f.error_log;
  if (!details.empty() && details.back() != '\n')
    details += '\n';
  details += "inputs:\n";
  for (const LinkInput &in : inputs)
    details +=
        cat("  ", in.name, "  ", in.digest.short_str(), "  (", describe_entries(in.entries), ")\n");
  std::string why;
  const bool unresolved = f.error_log.find("Unresolved extern") != std::string::npos ||
                          f.error_log.find("ndefined reference") != std::string::npos;
  // The unit of direct calls names each direct handler's cudaq_rt_handler_call__<name>: code whose
  // export record says version 2 without the macros that define it (a hand-written export) ends
  // here (ptxas: "Cannot take address of function ..."). The log names those functions for other
  // reasons too: a register count over the kernel's bounds is said first, as what it is.
  const size_t call = f.error_log.find(CUDAQ_RT_HANDLER_CALL_PREFIX);
  if (f.error_log.find("with max regcount of") != std::string::npos) {
    why = "a function the dispatch kernel calls needs more registers than the kernel's launch "
          "bounds leave a thread (make the function use fewer, or give the kernel fewer "
          "threads): ";
  } else if (call != std::string::npos) {
    const size_t start = call + std::strlen(CUDAQ_RT_HANDLER_CALL_PREFIX);
    size_t end = start;
    while (end < f.error_log.size() &&
           (std::isalnum(static_cast<unsigned char>(f.error_log[end])) || f.error_log[end] == '_'))
      ++end;
    why = cat("handler ", quote(f.error_log.substr(start, end - start)),
              " has an export record of version 2, which promises the function ",
              CUDAQ_RT_HANDLER_CALL_PREFIX,
              "<name> that a whole-program link calls, but its code "
              "does not define it (export it with CUDAQ_RT_EXPORT_HANDLER, or link per TU): ");
  } else if (unresolved)
    why = "unresolved symbol: ";
  else if (f.result == 13)
    why = "an input's LTO-IR is for a newer arch: ";
  return make_error(subject, arch, ": nvJitLink failed at ", f.stage, " (",
                    nvjitlink_result_name(f.result), "): ", why,
                    first_line.empty() ? "no error log" : first_line);
}

// Code a link added (an older bridge library's hooks, say) that no link record uses any more
// goes, and so do sources that nothing refers to then; what pack packed always stays.
void drop_unused_link_additions(Manifest &m) {
  std::set<Digest> used;
  for (const LinkRecord &l : m.links)
    used.insert(l.inputs.begin(), l.inputs.end());
  std::erase_if(m.containers,
                [&](const ContainerRecord &c) { return !c.packed() && !used.count(c.digest); });
  std::vector<bool> referenced(m.sources.size(), false);
  for (const ContainerRecord &c : m.containers)
    for (const Origin &o : c.origins)
      referenced[o.source] = true;
  for (const ExportEntry &e : m.exports)
    for (size_t s : e.sources)
      referenced[s] = true;
  std::vector<size_t> new_index(m.sources.size());
  std::vector<Source> kept;
  for (size_t i = 0; i < m.sources.size(); ++i)
    if (referenced[i]) {
      new_index[i] = kept.size();
      kept.push_back(std::move(m.sources[i]));
    }
  m.sources = std::move(kept);
  for (ContainerRecord &c : m.containers)
    for (Origin &o : c.origins)
      o.source = new_index[o.source];
  for (ExportEntry &e : m.exports)
    for (size_t &s : e.sources)
      s = new_index[s];
}

Status save_temps(const fs::path &root, const LinkPlan &plan, const ArchLink &a) {
  fs::path dir = root / a.arch;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(dir.string(), "cannot create: ", ec.message());
  for (size_t k = 0; k < plan.inputs.size(); ++k)
    if (auto st = write_file_atomic(
            dir / cat(k, "-", plan.inputs[k].digest.hex().substr(0, 12), ".fatbin"),
            plan.inputs[k].bytes);
        !st)
      return st;
  if (plan.direct_calls) {
    if (auto st = write_file_atomic(dir / "direct_calls.cu", as_bytes(plan.direct_calls->source()));
        !st)
      return st;
    auto ltoir = plan.direct_calls->ltoir(plan.subject);
    if (!ltoir)
      return ltoir.error();
    if (auto st = write_file_atomic(dir / "direct_calls.ltoir", *ltoir); !st)
      return st;
  }
  std::string opts;
  for (const std::string &o : a.options)
    opts += o + "\n";
  std::string log = a.info_log + a.details;
  for (auto [name, text] : {std::pair{"options.txt", &opts}, std::pair{"nvjitlink.log", &log}})
    if (auto st = write_file_atomic(dir / name, as_bytes(*text)); !st)
      return st;
  if (!a.cubin.empty())
    if (auto st = write_file_atomic(dir / "module.cubin", a.cubin); !st)
      return st;
  return Status::ok();
}

// The cubin must be what the runtime will look for.
std::optional<Error> verify_cubin(const LinkPlan &plan, const TargetArch &arch,
                                  std::span<const uint8_t> cubin) {
  auto info = read_cubin(cubin, cat(plan.subject, ": ", arch.str()));
  if (!info)
    return info.error();
  if (info->arch != arch.sm)
    return make_error(plan.subject, arch.str(), ": nvJitLink produced a cubin for sm_", info->arch);
  if (info->relocatable)
    return make_error(plan.subject, arch.str(),
                      ": nvJitLink produced a relocatable cubin, not a module a GPU can load");
  if (!info->functions.count(plan.kernel))
    return make_error(plan.subject, arch.str(),
                      ": the linked cubin does not define the dispatch kernel ", plan.kernel);
  std::string lost;
  for (const std::string &s : plan.handler_symbols)
    if (!info->variables.count(s))
      lost += (lost.empty() ? "" : ", ") + s;
  if (!lost.empty())
    return make_error(plan.subject, arch.str(), ": the link lost exported handler globals: ", lost);
  return std::nullopt;
}

} // namespace

bool LinkReport::ok() const {
  return std::all_of(archs.begin(), archs.end(), [](const ArchLink &a) { return !a.error; });
}

ArchLink describe_arch(const LinkPlan &plan, const TargetArch &arch) {
  ArchLink a;
  a.arch = arch.str();
  a.mode = plan.mode;
  a.options = plan.options(arch);
  a.key = plan.key(arch);
  for (const LinkInput &in : plan.inputs)
    a.input_names.push_back(in.name);
  if (plan.direct_calls && !a.input_names.empty()) // where add_direct_calls puts it
    a.input_names.insert(a.input_names.begin() + 1, cat(direct_calls_input_name, " ",
                                                        plan.direct_calls->digest().short_str()));
  return a;
}

ArchLink link_arch(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache,
                   OnCacheMiss on_miss) {
  return std::move(link_archs(plan, std::span<const TargetArch>(&arch, 1), cache, 0, on_miss)[0]);
}

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

// One arch on its way through link_archs.
struct ArchLinkJob {
  const TargetArch *arch = nullptr;
  Clock::time_point t0;
  ArchLink link;
  LinkRecord record;
  LinkCache::RemoteLog remote_log;
  bool done = false;                         // a result or an error
  std::vector<std::vector<uint8_t>> objects; // per-TU mode: each unit's relocatable cubin

  void keep_log() {
    link.notes.insert(link.notes.end(), remote_log.notes.begin(), remote_log.notes.end());
    link.warnings.insert(link.warnings.end(), remote_log.warnings.begin(),
                         remote_log.warnings.end());
    remote_log = {};
  }
};

// The record's fields that do not depend on the outcome; false when the arch is out of reach.
bool begin_arch(const LinkPlan &plan, ArchLinkJob &j) {
  j.t0 = Clock::now();
  j.link = describe_arch(plan, *j.arch);
  j.link.mode = plan.mode;
  if (auto st = plan.check_target(*j.arch); !st) {
    j.link.error = st.error();
    j.done = true;
    return false;
  }
  j.record.arch = j.link.arch;
  j.record.bridge = plan.bridge;
  j.record.dispatcher = plan.dispatcher;
  j.record.lto = plan.lto ? std::optional<LtoMode>(plan.mode) : std::nullopt;
  j.record.options = j.link.options;
  j.record.nvjitlink_version = plan.nvjitlink.version();
  j.record.inputs = plan.input_digests();
  j.record.cache_key = j.link.key.digest;
  return true;
}

// The module from the local cache, else the remote one.
bool lookup_module(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j) {
  std::optional<CacheEntry> hit = cache.get(j.link.key);
  if (!hit)
    hit = cache.get_remote(
        j.link.key,
        [&](std::span<const uint8_t> cubin) { return verify_cubin(plan, *j.arch, cubin); },
        j.remote_log);
  if (!hit)
    return false;
  j.link.cache_hit = true;
  j.link.remote_hit = hit->remote;
  j.link.cubin = std::move(hit->cubin);
  j.record.link_ms = hit->metadata.link_time_ms;
  j.link.info_log = hit->metadata.info_log;
  return true;
}

// Verifies what was found or linked, caches what was linked, and fills in the record.
void finish_arch(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j) {
  j.done = true;
  if ((j.link.error = verify_cubin(plan, *j.arch, j.link.cubin))) {
    j.keep_log();
    return;
  }
  j.record.cubin = sha256(j.link.cubin);
  j.record.cubin_size = j.link.cubin.size();
  j.record.created = now_utc();
  if (!j.link.cache_hit) {
    LinkMetadata md = LinkMetadata::from_key(j.link.key);
    md.info_log = j.link.info_log;
    md.link_time_ms = j.record.link_ms;
    md.created = std::time(nullptr);
    // The cubin is good whatever the cache does: a full disk or a read-only shared cache costs
    // the next process a link, not this one its result.
    if (auto st = cache.put(j.link.key, j.link.cubin, md); !st)
      j.link.warnings.push_back("not cached: " + st.error().str());
    cache.put_remote(j.link.key, j.link.cubin, md, j.remote_log);
  }
  j.keep_log();
  j.link.record = std::move(j.record);
  j.link.time_ms = ms_since(j.t0);
}

void fail_link(const LinkPlan &plan, ArchLinkJob &j, const NvJitLinkFailure &f, std::string what,
               const std::vector<LinkInput> &inputs) {
  j.keep_log();
  j.link.error = explain_failure(plan.subject, std::move(what), f, j.link.details, inputs);
  j.link.info_log += f.info_log;
  j.done = true;
}

// The plan's unit of direct calls, if it has one, right after the dispatcher that calls it
// (inputs[0], in a whole-program link or the dispatcher's unit).
Status add_direct_calls(const LinkPlan &plan, std::vector<NvJitLinkInput> &inputs) {
  if (!plan.direct_calls || inputs.empty())
    return Status::ok();
  auto ltoir = plan.direct_calls->ltoir(plan.subject);
  if (!ltoir)
    return ltoir.error();
  inputs.insert(inputs.begin() + 1, {direct_calls_input_name, *ltoir, false, true});
  return Status::ok();
}

// Whole mode: one link of every input.
void link_whole(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j) {
  std::vector<NvJitLinkInput> inputs;
  for (const LinkInput &in : plan.inputs)
    inputs.push_back({in.name, in.bytes});
  if (auto st = add_direct_calls(plan, inputs); !st) {
    j.link.error = st.error();
    j.done = true;
    return;
  }
  NvJitLinkOutcome out = nvjitlink_link(j.link.options, inputs);
  if (!out.ok)
    return fail_link(plan, j, out.failure, j.link.arch, plan.inputs);
  j.link.cubin = std::move(out.result.cubin);
  j.record.link_ms = out.result.link_ms;
  j.link.info_log = out.result.info_log;
  finish_arch(plan, cache, j);
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

// Why the compiled units cannot be linked together: a symbol two of them define (strong, global),
// named with both units; nothing when none is. nvJitLink 13.0 dies with SIGSEGV on such a link
// (a link at load would take the host program with it), so it never sees one.
std::optional<Error> clashing_definitions(const LinkPlan &plan, const ArchLinkJob &j) {
  std::map<std::string, size_t> owner;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    if (!plan.units[u].compile)
      continue;
    auto defined = strong_definitions(j.objects[u], cat(plan.subject, ": ", plan.units[u].name));
    if (!defined)
      return std::move(defined).take_error();
    for (std::string &symbol : *defined) {
      auto [at, first] = owner.emplace(std::move(symbol), u);
      if (!first)
        return make_error(plan.subject, j.link.arch, ": the device symbol '", at->first,
                          "' is defined by two translation units, ", plan.units[at->second].name,
                          " and ", plan.units[u].name,
                          " (one program may define it once: make one static, or rename it)");
    }
  }
  return std::nullopt;
}

// Per-TU mode: the final link of the units' cubins (and the fatbins of units without LTO-IR).
void link_units(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache,
                ArchLinkJob &j, Clock::time_point units_t0) {
  if ((j.link.error = clashing_definitions(plan, j))) {
    j.objects.clear();
    j.done = true;
    return;
  }
  std::vector<NvJitLinkInput> inputs;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const LinkUnit &unit = plan.units[u];
    if (unit.compile) {
      inputs.push_back({unit.name, j.objects[u], true});
      continue;
    }
    for (size_t k = unit.first; k < unit.first + unit.count; ++k)
      inputs.push_back({plan.inputs[k].name, plan.inputs[k].bytes});
  }
  NvJitLinkOutcome out = nvjitlink_link(plan.final_options(arch), inputs);
  if (!out.ok)
    return fail_link(plan, j, out.failure, j.link.arch, plan.inputs);
  j.link.cubin = std::move(out.result.cubin);
  j.objects.clear();
  // The module's link time is the wall time from its units (compiled in parallel with every
  // other arch's) to its final link.
  j.link.final_link_ms = out.result.link_ms;
  j.record.link_ms = ms_since(units_t0);
  j.link.info_log = out.result.info_log + j.link.info_log;
  finish_arch(plan, cache, j);
}

} // namespace

namespace {

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
    steps.done(j.link.arch);
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
    steps.done(j.link.arch + " final link");
  });
  return results();
}

namespace {
// The keys whose signature files are over the package's manifest as it is, in key order.
Expected<std::vector<KeyId>> current_signers(const Package &package) {
  auto files = package.signature_files();
  if (!files)
    return std::move(files).take_error();
  std::vector<KeyId> keys;
  for (const auto &[name, text] : *files) {
    auto sig = PackageSignature::parse(text, name);
    if (sig && sig->manifest == package.manifest_digest())
      keys.push_back(sig->key);
  }
  return keys;
}
} // namespace

std::optional<std::string> broken_signatures_warning(const std::string &package,
                                                     const std::vector<KeyId> &keys) {
  if (keys.empty())
    return std::nullopt;
  std::string names;
  for (const KeyId &k : keys)
    names += cat(names.empty() ? "" : ", ", k.short_str());
  const bool one = keys.size() == 1;
  return make_error(package, "the stored links changed its manifest: the signature",
                    one ? " of key " : "s of keys ", names,
                    one ? " no longer holds" : " no longer hold", " (sign it again: cudaq-rt-link ",
                    escape(package), " --sign KEY)")
      .str();
}

Expected<std::vector<KeyId>> store_links(const fs::path &package_path, const LinkPlan &plan,
                                         std::span<const ArchLink> links, const TrustPolicy &trust,
                                         BlobEncoding encoding) {
  // The records' time (cudaq-rt-run --store comes here without check_link_options).
  if (auto epoch = source_date_epoch(); !epoch)
    return std::move(epoch).take_error();
  const fs::path package = absolute_normal_path(package_path);
  auto lock = PackageLock::acquire(package);
  if (!lock)
    return std::move(lock).take_error();
  auto current = Package::open(package_path);
  if (!current)
    return std::move(current).take_error();
  if (trust.trusted)
    if (auto key = verify_package(*current, *trust.trusted); !key)
      return std::move(key).take_error();
  if (packed_code(current->manifest()) != plan.packed)
    return make_error(plan.subject, "the package was replaced while it was being linked (by "
                                    "cudaq-rt-pack --force?): link it again");
  Manifest next_m = current->manifest();
  auto writer = PackageWriter::create(package, encoding);
  if (!writer)
    return std::move(writer).take_error();
  for (NewContainer nc : plan.new_containers) {
    if (nc.source) {
      auto same = std::find_if(next_m.sources.begin(), next_m.sources.end(),
                               [&](const Source &s) { return s.digest == nc.source->digest; });
      size_t index = static_cast<size_t>(same - next_m.sources.begin());
      if (same == next_m.sources.end())
        next_m.sources.push_back(*nc.source);
      for (Origin &o : nc.record.origins)
        o.source = index;
    }
    const LinkInput &in =
        *std::find_if(plan.inputs.begin(), plan.inputs.end(),
                      [&](const LinkInput &x) { return x.digest == nc.record.digest; });
    if (auto st = writer->add_blob(nc.record.digest, in.bytes); !st)
      return std::move(st).take_error();
    if (!next_m.find_container(nc.record.digest))
      next_m.containers.push_back(nc.record);
  }
  for (const ArchLink &a : links) {
    const LinkRecord &rec = *a.record;
    std::erase_if(next_m.links, [&](const LinkRecord &l) {
      return l.arch == rec.arch && l.bridge == rec.bridge && l.dispatcher == rec.dispatcher;
    });
    next_m.links.push_back(rec);
    if (auto st = writer->add_blob(rec.cubin, a.cubin); !st)
      return std::move(st).take_error();
  }
  drop_unused_link_additions(next_m);
  // Blobs written above are skipped by carry_blob; everything else the new manifest names
  // comes from the package as it is now, verified on the way.
  for (const ContainerRecord &c : next_m.containers)
    if (auto st = writer->carry_blob(*current, c.digest); !st)
      return std::move(st).take_error();
  for (const LinkRecord &l : next_m.links)
    if (auto st = writer->carry_blob(*current, l.cubin); !st)
      return std::move(st).take_error();
  if (next_m.recipe)
    for (const RecipeInput &in : next_m.recipe->inputs)
      if (auto st = writer->carry_blob(*current, in.digest); !st)
        return std::move(st).take_error();
  std::sort(next_m.links.begin(), next_m.links.end(), [](const LinkRecord &a, const LinkRecord &b) {
    auto sm = [](const LinkRecord &l) {
      auto arch = parse_arch(l.arch);
      return arch ? arch->sm : 0;
    };
    return std::tuple(sm(a), a.arch, a.bridge, a.dispatcher) <
           std::tuple(sm(b), b.arch, b.bridge, b.dispatcher);
  });
  if (auto st = writer->carry_signatures(*current); !st)
    return std::move(st).take_error();
  std::vector<const SigningKey *> signers;
  if (trust.signer)
    signers.push_back(trust.signer.get());
  auto held = current_signers(*current);
  if (!held)
    return std::move(held).take_error();
  if (auto st = writer->commit(next_m, /*replace=*/true, signers); !st)
    return std::move(st).take_error();
  auto written = Package::open(package_path);
  if (!written)
    return std::move(written).take_error();
  std::vector<KeyId> broken;
  if (written->manifest_digest() != current->manifest_digest())
    for (const KeyId &k : *held)
      if (!trust.signer || !(trust.signer->id() == k))
        broken.push_back(k);
  return broken;
}

Status check_link_options(const LinkOptions &opt) {
  if (opt.archs.empty())
    return make_error(opt.package.string(), "no target arch: give --arch sm_NN[,sm_NN...]");
  return Status::ok();
}

Expected<LinkReport> link_package(const LinkOptions &opt, const LinkCache &cache) {
  if (auto st = check_link_options(opt); !st)
    return std::move(st).take_error();
  if (auto epoch = source_date_epoch(); !epoch) // the time the link records take
    return std::move(epoch).take_error();
  const std::vector<TargetArch> &targets = opt.archs;
  auto pkg = Package::open(opt.package);
  if (!pkg)
    return std::move(pkg).take_error();
  // Under --trust, nothing links from a package no trusted key signed.
  std::optional<KeyId> verified_by;
  if (const TrustedKeys *trusted = cache.trust().trusted.get()) {
    auto key = verify_package(*pkg, *trusted);
    if (!key)
      return std::move(key).take_error();
    verified_by = *key;
  }
  if (pkg->manifest().recipe) {
    auto report = link_recording(*pkg, opt, cache);
    if (report)
      report->verified_by = verified_by;
    return report;
  }
  auto plan = plan_link(*pkg, opt.settings);
  if (!plan)
    return std::move(plan).take_error();
  // An arch out of reach stops everything before any link runs.
  for (const TargetArch &t : targets)
    if (auto st = plan->check_target(t); !st)
      return std::move(st).take_error();

  LinkReport report;
  report.package = opt.package;
  report.verified_by = verified_by;
  report.bridge = plan->bridge;
  report.dispatcher = plan->dispatcher;
  report.mode = plan->mode;
  report.archs.resize(targets.size());
  if (opt.dry_run) {
    for (size_t i = 0; i < targets.size(); ++i)
      report.archs[i] = describe_arch(*plan, targets[i]);
    return report;
  }

  // One nvJitLink handle per thread, archs (and per-TU units) handed out in order.
  report.archs = link_archs(*plan, targets, cache, opt.jobs, OnCacheMiss::link, opt.progress);

  if (opt.save_temps)
    for (const ArchLink &a : report.archs)
      if (auto st = save_temps(*opt.save_temps, *plan, a); !st)
        return std::move(st).take_error();
  if (!report.ok() || !opt.store_in_package)
    return report;
  auto broken = store_links(opt.package, *plan, report.archs, cache.trust(),
                            opt.compress ? BlobEncoding::zstd : BlobEncoding::identity);
  if (!broken)
    return std::move(broken).take_error();
  report.unsigned_by = std::move(*broken);
  if (const SigningKey *signer = cache.trust().signer.get())
    report.signed_by = signer->id();
  return report;
}

} // namespace cudaq_rt

namespace cudaq_rt {

Expected<std::vector<PushedLink>> push_links(const fs::path &package_path, const LinkCache &cache) {
  if (!cache.remote())
    return make_error(package_path.string(),
                      "no remote cache to push to: give --remote-cache URL or set "
                      "CUDAQ_RT_REMOTE_CACHE");
  auto pkg = Package::open(package_path);
  if (!pkg)
    return std::move(pkg).take_error();
  // Under --trust, only a signed package's cubins go to the fleet.
  if (const TrustedKeys *trusted = cache.trust().trusted.get())
    if (auto key = verify_package(*pkg, *trusted); !key)
      return std::move(key).take_error();
  std::vector<PushedLink> out;
  for (const LinkRecord &l : pkg->manifest().links) {
    PushedLink p{l.arch, l.cache_key, 0, std::nullopt};
    auto cubin = pkg->read_blob(l.cubin);
    if (!cubin)
      return std::move(cubin).take_error();
    // The entry the link stored, rebuilt from the record: the same key, cubin and metadata, so
    // that a fleet machine that fetches it gets what its own link would have given.
    LinkMetadata md;
    md.arch = l.arch;
    md.options = normalize_link_options(l.options);
    md.nvjitlink_version = l.nvjitlink_version;
    md.inputs = l.inputs;
    md.form = LinkedForm{l.lto.value_or(LtoMode::whole)};
    // A recording's links are keyed as the interposer keys them (recorded_link.h).
    if (pkg->manifest().recipe)
      md.form = LinkedForm{LtoMode::whole, false, true};
    md.link_time_ms = l.link_ms;
    md.created = static_cast<int64_t>(std::time(nullptr));
    std::vector<uint8_t> entry = cache.encode(l.cache_key, as_bytes(*cubin), md);
    p.bytes = entry.size();
    if (auto st = cache.push_remote(l.cache_key, entry); !st)
      p.error = make_error(package_path.string(), l.arch, ": ", st.error().message);
    out.push_back(std::move(p));
  }
  return out;
}

} // namespace cudaq_rt
