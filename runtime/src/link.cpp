// Linking one arch, and storing what was linked in the package: the steps after plan_link
// (link_plan.cpp says what goes into a link and why).
//
// A cubin is checked before it is stored or cached: right arch, dispatch kernel defined, every
// handler global defined. A link that lost an export is an error, not a smaller module.
#include "cudaq_rt/link.h"

#include "cudaq_rt/atomic_file.h"
#include "cudaq_rt/cubin.h"
#include "cudaq_rt/nvjitlink.h"
#include "cudaq_rt/package.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <set>
#include <thread>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

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
  if (f.error_log.find("Unresolved extern") != std::string::npos ||
      f.error_log.find("ndefined reference") != std::string::npos)
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
  a.options = plan.options(arch);
  a.key = plan.key(arch);
  for (const LinkInput &in : plan.inputs)
    a.input_names.push_back(in.name);
  return a;
}

ArchLink link_arch(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache) {
  return link_arch(plan, arch, cache, LinkMiss::link);
}

ArchLink link_arch(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache,
                   LinkMiss on_miss) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  ArchLink a = describe_arch(plan, arch);
  if (auto st = plan.check_target(arch); !st) {
    a.error = st.error();
    return a;
  }
  LinkRecord rec;
  rec.arch = a.arch;
  rec.bridge = plan.bridge;
  rec.dispatcher = plan.dispatcher;
  rec.mode = plan.lto ? "lto" : "cubin";
  rec.options = a.options;
  rec.nvjitlink_version = plan.nvjitlink.version();
  rec.inputs = plan.input_digests();
  rec.cache_key = a.key.digest;
  LinkCache::RemoteLog remote_log;
  auto keep_log = [&] {
    a.notes.insert(a.notes.end(), remote_log.notes.begin(), remote_log.notes.end());
    a.warnings.insert(a.warnings.end(), remote_log.warnings.begin(), remote_log.warnings.end());
  };
  std::optional<CacheEntry> hit = cache.get(a.key);
  if (!hit)
    hit = cache.get_remote(
        a.key, [&](std::span<const uint8_t> cubin) { return verify_cubin(plan, arch, cubin); },
        remote_log);
  if (hit) {
    a.cache_hit = true;
    a.remote_hit = hit->remote;
    a.cubin = std::move(hit->cubin);
    rec.link_ms = hit->metadata.link_time_ms;
    a.info_log = hit->metadata.info_log;
  } else if (on_miss == LinkMiss::report) {
    keep_log();
    return a;
  } else {
    std::vector<NvJitLinkInput> inputs;
    for (const LinkInput &in : plan.inputs)
      inputs.push_back({in.name, in.bytes});
    NvJitLinkOutcome out = nvjitlink_link(a.options, inputs);
    if (!out.ok) {
      keep_log();
      a.error = explain_failure(plan.subject, a.arch, out.failure, a.details, plan.inputs);
      a.info_log = out.failure.info_log;
      return a;
    }
    a.cubin = std::move(out.result.cubin);
    rec.link_ms = out.result.link_ms;
    a.info_log = out.result.info_log;
  }
  if ((a.error = verify_cubin(plan, arch, a.cubin))) {
    keep_log();
    return a;
  }
  rec.cubin = sha256(a.cubin);
  rec.cubin_size = a.cubin.size();
  rec.created = now_utc();
  if (!a.cache_hit) {
    LinkMetadata md = LinkMetadata::from_key(a.key);
    md.info_log = a.info_log;
    md.link_time_ms = rec.link_ms;
    md.created = std::time(nullptr);
    // The cubin is good whatever the cache does: a full disk or a read-only shared cache costs
    // the next process a link, not this one its result.
    if (auto st = cache.put(a.key, a.cubin, md); !st)
      a.warnings.push_back("not cached: " + st.error().str());
    cache.put_remote(a.key, a.cubin, md, remote_log);
  }
  keep_log();
  a.record = std::move(rec);
  a.time_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return a;
}

Status store_links(const fs::path &package_path, const LinkPlan &plan,
                   std::span<const ArchLink> links) {
  const fs::path package = entry_path(package_path);
  auto lock = PackageLock::acquire(package);
  if (!lock)
    return std::move(lock).take_error();
  auto current = Package::open(package_path);
  if (!current)
    return std::move(current).take_error();
  if (packed_code(current->manifest()) != plan.packed)
    return make_error(plan.subject, "the package was replaced while it was being linked (by "
                                    "cudaq-rt-pack --force?): link it again");
  Manifest next_m = current->manifest();
  auto writer = PackageWriter::create(package);
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
      return st;
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
      return st;
  }
  drop_unused_link_additions(next_m);
  // Blobs written above are skipped by carry_blob; everything else the new manifest names
  // comes from the package as it is now, verified on the way.
  for (const ContainerRecord &c : next_m.containers)
    if (auto st = writer->carry_blob(*current, c.digest); !st)
      return st;
  for (const LinkRecord &l : next_m.links)
    if (auto st = writer->carry_blob(*current, l.cubin); !st)
      return st;
  std::sort(next_m.links.begin(), next_m.links.end(), [](const LinkRecord &a, const LinkRecord &b) {
    auto sm = [](const LinkRecord &l) { return parse_arch(l.arch).value_or(TargetArch{}).sm; };
    return std::tuple(sm(a), a.arch, a.bridge, a.dispatcher) <
           std::tuple(sm(b), b.arch, b.bridge, b.dispatcher);
  });
  return writer->commit(next_m, /*replace=*/true);
}

Expected<LinkReport> link_package(const LinkOptions &opt, const LinkCache &cache) {
  const std::string subject = opt.package.string();
  if (opt.archs.empty())
    return make_error(subject, "no target arch");
  std::vector<TargetArch> targets;
  for (const std::string &a : opt.archs) {
    auto t = parse_arch(a);
    if (!t)
      return make_error(subject, "unknown arch ", quote(a),
                        ": expected sm_NN with an optional a or f suffix, e.g. sm_90");
    if (std::none_of(targets.begin(), targets.end(),
                     [&](const TargetArch &x) { return x.str() == t->str(); }))
      targets.push_back(*t);
  }
  auto pkg = Package::open(opt.package);
  if (!pkg)
    return std::move(pkg).take_error();
  auto plan = plan_link(*pkg, opt.settings);
  if (!plan)
    return std::move(plan).take_error();
  // An arch out of reach stops everything before any link runs.
  for (const TargetArch &t : targets)
    if (auto st = plan->check_target(t); !st)
      return std::move(st).take_error();

  LinkReport report;
  report.package = opt.package;
  report.bridge = plan->bridge;
  report.dispatcher = plan->dispatcher;
  report.archs.resize(targets.size());
  if (opt.dry_run) {
    for (size_t i = 0; i < targets.size(); ++i)
      report.archs[i] = describe_arch(*plan, targets[i]);
    return report;
  }

  // One nvJitLink handle per thread, archs handed out in order.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < targets.size();)
      report.archs[i] = link_arch(*plan, targets[i], cache);
  };
  unsigned jobs = opt.jobs ? opt.jobs : std::max(1u, std::thread::hardware_concurrency());
  jobs = std::min<unsigned>(jobs, static_cast<unsigned>(targets.size()));
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < jobs; ++j)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();

  if (opt.save_temps)
    for (const ArchLink &a : report.archs)
      if (auto st = save_temps(*opt.save_temps, *plan, a); !st)
        return std::move(st).take_error();
  if (!report.ok() || !opt.store_in_package)
    return report;
  if (auto st = store_links(opt.package, *plan, report.archs); !st)
    return std::move(st).take_error();
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
    md.link_time_ms = l.link_ms;
    md.created = static_cast<int64_t>(std::time(nullptr));
    std::vector<uint8_t> entry = encode_cache_entry(l.cache_key, as_bytes(*cubin), md);
    p.bytes = entry.size();
    if (auto st = cache.push_remote(l.cache_key, entry); !st)
      p.error = make_error(package_path.string(), l.arch, ": ", st.error().message);
    out.push_back(std::move(p));
  }
  return out;
}

} // namespace cudaq_rt
