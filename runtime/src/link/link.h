// link/: from a package to a cubin per arch: the plan (link_plan.cpp), nvJitLink (nvjitlink.h),
// the built-in dispatchers (builtin_dispatcher.h), the unit of direct calls (direct_calls.h), and
// the links themselves, declared here: one arch's (arch_link.cpp), the archs' and their units'
// scheduling (unit_link.cpp), the package's update and the pushes (store_links.cpp), and
// link_package over them (link.cpp). cudaq-rt-link's command is command/link_command.h.
//
// Linking a package's dispatch kernel, bridge hooks and handlers into one cubin per GPU arch with
// nvJitLink, through the link cache, in three steps that cudaq-rt-link and the load path share:
//
//   plan_link   package + bridge + dispatcher -> the inputs, in link order, and their checks
//   link_arch   plan + arch + cache           -> a verified cubin and its link record
//   store_links plan + cubins                 -> the package, replaced atomically under its lock
//
// link_package runs the three for a list of archs, in parallel: cudaq-rt-link.
//
// LTO-IR is linked in one of two modes (LtoMode): the whole program in one -lto link, or each
// translation unit compiled alone to a relocatable cubin (kept in the link cache) and a final link
// of those cubins. link_plan.cpp says why and what each costs.
#pragma once

#include "base/digest.h"
#include "cache/link_cache.h"
#include "formats/input_file.h"
#include "formats/target.h"
#include "package/manifest.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace cudaq_rt {

class Package;
class BlobSource;

// The bridge whose hooks a link takes when neither the settings nor the package name one.
constexpr const char *default_bridge = "loopback";

// What a link is asked for, whatever the arch.
struct LinkSettings {
  // A bridge name or library path. Empty: the package's bridge if it packs exactly one, else
  // the installed `loopback`.
  std::string bridge;
  // A custom dispatch kernel exported by the package, or "builtin". Empty: the package's if it
  // exports exactly one, else the built-in unified dispatch kernel.
  std::string dispatcher;
  bool kernels_used = true; // -kernels-used/-variables-used: drop all code but the module's
  std::string opt_level;    // "-O0" or "-O3"; empty: nvJitLink's default
  std::vector<std::string> extra_options; // passed through; part of the key
  bool verbose = false;                   // -verbose -time; the info log is returned
  // Unset: $CUDAQ_RT_LTO, else default_lto_mode; and the load path takes a package's cubin
  // linked in either mode.
  std::optional<LtoMode> lto_mode;
};

// One container that goes into the link, with what the checks need to know about it.
struct LinkInput {
  std::string name; // for messages and nvJitLink's log
  Digest digest;
  // Owned by the LinkPlan. Empty where the package's blob is not on disk yet but comes from its
  // blob source (a registry package): LinkPlan::with_inputs fetches it, for a link only.
  std::span<const uint8_t> bytes;
  std::vector<EntryRecord> entries;
};

// Per-TU mode: a run of a plan's inputs compiled alone to a relocatable cubin. The dispatcher and
// the bridge's hooks are one unit, so that the hooks are inlined into the kernel; every
// application container is one. A unit with no LTO-IR is not compiled: its fatbin goes into the
// final link as it is.
struct LinkUnit {
  std::string name;
  size_t first = 0; // into LinkPlan::inputs
  size_t count = 0;
  bool compile = true;
  bool dispatcher = false; // holds the dispatch kernel
};

// Code the package does not hold yet (the bridge's hooks, the built-in dispatcher): stored in it
// with the cubins, so that every input of a link record resolves inside the package.
struct NewContainer {
  ContainerRecord record;
  std::optional<Source> source;
};

// Everything about a link but the arch: which code, in which order, with which options.
class LinkPlan {
public:
  std::string subject;    // the package, for messages
  std::string dispatcher; // "builtin" or the custom kernel's name
  std::string kernel;     // the kernel to launch
  std::string bridge;     // the bridge's name
  std::vector<LinkInput> inputs;
  std::vector<NewContainer> new_containers;
  std::vector<std::string> handlers;        // exported handler names, as in the manifest
  std::vector<std::string> handler_symbols; // their cudaq_rt_handler__<name> globals
  std::vector<std::string> globals;         // exported host-set globals (CUDAQ_RT_EXPORT_GLOBAL)
  bool lto = false;                         // some input carries LTO-IR
  // The mode this plan links in (whole where no input carries LTO-IR). A toolkit that cannot
  // compile a unit alone is found out at the first unit to compile (link_archs), not here, so
  // that a cache hit costs no trial compile.
  LtoMode mode = LtoMode::whole;
  std::vector<LinkUnit> units; // per-TU mode
  bool split_compile = false;  // whole mode: -split-compile-extended=0 (the fallback only)
  NvJitLinkIdentity nvjitlink;
  LinkSettings settings;
  // The packed code the plan was made from: a store refuses a package whose code was replaced.
  std::vector<std::tuple<Digest, Role, std::string>> packed; // packed_code()

  // The generated unit of direct calls (direct_calls.h), linked right after the dispatcher (in
  // per-TU mode, in its unit): in a whole-program link of a built-in kernel, which then takes
  // its direct form, where the package has handlers callable by name; with a custom kernel
  // always, which may call it (cudaq_rt/dispatch_framing.cuh). It is no container of the package
  // but a function of its manifest: not among `inputs` (nor a link record's), its source's
  // digest is part of the key. Compiled (NVRTC, about 40 ms) on first use, by the link that
  // needs it: a plan whose cubin is found in the package or a cache never compiles it.
  class DirectCalls {
  public:
    explicit DirectCalls(std::string source);
    const std::string &source() const { return source_; }
    const Digest &digest() const { return digest_; } // of the source
    // The LTO-IR; thread-safe, compiled once.
    Expected<std::span<const uint8_t>> ltoir(const std::string &subject) const;

  private:
    struct Compiled;
    std::string source_;
    Digest digest_;
    std::shared_ptr<Compiled> compiled_;
  };
  std::optional<DirectCalls> direct_calls;

  std::vector<Digest> input_digests() const;
  // A link record's inputs in `mode`: a whole-program link of a built-in dispatcher takes its
  // direct form where the package has handlers callable by name, so the load path, which plans
  // one mode, can still recognise the package's cubin linked in the other.
  std::vector<Digest> input_digests(LtoMode mode) const;
  // Whether the inputs can be linked for `arch`; the error says what the package can serve.
  Status check_target(const TargetArch &arch) const;
  // What the link record says was passed to nvJitLink, and the key of the linked module. In
  // per-TU mode: the units' options (every unit gets the same).
  std::vector<std::string> options(const TargetArch &arch) const;
  LinkKey key(const TargetArch &arch) const;
  // Per-TU mode: a unit's compile (LTO, relocatable output), its key, and the final link's options.
  std::vector<std::string> unit_options(const TargetArch &arch) const;
  LinkKey unit_key(const TargetArch &arch, const LinkUnit &unit) const;
  std::vector<std::string> final_options(const TargetArch &arch) const;
  // The fallback from per-TU mode: the same plan linked as a whole program, with split compile.
  LinkPlan as_whole_fallback() const;
  // Whether some input's bytes were left to fetch (LinkInput::bytes).
  bool has_deferred_inputs() const;
  // The plan with every input's bytes, those left to fetch read through the package's blob
  // source (and so kept in the package): what a link needs, and a lookup does not. An error if
  // the package was replaced since it was planned.
  Expected<LinkPlan> with_inputs() const;

private:
  struct Steps; // plan_link's, in link_plan.cpp
  friend Expected<LinkPlan> plan_link(const Package &, const LinkSettings &);
  void add_verbose_options(std::vector<std::string> &options) const;
  // What the inputs' spans point into: blob bytes, and mapped bridge libraries.
  std::vector<std::shared_ptr<const std::string>> blobs_;
  std::vector<std::shared_ptr<const InputFile>> files_;
  // The digests of the built-in dispatcher's two forms, where they differ in this package.
  std::optional<std::pair<Digest, Digest>> dispatcher_forms_;
  // The package as planned, for with_inputs.
  std::filesystem::path package_;
  Digest manifest_digest_;
  std::shared_ptr<const BlobSource> source_;
};

// "ltoir sm_80, cubin sm_80", for messages about what an input holds.
std::string describe_entries(const std::vector<EntryRecord> &entries);
// What a package holds as packed code (not what links added): (digest, role, bridge) each.
std::vector<std::tuple<Digest, Role, std::string>> packed_code(const Manifest &m);

// Chooses the dispatcher and the bridge, gathers the inputs and checks everything that can be
// told before nvJitLink runs (LTO-IR from another toolkit, options that are not UTF-8).
Expected<LinkPlan> plan_link(const Package &package, const LinkSettings &settings);

// Per-TU mode: one unit's relocatable cubin, from the cache or compiled.
struct UnitLink {
  std::string name;
  Digest key;
  bool cache_hit = false;
  bool shipped = false;  // the hit came from the units the build shipped (lib/cudaq-rt/units)
  bool compiled = false; // false with cache_hit false: not compiled (no LTO-IR), or failed
  double time_ms = 0;    // this run: the compile, or the lookup
  uint64_t size = 0;
};

// One arch's outcome.
struct ArchLink {
  TargetArch arch;
  LinkKey key;
  // "dispatcher builtin", "bridge loopback #0", "app.o #1"; and, where the link adds it, "direct
  // calls (generated) sha256:<12 hex digits of its source's digest>" after the dispatcher.
  std::vector<std::string> input_names;
  std::vector<std::string> options; // as passed to nvJitLink
  bool cache_hit = false;
  bool remote_hit = false;          // the hit came from the remote cache
  double time_ms = 0;               // this run: the link, or the cache lookup
  std::optional<LinkRecord> record; // set when it linked (or hit); link_ms is the link's own
  std::vector<uint8_t> cubin;
  std::string info_log;
  std::optional<Error> error;
  std::string details; // with an error: nvJitLink's log and the inputs, several lines
  std::vector<std::string> warnings;
  std::vector<std::string> notes; // what the remote cache did, for -v
  LtoMode mode = LtoMode::whole;  // the mode it was linked in
  std::vector<UnitLink> units;    // per-TU mode, when the module was not a cache hit
  double final_link_ms = 0;       // per-TU mode: the final link of the units' cubins alone
  // Why a per-TU link became a whole-program one, in one line (a note, always shown), or empty.
  std::string fallback;
};

// What a link reports as it goes, for a progress line: once the total is known (per TU, after
// the lookups have said which archs missed; the lookups count as steps done), with `step` empty,
// then after each step (an arch's module looked up or linked whole, a unit found or compiled, an
// arch's final link), the steps done, the total, and what the step was ("sm_90",
// "sm_90 app.o#1", "sm_90 final link"). Called from the link threads, never two at once.
using LinkProgress = std::function<void(size_t done, size_t total, const std::string &step)>;

// The arch's key, and nothing else: what a dry run shows.
ArchLink describe_arch(const LinkPlan &plan, const TargetArch &arch);
// What link_arch does when neither cache has the arch's cubin.
enum class OnCacheMiss {
  link,            // link it
  return_unlinked, // link nothing: the result then has neither a record nor an error
};
// Looks the arch up in the cache (local, then remote), else links it; verifies the cubin (arch,
// dispatch kernel, every handler global) and caches what it linked. Failures are in the result's
// `error`.
ArchLink link_arch(const LinkPlan &plan, const TargetArch &arch, const LinkCache &cache,
                   OnCacheMiss on_miss = OnCacheMiss::link);

// link_arch for several archs: `jobs` threads (0: one per core) over the archs, or in per-TU mode
// over every (arch, unit) to compile, then over the final links. Results in the order of `archs`.
std::vector<ArchLink> link_archs(const LinkPlan &plan, std::span<const TargetArch> archs,
                                 const LinkCache &cache, unsigned jobs,
                                 OnCacheMiss on_miss = OnCacheMiss::link,
                                 const LinkProgress &progress = {});

// Stores the cubins and link records of `links` (all successful) in the package, under the lock
// every writer of the package takes, into the package as it is then: records other links stored
// meanwhile stay, and ours replace older ones for the same (arch, bridge, dispatcher).
// The package's signatures are carried over (they no longer match the new manifest, and say so
// when verified), and the trust's signer, when there is one, signs the new manifest, replacing
// its own. With trusted keys, the package as it is under the lock must verify too: a package
// replaced meanwhile is not signed on its replacer's behalf.
// New blobs (cubins, containers a link adds) are stored with `encoding` (package.h).
// Returns the keys whose signatures held over the package before and no longer do (the manifest
// changed and they did not sign the new one), in key order: what the tool warns about.
Expected<std::vector<KeyId>> store_links(const std::filesystem::path &package, const LinkPlan &plan,
                                         std::span<const ArchLink> links,
                                         const TrustPolicy &trust = {},
                                         BlobEncoding encoding = BlobEncoding::zstd);

// A store that left signatures behind, as the tools warn about it (nullopt: none):
// "'PKG': the stored links changed its manifest: the signatures of keys 1a2b..., 3c4d... no
// longer hold (sign it again: cudaq-rt-link PKG --sign KEY)".
std::optional<std::string> broken_signatures_warning(const std::string &package,
                                                     const std::vector<KeyId> &keys);

struct LinkOptions {
  std::filesystem::path package;
  // Whose signature the package needs before anything is linked (trusted), and what signs the new
  // manifest (signer): the caller's, resolved once (resolve_trust, signing.h).
  TrustPolicy trust;
  std::vector<TargetArch> archs;
  LinkSettings settings;
  unsigned jobs = 0;    // 0: the machine's cores (archs, and per-TU units, linked at once)
  bool dry_run = false; // plan and print keys, link nothing, write nothing
  std::optional<std::filesystem::path> save_temps; // inputs, cubin and log per arch
  bool store_in_package = true;
  bool compress = true;  // store new cubins zstd-compressed (--no-compress: as they are)
  LinkProgress progress; // unset: none reported
};

struct LinkReport {
  std::filesystem::path package;
  std::string bridge;
  std::string dispatcher;
  LtoMode mode = LtoMode::whole; // the plan's (an arch may have fallen back: ArchLink::mode)
  std::vector<ArchLink> archs;
  std::optional<KeyId> verified_by; // under --trust: the trusted key whose signature vouched
  std::optional<KeyId> signed_by;   // with a signing key: the key that signed the new manifest
  std::vector<KeyId> unsigned_by;   // keys whose signatures the new manifest no longer matches
  bool ok() const;
};

// What link_package refuses before it opens anything (no target arch).
Status check_link_options(const LinkOptions &options);

// cudaq-rt-link: plans once, links every arch (in parallel) and, when every arch succeeded,
// stores them all in one atomic replace. A failure of any arch leaves the package unchanged.
// Errors that stop everything (no package, unknown bridge, bad arch) come back as an Error;
// per-arch failures are in the report.
Expected<LinkReport> link_package(const LinkOptions &options, const LinkCache &cache);
// A link's ending, link_package's and a recording's alike: the report's links stored in the
// package (store_links, with `opt`'s compression and trust), the keys whose
// signatures that broke and the key that signed the new manifest put into the report.
Status store_report(const LinkOptions &opt, const LinkPlan &plan, LinkReport &report);

// cudaq-rt-link --cache-push: stores the cubin of each of the package's link records in the
// remote cache under the record's key, as the entry a link would have stored (a CI step that
// warms a fleet after linking ahead of time).
struct PushedLink {
  std::string arch;
  Digest key;
  uint64_t bytes = 0;
  std::optional<Error> error;
};
// Under `trusted`, only a package one of its keys signed.
Expected<std::vector<PushedLink>> push_links(const std::filesystem::path &package,
                                             const LinkCache &cache,
                                             const TrustedKeys *trusted = nullptr);

} // namespace cudaq_rt
