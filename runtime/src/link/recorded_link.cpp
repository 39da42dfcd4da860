#include "link/recorded_link.h"

#include "base/clock.h"
#include "link/nvjitlink.h"
#include "package/package.h"

#include <chrono>
#include <ctime>
#include <thread>

namespace cudaq_rt {
namespace {

struct Recording {
  const LinkRecipe &recipe;
  std::vector<std::string> blobs; // the inputs' bytes, verified
  std::vector<ApiLinkInput> keyed;
  NvJitLinkIdentity nvjitlink;
};

ArchLink link_one(const Recording &r, const TargetArch &arch, const LinkCache &cache,
                  bool dry_run) {
  auto t0 = Clock::now();
  ArchLink a;
  a.arch = arch;
  a.options = with_arch(r.recipe.options, arch);
  for (const RecipeInput &in : r.recipe.inputs)
    a.input_names.push_back(cat(nvjitlink_input_type_name(in.type), " ", in.name));
  auto key = api_link_key(a.options, r.nvjitlink, r.keyed);
  if (!key) {
    a.error = make_error("", "the recipe's options name no single -arch=sm_NN");
    return a;
  }
  a.key = *key;
  if (dry_run)
    return a;
  const bool ptx = r.recipe.output == "ptx";
  std::optional<CacheEntry> hit = cache.get(a.key);
  if (!hit && cache.remote()) {
    LinkCache::RemoteLog log;
    hit = cache.get_remote(
        a.key, [](std::span<const uint8_t>) -> std::optional<Error> { return std::nullopt; }, log);
    a.notes = std::move(log.notes);
    a.warnings = std::move(log.warnings);
  }
  LinkRecord rec;
  rec.arch = a.arch;
  rec.options = a.options;
  rec.nvjitlink_version = r.nvjitlink.version();
  for (const RecipeInput &in : r.recipe.inputs)
    rec.inputs.push_back(in.digest);
  rec.cache_key = a.key.digest;
  for (const std::string &o : a.options)
    if (o == "-lto")
      rec.lto = LtoMode::whole;
  if (hit && hit->metadata.form.api) {
    a.cache_hit = true;
    a.remote_hit = hit->remote;
    a.cubin = std::move(hit->cubin);
    a.info_log = hit->metadata.info_log;
    rec.link_ms = hit->metadata.link_time_ms;
  } else {
    std::vector<NvJitLinkInput> inputs;
    for (size_t i = 0; i < r.recipe.inputs.size(); ++i)
      inputs.push_back(
          {r.recipe.inputs[i].name, as_bytes(r.blobs[i]), false, false, r.recipe.inputs[i].type});
    NvJitLinkOutcome out = nvjitlink_link(a.options, inputs, ptx);
    if (!out.ok) {
      a.error = make_error("", "nvJitLink failed at ", out.failure.stage, ": ",
                           nvjitlink_result_name(out.failure.result));
      a.details = out.failure.error_log + out.failure.info_log;
      return a;
    }
    a.cubin = std::move(out.result.cubin);
    a.info_log = out.result.info_log;
    rec.link_ms = out.result.link_ms;
    LinkMetadata md = LinkMetadata::from_key(a.key);
    md.info_log = a.info_log;
    md.link_time_ms = rec.link_ms;
    if (auto st = cache.put(a.key, a.cubin, md); !st)
      a.warnings.push_back("not cached: " + st.error().str());
    LinkCache::RemoteLog log;
    cache.put_remote(a.key, a.cubin, md, log);
    a.notes.insert(a.notes.end(), log.notes.begin(), log.notes.end());
    a.warnings.insert(a.warnings.end(), log.warnings.begin(), log.warnings.end());
  }
  rec.cubin = sha256(a.cubin);
  rec.cubin_size = a.cubin.size();
  rec.created = now_utc();
  a.record = std::move(rec);
  a.time_ms = ms_since(t0);
  return a;
}

} // namespace

Expected<LinkReport> link_recording(const Package &pkg, const LinkOptions &opt,
                                    const LinkCache &cache) {
  const LinkRecipe &recipe = *pkg.manifest().recipe;
  auto identity = loaded_nvjitlink_identity();
  if (!identity)
    return identity.error();
  Recording r{recipe, {}, {}, *identity};
  for (const RecipeInput &in : recipe.inputs) {
    auto bytes = pkg.read_blob(in.digest);
    if (!bytes)
      return std::move(bytes).take_error();
    r.blobs.push_back(std::move(*bytes));
    r.keyed.push_back({in.type, in.digest});
  }
  LinkReport report;
  report.package = opt.package;
  report.archs.resize(opt.archs.size());
  // One nvJitLink handle per thread, as link_archs does.
  unsigned jobs = opt.jobs ? opt.jobs : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::min<size_t>(jobs, opt.archs.size()); ++t)
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < opt.archs.size();)
        report.archs[i] = link_one(r, opt.archs[i], cache, opt.dry_run);
    });
  for (std::thread &t : threads)
    t.join();
  if (opt.dry_run || !report.ok() || !opt.store_in_package)
    return report;
  // The records go in through the writers' one path; a recording has no packed code.
  LinkPlan plan;
  plan.subject = opt.package.string();
  plan.packed = packed_code(pkg.manifest());
  if (auto st = store_report(opt, plan, report); !st)
    return std::move(st).take_error();
  return report;
}

} // namespace cudaq_rt
