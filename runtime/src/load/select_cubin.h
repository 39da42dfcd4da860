// Which cubin serves a GPU: the first step of the load path, and all of it that needs no GPU.
#pragma once

#include "link/link.h"

#include <string>
#include <vector>

namespace cudaq_rt {

class Package;

enum class CubinSource {
  package, // the package's own link record for this arch, bridge and dispatcher
  cache,   // the link cache, under the key cudaq-rt-link would compute
  remote,  // the remote link cache, the same key (and copied into the local cache)
  link     // linked at load (and put in the cache)
};
// "package", "cache", "remote cache", "link at load".
const char *cubin_source_name(CubinSource s);

struct CubinPolicy {
  bool allow_link = true; // false: a cubin must already exist (deployments that never link)
  bool store = false;     // a cubin from the cache or a link is also stored in the package
  // false: finding none is no error but a choice with `found` false (what --list asks): an
  // error is then something that went wrong (a blob that does not verify or cannot be fetched).
  bool none_is_error = true;
};

struct CubinChoice {
  bool found = true; // false: only with none_is_error false; `why_not` says why
  std::string why_not;
  TargetArch arch;
  CubinSource source = CubinSource::package;
  std::vector<uint8_t> cubin;
  LinkRecord record;
  double ms = 0; // finding it, or linking it
  std::vector<std::string> warnings;
  std::vector<std::string> notes; // what the remote cache did, for -v
};

// Tries the package, then the cache, then (if allowed) a link, for `arch` exactly. A package
// record is used only when its inputs are the plan's: a record linked against other bridge hooks
// or another built-in dispatcher than the ones this process would run with is stale. With
// policy.store, what is stored in the package is signed by `trust`'s signer, and under its trusted
// keys the package must verify as it is then.
Expected<CubinChoice> select_cubin(const Package &package, const LinkPlan &plan,
                                   const TargetArch &arch, const LinkCache &cache,
                                   const CubinPolicy &policy, const TrustPolicy &trust = {});

} // namespace cudaq_rt
