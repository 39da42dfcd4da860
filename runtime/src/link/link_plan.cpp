// What goes into a link: one module per GPU arch from three parties' device code.
//
// Inputs, in link order: the dispatch kernel (the built-in unified kernel's LTO-IR, or the
// package's custom one), the bridge's device hooks (from the package, or from the installed
// bridge library's own __nv_relfatbin, read as a file: linking never loads a bridge, whose host
// side may need a NIC driver a build machine lacks), then the application's containers. Each is
// one fatbin container, added as NVJITLINK_INPUT_FATBIN: nvJitLink reads only the first container
// of an input, which is why pack split them.
//
// Options: -arch=sm_NN always; -lto when any input carries LTO-IR (without it nvJitLink would
// JIT the PTX entries instead, silently); -kernels-used=<dispatch kernel> so NVVM drops every
// kernel the module will never launch (a 36-kernel link: 256 ms -> 17 ms), with
// -variables-used=cudaq_rt_handler__<name> for every exported handler, so the pointer globals
// the runtime reads to build the function table, and the handlers they point to, survive; so does
// every exported host-set global (CUDAQ_RT_EXPORT_GLOBAL), which nvJitLink would otherwise make
// internal to the module, out of the driver's reach by name.
//
// Two modes for LTO-IR (LtoMode). Whole: one -lto link of every input. NVVM then sees the whole
// program: the hooks and every handler the kernel's indirect call can reach are compiled into the
// kernel (at 1,000 handlers the kernel symbol was 3.3 MB, and the link took 132 s of CPU and
// 1.4 GB here: bench/link_bench.md), and a change to one handler relinks everything. Where the
// package's handlers have named calls (exports.h), the built-in kernel comes in its direct form
// with the unit of direct calls generated for the package (direct_calls.h), and LTO inlines the
// handlers into the kernel. Per-TU: each unit is compiled alone for the arch into a relocatable
// cubin (-lto -Xptxas=-c -Xnvvm=--device-c, nvjitlink.cpp), cached under its own key, and one
// link without -lto joins the cubins. The dispatcher and the bridge's hooks are one unit, so the
// hooks are still inlined into the kernel. Per TU, the kernel reaches handlers through the
// function table's pointers, and a handler's call into another unit is a real call. On the H200
// the example handlers answered as fast in both modes one request at a time
// (bench/link_bench.md, bench/loopback_rtt.md); whole, with direct calls, the unified kernel
// spends 57 ns less per request and serves 5% more per second at 64 in flight.
// -kernels-used=<dispatch kernel> goes to every unit (a unit that does not define the kernel keeps
// none of its own), but -variables-used does not: each unit's key must depend on that unit alone,
// and a unit compiled alone keeps its external globals anyway.
//
// -split-compile-extended=N splits NVVM's and ptxas's work on a whole program over N threads: 100
// handlers linked in 5 to 7 s instead of 11 to 12.6 s (2 loaded cores, sm_90), but into other code
// (449,024 B where the plain link gives 468,264 B) and, measured with CUDA 13.0, different bytes
// on every run, even with N fixed: three links at N=4 gave three cubins. So --lto whole, the mode
// for the best code, does without it (a user may still pass it with -X); only the fallback from
// per-TU mode, which stands in for a fast link, uses it.
//
// Everything that can be told from the package is checked before nvJitLink runs (arch too old
// for the LTO-IR, LTO-IR from another toolkit, options that are not UTF-8), because nvJitLink's
// own messages for these name neither the input nor the fix.
#include "link/link.h"

#include "base/nvjitlink_library.h"
#include "cudaq_rt/bridge.h"
#include "formats/export_records.h"
#include "formats/fatbin.h"
#include "link/builtin_dispatcher.h"
#include "link/direct_calls.h"
#include "link/nvjitlink.h"
#include "package/containers.h"
#include "package/package.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

bool serves(const std::vector<EntryRecord> &entries, uint32_t sm) {
  for (const EntryRecord &e : entries) {
    if ((e.kind == "ltoir" || e.kind == "ptx") && e.arch <= sm)
      return true;
    if (e.kind == "cubin" && e.arch == sm)
      return true;
  }
  return false;
}

// What all the inputs together can serve, for the message when a target is out of reach. LTO-IR
// and PTX reach their arch and every newer one, a relocatable cubin only its own: so the answer
// is "sm_M and newer" (M the newest of the inputs' oldest LTO-IR/PTX), plus any older arch every
// input has a cubin or more for, or a finite list when an input holds cubins alone.
std::string servable_archs(const std::vector<LinkInput> &inputs) {
  std::optional<uint32_t> forward = 0; // nullopt: some input reaches no arch beyond its cubins
  std::set<uint32_t> archs;
  for (const LinkInput &in : inputs) {
    std::optional<uint32_t> oldest;
    for (const EntryRecord &e : in.entries) {
      archs.insert(e.arch);
      if (e.kind == "ltoir" || e.kind == "ptx")
        oldest = oldest ? std::min(*oldest, e.arch) : e.arch;
    }
    forward = forward && oldest ? std::optional(std::max(*forward, *oldest)) : std::nullopt;
  }
  std::string below;
  for (uint32_t sm : archs)
    if ((!forward || sm < *forward) &&
        std::all_of(inputs.begin(), inputs.end(),
                    [&](const LinkInput &in) { return serves(in.entries, sm); }))
      below += cat(below.empty() ? "" : ",", "sm_", sm);
  if (forward)
    return below.empty() ? cat("sm_", *forward, " and newer")
                         : cat(below, " and sm_", *forward, " and newer");
  return below.empty() ? std::string("no arch (its inputs' cubins share none)") : "only " + below;
}

// LTO-IR written by a newer toolkit than this nvJitLink, or by another major, cannot be linked.
// The entry header carries the producer's LTO-IR version; the built-in dispatcher was compiled
// by the toolkit this library was built with, so its version is the newest this build knows.
Status check_ltoir_versions(const LinkPlan &plan, const EntryRecord &ours) {
  for (const LinkInput &in : plan.inputs)
    for (const EntryRecord &e : in.entries) {
      if (e.kind != "ltoir")
        continue;
      bool other_major = e.version_major != ours.version_major;
      bool newer = !other_major && e.version_minor > ours.version_minor &&
                   e.version_minor > plan.nvjitlink.minor;
      if (other_major || newer)
        return make_error(plan.subject, in.name, ": LTO-IR version ", e.version_major, ".",
                          e.version_minor, " was written by ",
                          other_major ? "another major CUDA version" : "a newer CUDA toolkit",
                          " than this nvJitLink ", plan.nvjitlink.version(), " reads (LTO-IR ",
                          ours.version_major, ".", ours.version_minor,
                          "): rebuild it with this toolkit or link with a newer one");
    }
  return Status::ok();
}

bool carries_ltoir(const std::vector<EntryRecord> &entries) {
  return std::any_of(entries.begin(), entries.end(),
                     [](const EntryRecord &e) { return e.kind == "ltoir"; });
}

} // namespace

std::string describe_entries(const std::vector<EntryRecord> &entries) {
  std::string s;
  for (const EntryRecord &e : entries)
    s += cat(s.empty() ? "" : ", ", e.kind, " sm_", e.arch);
  return s.empty() ? "no code" : s;
}

std::vector<std::tuple<Digest, Role, std::string>> packed_code(const Manifest &m) {
  std::vector<std::tuple<Digest, Role, std::string>> out;
  for (const ContainerRecord &c : m.containers)
    if (c.packed())
      out.emplace_back(c.digest, c.role, c.bridge);
  return out;
}

std::vector<Digest> LinkPlan::input_digests() const {
  std::vector<Digest> out;
  for (const LinkInput &in : inputs)
    out.push_back(in.digest);
  return out;
}

struct LinkPlan::DirectCalls::Compiled {
  std::once_flag once;
  std::optional<Expected<std::vector<uint8_t>>> ltoir;
};

LinkPlan::DirectCalls::DirectCalls(std::string source)
    : source_(std::move(source)), digest_(sha256(as_bytes(source_))),
      compiled_(std::make_shared<Compiled>()) {}

Expected<std::span<const uint8_t>> LinkPlan::DirectCalls::ltoir(const std::string &subject) const {
  std::call_once(compiled_->once,
                 [&] { compiled_->ltoir.emplace(compile_direct_calls(source_, subject)); });
  if (!*compiled_->ltoir)
    return compiled_->ltoir->error();
  return std::span<const uint8_t>(**compiled_->ltoir);
}

std::vector<Digest> LinkPlan::input_digests(LtoMode as) const {
  std::vector<Digest> out = input_digests();
  if (dispatcher_forms_ && !out.empty())
    out[0] = as == LtoMode::whole ? dispatcher_forms_->second : dispatcher_forms_->first;
  return out;
}

Status LinkPlan::check_target(const TargetArch &arch) const {
  for (const LinkInput &in : inputs)
    if (!serves(in.entries, arch.sm))
      return make_error(subject, "cannot link for ", arch.str(), ": ", in.name, " holds ",
                        describe_entries(in.entries), "; this package can serve ",
                        servable_archs(inputs));
  return Status::ok();
}

std::vector<std::string> LinkPlan::options(const TargetArch &arch) const {
  if (mode == LtoMode::per_tu)
    return unit_options(arch);
  std::vector<std::string> out{"-arch=" + arch.str()};
  if (lto)
    out.push_back("-lto");
  if (!settings.opt_level.empty())
    out.push_back(settings.opt_level);
  if (split_compile && lto)
    out.push_back("-split-compile-extended=0");
  if (settings.kernels_used && lto) {
    out.push_back("-kernels-used=" + kernel);
    for (const std::string &s : handler_symbols)
      out.push_back("-variables-used=" + s);
    for (const std::string &s : globals)
      out.push_back("-variables-used=" + s);
  }
  out.insert(out.end(), settings.extra_options.begin(), settings.extra_options.end());
  add_verbose_options(out);
  return out;
}

LinkKey LinkPlan::key(const TargetArch &arch) const {
  if (mode == LtoMode::per_tu) {
    std::vector<uint32_t> sizes;
    for (const LinkUnit &u : units)
      sizes.push_back(static_cast<uint32_t>(u.count));
    return LinkKey::make(arch, options(arch), nvjitlink, input_digests(),
                         LinkedForm{LtoMode::per_tu}, std::move(sizes));
  }
  std::vector<Digest> digests = input_digests();
  if (direct_calls)
    digests.push_back(direct_calls->digest());
  return LinkKey::make(arch, options(arch), nvjitlink, std::move(digests));
}

std::vector<std::string> LinkPlan::unit_options(const TargetArch &arch) const {
  std::vector<std::string> out{"-arch=" + arch.str(), "-lto"};
  out.insert(out.end(), std::begin(nvjitlink_unit_options), std::end(nvjitlink_unit_options));
  if (!settings.opt_level.empty())
    out.push_back(settings.opt_level);
  if (settings.kernels_used)
    out.push_back("-kernels-used=" + kernel);
  out.insert(out.end(), settings.extra_options.begin(), settings.extra_options.end());
  add_verbose_options(out);
  return out;
}

LinkKey LinkPlan::unit_key(const TargetArch &arch, const LinkUnit &unit) const {
  std::vector<Digest> digests;
  for (size_t k = unit.first; k < unit.first + unit.count; ++k)
    digests.push_back(inputs[k].digest);
  if (unit.dispatcher && direct_calls)
    digests.push_back(direct_calls->digest());
  return LinkKey::make(arch, unit_options(arch), nvjitlink, std::move(digests),
                       LinkedForm{LtoMode::per_tu, /*unit=*/true});
}

std::vector<std::string> LinkPlan::final_options(const TargetArch &arch) const {
  std::vector<std::string> out{"-arch=" + arch.str()};
  add_verbose_options(out);
  return out;
}

void LinkPlan::add_verbose_options(std::vector<std::string> &out) const {
  // -verbose changes the cubin (ptxas records it) and stays in the key; -time does not.
  if (settings.verbose) {
    out.push_back("-verbose");
    out.push_back("-time");
  }
}

LinkPlan LinkPlan::as_whole_fallback() const {
  LinkPlan whole = *this;
  whole.mode = LtoMode::whole;
  whole.units.clear();
  whole.split_compile = true;
  return whole;
}

// The steps of plan_link, in the order it takes them; each adds to the plan.
struct LinkPlan::Steps {
  LinkPlan &plan;
  const Package &pkg;
  const Manifest &m;
  // The bridge (choose_bridge): packed in the package, or the installed library, opened once.
  bool bridge_packed = false;
  std::shared_ptr<const InputFile> bridge_file = nullptr;
  // The optional hook sets its code exports (CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone), (warp_lone)): a
  // built-in kernel whose lone build calls a set the bridge has is linked in that build.
  std::set<std::string> bridge_hooks = {};

  // Options end up in JSON (the manifest, cache metadata), which holds only UTF-8: an option that
  // is not would be recorded as something other than what was used.
  Status check_options() const {
    for (const std::string &o : plan.settings.extra_options)
      if (!valid_utf8(o))
        return make_error(plan.subject, "nvJitLink option ", quote(o),
                          " is not valid UTF-8: a link record could not say what was used");
    return Status::ok();
  }

  // The mode asked for, by the settings or by CUDAQ_RT_LTO.
  Expected<std::optional<LtoMode>> requested_mode() const {
    std::optional<LtoMode> mode = plan.settings.lto_mode;
    if (const char *env = std::getenv(lto_mode_env); !mode && env && *env) {
      mode = parse_lto_mode(env);
      if (!mode)
        return make_error(plan.subject, lto_mode_env, "=", quote(env),
                          ": expected per-tu or whole");
    }
    return mode;
  }

  std::string origin_name(const ContainerRecord &c) const {
    if (c.origins.empty())
      return c.digest.short_str();
    const Origin &o = c.origins[0];
    return cat(fs::path(m.sources[o.source].path).filename().string(),
               o.member.empty() ? "" : "(" + o.member + ")", "#", o.index);
  }

  // Packed containers only: what a link added is taken afresh from where it came from.
  template <class Pred, class Name> Status add_packed(Pred pred, Name name_of) {
    for (const ContainerRecord &c : m.containers) {
      if (!c.packed() || !pred(c))
        continue;
      if (pkg.source() && !pkg.has_blob(c.digest)) {
        // Fetched only if a link needs it (with_inputs); read_blob then checks the entries
        // taken here from the manifest.
        plan.inputs.push_back({name_of(c), c.digest, {}, c.entries});
        continue;
      }
      auto bytes = pkg.read_blob(c.digest);
      if (!bytes)
        return std::move(bytes).take_error();
      auto blob = std::make_shared<const std::string>(std::move(*bytes));
      plan.blobs_.push_back(blob);
      // read_blob checked that the blob is one container as its record says; the checks below
      // still go by the bytes themselves.
      auto parsed = split_containers(as_bytes(*blob), pkg.blob_path(c.digest).string(), "blob");
      if (!parsed)
        return std::move(parsed).take_error();
      std::vector<EntryRecord> entries;
      for (const Entry &e : parsed->front().entries)
        entries.push_back(entry_record(e));
      plan.inputs.push_back({name_of(c), c.digest, as_bytes(*blob), std::move(entries)});
    }
    return Status::ok();
  }

  // The dispatch kernel: the settings', else the package's only custom one, else the built-in
  // unified kernel. Returns the unified kernel's container where that is what was added.
  Expected<std::optional<Container>> add_dispatcher(std::optional<LtoMode> requested) {
    std::vector<std::string> custom;
    for (const ExportEntry &e : m.exports)
      if (e.kind == export_kind_name(ExportKind::dispatch_kernel))
        custom.push_back(e.name);
    const LinkSettings &settings = plan.settings;
    if (settings.dispatcher.empty() && custom.size() > 1)
      return make_error(plan.subject, "the package exports ", custom.size(),
                        " dispatch kernels: choose one by name");
    plan.dispatcher = !settings.dispatcher.empty() ? settings.dispatcher
                      : custom.size() == 1         ? custom[0]
                                                   : "builtin";
    if (const BuiltinDispatcher *b = find_builtin_dispatcher(plan.dispatcher))
      return add_builtin_dispatcher(*b, requested);
    if (std::find(custom.begin(), custom.end(), plan.dispatcher) == custom.end())
      return make_error(plan.subject, "no dispatch kernel ", quote(plan.dispatcher),
                        " in the package (it exports ",
                        custom.empty() ? std::string("none") : custom[0],
                        custom.size() > 1 ? ", ..." : "",
                        "; 'builtin' is the unified kernel, 'warp' the warp-wide one)");
    plan.kernel = plan.dispatcher;
    if (auto st =
            add_packed([](const ContainerRecord &c) { return c.role == Role::dispatcher; },
                       [&](const ContainerRecord &c) { return "dispatcher " + origin_name(c); });
        !st)
      return std::move(st).take_error();
    return std::optional<Container>();
  }

  Expected<std::optional<Container>> add_builtin_dispatcher(const BuiltinDispatcher &b,
                                                            std::optional<LtoMode> requested) {
    plan.kernel = b.kernel;
    // Per TU, the lone build where the kernel has one and the bridge exports the hooks it calls. A
    // whole-program link takes the direct form where the package has handlers to call by name (per
    // TU, each handler is in a unit of its own, and a call by name would still be a call), with
    // the unit of direct calls generated for the package; else the plain build. Never the lone
    // build: linked whole, its main loop served 20% fewer requests a second at 64 in flight than
    // the plain direct form (0.646 against 0.806 M/s on an H100, bench/loopback_rtt.md).
    // Both forms' digests are kept where they differ, so that a record of the other mode can be
    // told current (input_digests).
    const bool lone = !b.lone_fatbin.empty() && bridge_hooks.count(b.lone_hooks) != 0;
    const bool direct = has_direct_handlers(m);
    const bool whole = requested.value_or(default_lto_mode) == LtoMode::whole;
    auto per_tu =
        parse_container(lone ? b.lone_fatbin : b.fatbin,
                        cat("built-in dispatcher ", b.name, lone ? " (lone form)" : ""), "fatbin");
    if (!per_tu)
      return std::move(per_tu).take_error();
    std::optional<Container> unified;
    if (b.fatbin.data() == builtin_dispatcher_fatbin().data())
      unified = *per_tu;
    Digest digest = sha256(per_tu->bytes);
    Expected<Container> parsed = std::move(per_tu);
    if (direct || lone) {
      auto other = parse_container(
          direct ? b.direct_fatbin : b.fatbin,
          cat("built-in dispatcher ", b.name, direct ? " (direct calls)" : ""), "fatbin");
      if (!other)
        return std::move(other).take_error();
      const Digest other_digest = sha256(other->bytes);
      plan.dispatcher_forms_.emplace(digest, other_digest);
      if (whole) {
        parsed = std::move(other);
        digest = other_digest;
        if (direct)
          plan.direct_calls.emplace(direct_calls_source(m));
      }
    }
    NewContainer nc{container_record(*parsed, digest, Role::dispatcher, ""), std::nullopt};
    nc.record.added_by = "cudaq-rt-link";
    plan.inputs.push_back(
        {cat("dispatcher ", b.name), nc.record.digest, parsed->bytes, nc.record.entries});
    if (!m.find_container(nc.record.digest))
      plan.new_containers.push_back(std::move(nc));
    return unified;
  }

  // The bridge whose device hooks the link takes: the settings', else the package's only packed
  // one, else the installed loopback bridge (its library read, never dlopened); and the hook sets
  // its code exports: a packed bridge's exports come from the sources its containers were packed
  // from, an installed one's from its library's records.
  Status choose_bridge() {
    std::set<std::string> packed_bridges;
    for (const ContainerRecord &c : m.containers)
      if (c.role == Role::bridge && c.packed())
        packed_bridges.insert(c.bridge);
    if (plan.settings.bridge.empty() && packed_bridges.size() > 1)
      return make_error(plan.subject, "the package holds ", packed_bridges.size(),
                        " bridges: choose one by name");
    plan.bridge = !plan.settings.bridge.empty() ? plan.settings.bridge
                  : packed_bridges.size() == 1  ? *packed_bridges.begin()
                                                : default_bridge;
    bridge_packed = packed_bridges.count(plan.bridge) != 0;
    if (bridge_packed) {
      std::set<size_t> sources;
      for (const ContainerRecord &c : m.containers)
        if (c.role == Role::bridge && c.packed() && c.bridge == plan.bridge)
          for (const Origin &o : c.origins)
            sources.insert(o.source);
      for (const ExportEntry &e : m.exports)
        if (e.kind == export_kind_name(ExportKind::bridge_hooks))
          for (size_t src : e.sources)
            if (sources.count(src) != 0)
              bridge_hooks.insert(e.name);
      return Status::ok();
    }
    auto where = find_bridge(plan.bridge);
    if (!where)
      return std::move(where).take_error();
    plan.bridge = where->name;
    auto opened = InputFile::open(where->path.string());
    if (!opened)
      return std::move(opened).take_error();
    bridge_file = std::make_shared<const InputFile>(std::move(*opened));
    for (const CodeUnit &u : bridge_file->units()) {
      auto records = parse_export_records(u.exports, bridge_file->unit_name(u));
      if (!records)
        return std::move(records).take_error();
      for (const ExportRecord &r : *records)
        if (r.kind == ExportKind::bridge_hooks)
          bridge_hooks.insert(r.name);
    }
    return Status::ok();
  }

  // The bridge's device hooks (choose_bridge chose it).
  Status add_bridge() {
    if (!bridge_packed)
      return add_installed_bridge();
    return add_packed(
        [&](const ContainerRecord &c) { return c.role == Role::bridge && c.bridge == plan.bridge; },
        [&](const ContainerRecord &c) { return "bridge " + plan.bridge + " " + origin_name(c); });
  }

  Status add_installed_bridge() {
    std::shared_ptr<const InputFile> file = bridge_file;
    plan.files_.push_back(file);
    // The library's own digest is only needed to record a container the package lacks.
    std::optional<Source> src;
    auto source = [&] {
      if (!src) {
        std::error_code ec;
        fs::path path = fs::weakly_canonical(file->path(), ec);
        src = Source{(ec ? fs::path(file->path()) : path).string(), input_kind_name(file->kind()),
                     file->bytes().size(), sha256(file->bytes())};
      }
      return *src;
    };
    size_t index = 0;
    for (const CodeUnit &u : file->units()) {
      if (!u.has_relfatbin)
        continue;
      auto containers = read_unit_containers(*file, u, 0, Role::bridge, plan.bridge);
      if (!containers)
        return std::move(containers).take_error();
      for (UnitContainer &c : *containers) {
        NewContainer nc{std::move(c.record), std::nullopt};
        nc.record.added_by = "cudaq-rt-link";
        nc.record.origins[0].index = index;
        plan.inputs.push_back({cat("bridge ", plan.bridge, " ", file->path(), "#", index++),
                               nc.record.digest, c.container.bytes, nc.record.entries});
        if (!m.find_container(nc.record.digest)) {
          nc.source = source();
          plan.new_containers.push_back(std::move(nc));
        }
      }
    }
    if (index == 0)
      return make_error(file->path(), "bridge ", quote(plan.bridge),
                        " carries no device code "
                        "(no __nv_relfatbin): its hooks cannot be linked");
    return Status::ok();
  }

  Status add_application() {
    return add_packed([](const ContainerRecord &c) { return c.role == Role::application; },
                      [&](const ContainerRecord &c) { return origin_name(c); });
  }

  // Symbols are derived from the names (C identifiers, checked on read), never taken from the
  // manifest's own `symbol`: an option built from a tampered string could say anything.
  Status add_exports() {
    const BuiltinDispatcher *builtin = find_builtin_dispatcher(plan.dispatcher);
    for (const ExportEntry &e : m.exports)
      if (e.kind == export_kind_name(ExportKind::handler)) {
        if (builtin && builtin->concurrent && !e.concurrent)
          return make_error(plan.subject, "handler ", quote(e.name),
                            " is not exported as safe to run concurrently, and the ", builtin->name,
                            " dispatcher runs up to 32 handlers at once: ",
                            "export it with CUDAQ_RT_EXPORT_HANDLER_CONCURRENT, or link with the ",
                            "unified dispatcher");
        plan.handlers.push_back(e.name);
        plan.handler_symbols.push_back(handler_symbol(e.name));
      } else if (e.kind == export_kind_name(ExportKind::global)) {
        plan.globals.push_back(e.name);
      }
    return Status::ok();
  }

  // The nvJitLink the process links with must read the LTO-IR of the toolkit that built the
  // runtime's device code (the dispatchers, the bridges' hooks), and of every input.
  Status check_toolkit(std::optional<Container> unified) {
    auto lib = process_nvjitlink();
    if (!lib)
      return std::move(lib).take_error();
    if (std::string why = nvjitlink_refuses_runtime_code(**lib); !why.empty())
      return make_error("", why);
    auto identity = loaded_nvjitlink_identity();
    if (!identity)
      return std::move(identity).take_error();
    plan.nvjitlink = *identity;
    if (!unified) {
      auto parsed = parse_container(builtin_dispatcher_fatbin(), "built-in dispatcher", "fatbin");
      if (!parsed)
        return std::move(parsed).take_error();
      unified = std::move(*parsed);
    }
    for (const Entry &e : unified->entries)
      if (e.is_ltoir())
        return check_ltoir_versions(plan, entry_record(e));
    return Status::ok();
  }

  // The mode, and per TU the units: the dispatcher with the bridge's hooks (inlined into it),
  // then each application container alone.
  void choose_units(std::optional<LtoMode> requested, size_t first_application) {
    plan.lto = std::any_of(plan.inputs.begin(), plan.inputs.end(),
                           [](const LinkInput &in) { return carries_ltoir(in.entries); });
    plan.mode = plan.lto ? requested.value_or(default_lto_mode) : LtoMode::whole;
    // A custom kernel may call the unit of direct calls (cudaq_rt/dispatch_framing.cuh): it gets
    // one in either mode (with no direct handlers, every call goes through the pointer). Where
    // nothing calls it, a whole-program link drops it.
    if (!find_builtin_dispatcher(plan.dispatcher) && plan.lto)
      plan.direct_calls.emplace(direct_calls_source(m));
    if (plan.mode != LtoMode::per_tu)
      return;
    auto unit = [&](std::string name, size_t first, size_t count, bool dispatcher) {
      bool lto = std::any_of(plan.inputs.begin() + static_cast<ptrdiff_t>(first),
                             plan.inputs.begin() + static_cast<ptrdiff_t>(first + count),
                             [](const LinkInput &in) { return carries_ltoir(in.entries); });
      plan.units.push_back({std::move(name), first, count, lto, dispatcher});
    };
    unit(cat("dispatcher ", plan.dispatcher, " + bridge ", plan.bridge), 0, first_application,
         true);
    for (size_t k = first_application; k < plan.inputs.size(); ++k)
      unit(plan.inputs[k].name, k, 1, false);
  }
};

Expected<LinkPlan> plan_link(const Package &pkg, const LinkSettings &settings) {
  LinkPlan plan;
  plan.subject = pkg.dir().string();
  plan.settings = settings;
  plan.package_ = pkg.dir();
  plan.manifest_digest_ = pkg.manifest_digest();
  plan.source_ = pkg.source();
  plan.packed = packed_code(pkg.manifest());
  LinkPlan::Steps steps{plan, pkg, pkg.manifest()};
  if (auto st = steps.check_options(); !st)
    return std::move(st).take_error();
  auto requested = steps.requested_mode();
  if (!requested)
    return std::move(requested).take_error();
  if (auto st = steps.choose_bridge(); !st)
    return std::move(st).take_error();
  auto unified = steps.add_dispatcher(*requested);
  if (!unified)
    return std::move(unified).take_error();
  if (auto st = steps.add_bridge(); !st)
    return std::move(st).take_error();
  const size_t first_application = plan.inputs.size();
  if (auto st = steps.add_application(); !st)
    return std::move(st).take_error();
  if (auto st = steps.add_exports(); !st)
    return std::move(st).take_error();
  if (auto st = steps.check_toolkit(std::move(*unified)); !st)
    return std::move(st).take_error();
  steps.choose_units(*requested, first_application);
  return plan;
}

bool LinkPlan::has_deferred_inputs() const {
  return std::any_of(inputs.begin(), inputs.end(),
                     [](const LinkInput &in) { return in.bytes.empty(); });
}

Expected<LinkPlan> LinkPlan::with_inputs() const {
  LinkPlan full = *this;
  if (!has_deferred_inputs())
    return full;
  auto pkg = Package::open(package_, {.source = source_});
  if (!pkg)
    return std::move(pkg).take_error();
  if (pkg->manifest_digest() != manifest_digest_)
    return make_error(subject, "the package was replaced while it was being loaded: try again");
  for (LinkInput &in : full.inputs) {
    if (!in.bytes.empty())
      continue;
    auto bytes = pkg->read_blob(in.digest);
    if (!bytes)
      return std::move(bytes).take_error();
    auto blob = std::make_shared<const std::string>(std::move(*bytes));
    full.blobs_.push_back(blob);
    in.bytes = as_bytes(*blob);
  }
  return full;
}

} // namespace cudaq_rt
