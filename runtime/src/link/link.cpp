// cudaq-rt-link's link of a package (link_package): the options checked, the package opened
// and verified under --trust, the plan made (link_plan.cpp says what goes into a link and why),
// every arch linked (arch_link.cpp, unit_link.cpp), the inputs saved with --save-temps, and the
// result stored (store_links.cpp). A recording (a manifest with a recipe) goes to recorded_link.cpp.
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

Status save_temps(const fs::path &root, const LinkPlan &plan, const ArchLink &a) {
  fs::path dir = root / a.arch.str();
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

} // namespace

bool LinkReport::ok() const {
  return std::all_of(archs.begin(), archs.end(), [](const ArchLink &a) { return !a.error; });
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
  if (const TrustedKeys *trusted = opt.trust.trusted.get()) {
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
  if (auto st = store_report(opt, *plan, report); !st)
    return std::move(st).take_error();
  return report;
}

} // namespace cudaq_rt
