// The link of one arch, in the steps link_archs (unit_link.cpp) drives: the record begun, the
// module looked up in the caches, linked whole or from its units' cubins, then checked, cached and
// recorded (arch_link.cpp). Internal to link/: link.h is the stage's interface.
#pragma once

#include "base/clock.h"
#include "cache/link_cache.h"
#include "link/link.h"
#include "link/nvjitlink.h"

#include <cstdint>
#include <vector>

namespace cudaq_rt {

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
bool begin_arch(const LinkPlan &plan, ArchLinkJob &j);
// The module from the local cache, else the remote one.
bool lookup_module(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j);
// Verifies what was found or linked, caches what was linked, and fills in the record.
void finish_arch(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j);
// An nvJitLink failure as the arch's error, explained (an unresolved symbol, a missing export).
void fail_link(const LinkPlan &plan, ArchLinkJob &j, const NvJitLinkFailure &f, std::string what,
               const std::vector<LinkInput> &inputs);
// The plan's unit of direct calls, if it has one, right after the dispatcher that calls it
// (inputs[0], in a whole-program link or the dispatcher's unit).
Status add_direct_calls(const LinkPlan &plan, std::vector<NvJitLinkInput> &inputs);
// Whole mode: one link of every input.
void link_whole(const LinkPlan &plan, const LinkCache &cache, ArchLinkJob &j);
// Per-TU mode: the final link of the units' cubins (j.objects, one per unit) and the fatbins of
// units without LTO-IR; `units_t0` is when the units began, the module's link time's start.
void link_units(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache,
                ArchLinkJob &j, Clock::time_point units_t0);

} // namespace cudaq_rt
