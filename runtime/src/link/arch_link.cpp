// The link of one arch (arch_link.h): the record begun, the module looked up, linked whole or
// from its units' cubins, then checked, cached and recorded.
//
// A cubin is checked before it is stored or cached: right arch, dispatch kernel defined, every
// handler global defined. A link that lost an export is an error, not a smaller module.
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
        return make_error(plan.subject, j.link.arch.str(), ": the device symbol '", at->first,
                          "' is defined by two translation units, ", plan.units[at->second].name,
                          " and ", plan.units[u].name,
                          " (one program may define it once: make one static, or rename it)");
    }
  }
  return std::nullopt;
}

} // namespace

ArchLink describe_arch(const LinkPlan &plan, const TargetArch &arch) {
  ArchLink a;
  a.arch = arch;
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
    return fail_link(plan, j, out.failure, j.link.arch.str(), plan.inputs);
  j.link.cubin = std::move(out.result.cubin);
  j.record.link_ms = out.result.link_ms;
  j.link.info_log = out.result.info_log;
  finish_arch(plan, cache, j);
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
    return fail_link(plan, j, out.failure, j.link.arch.str(), plan.inputs);
  j.link.cubin = std::move(out.result.cubin);
  j.objects.clear();
  // The module's link time is the wall time from its units (compiled in parallel with every
  // other arch's) to its final link.
  j.link.final_link_ms = out.result.link_ms;
  j.record.link_ms = ms_since(units_t0);
  j.link.info_log = out.result.info_log + j.link.info_log;
  finish_arch(plan, cache, j);
}

} // namespace cudaq_rt
