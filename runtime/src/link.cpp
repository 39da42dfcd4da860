// cudaq-rt-link: one module per GPU arch from three parties' device code.
//
// Inputs, in link order: the dispatch kernel (the built-in unified kernel's LTO-IR, or the
// package's custom one), the bridge's device hooks (from the package, or from the installed
// bridge library's own __nv_relfatbin), then the application's containers. Each is one fatbin
// container, added as NVJITLINK_INPUT_FATBIN (nvJitLink reads only the first container of an
// input, which is why pack split them).
//
// Options: -arch=sm_NN always; -lto when any input carries LTO-IR (without it nvJitLink would
// JIT the PTX entries instead, silently); -kernels-used=<dispatch kernel> so NVVM drops every
// kernel the module will never launch (a 36-kernel link: 256 ms -> 17 ms), with
// -variables-used=cudaq_rt_handler__<name> for every exported handler, so the pointer globals
// the runtime reads to build the function table, and the handlers they point to, survive.
// A cubin is checked before it is stored: right arch, dispatch kernel defined, every handler
// global defined. A link that lost an export is an error, not a smaller module.
//
// Everything that can be told from the package is checked before nvJitLink runs (arch too old
// for the LTO-IR, LTO-IR from another toolkit), because nvJitLink's own messages for these name
// neither the input nor the fix.
#include "cudaq_rt/link.h"

#include "cudaq_rt/atomic_file.h"
#include "cudaq_rt/bridge.h"
#include "cudaq_rt/builtin_dispatcher.h"
#include "cudaq_rt/cubin.h"
#include "cudaq_rt/export_records.h"
#include "cudaq_rt/fatbin.h"
#include "cudaq_rt/input_file.h"
#include "cudaq_rt/nvjitlink.h"
#include "cudaq_rt/pack.h"
#include "cudaq_rt/package.h"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <set>
#include <thread>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// One container that goes into the link, with what the checks need to know about it.
struct LinkInput {
  std::string name; // for messages and nvJitLink's log
  Digest digest;
  std::span<const uint8_t> bytes;
  std::vector<EntryRecord> entries;
};

// Containers the package does not hold yet (the bridge's, the built-in dispatcher's): stored in
// it with the cubins, so that every input of a link record resolves inside the package.
struct NewContainer {
  ContainerRecord record;
  std::optional<Source> source;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

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

std::string describe_entries(const std::vector<EntryRecord> &entries) {
  std::string s;
  for (const EntryRecord &e : entries)
    s += cat(s.empty() ? "" : ", ", e.kind, " sm_", e.arch);
  return s.empty() ? "no code" : s;
}

struct Plan {
  std::string dispatcher;        // "builtin" or the custom kernel's name
  std::string kernel;            // the kernel to launch
  std::string bridge;            // bridge name
  std::vector<LinkInput> inputs; // in link order
  std::vector<NewContainer> new_containers;
  std::vector<std::string> handler_symbols;
};

// LTO-IR written by a newer toolkit than this nvJitLink, or by another major, cannot be linked.
// The entry header carries the producer's LTO-IR version; the built-in dispatcher was compiled
// by the toolkit this library was built with, so its version is the newest this build knows.
Status check_ltoir_versions(const Plan &plan, const std::string &subject, const EntryRecord &ours,
                            const NvJitLinkIdentity &nvjitlink) {
  for (const LinkInput &in : plan.inputs)
    for (const EntryRecord &e : in.entries) {
      if (e.kind != "ltoir")
        continue;
      bool other_major = e.version_major != ours.version_major;
      bool newer = !other_major && e.version_minor > ours.version_minor;
      if (other_major || newer)
        return make_error(
            subject, in.name, ": LTO-IR version ", e.version_major, ".", e.version_minor,
            " was written by ", other_major ? "another major CUDA version" : "a newer CUDA toolkit",
            " than this nvJitLink ", nvjitlink.version(), " reads (LTO-IR ", ours.version_major,
            ".", ours.version_minor, "): rebuild it with this toolkit or link with a newer one");
    }
  return Status::ok();
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

Expected<std::vector<Container>> split_blob(const std::string &bytes, const std::string &subject) {
  return split_containers(as_bytes(bytes), subject, "blob");
}

} // namespace

std::string TargetArch::str() const {
  return suffix ? cat("sm_", sm, suffix) : cat("sm_", sm);
}

std::optional<TargetArch> parse_arch(std::string_view text) {
  if (text.substr(0, 3) != "sm_" || text.size() < 5)
    return std::nullopt;
  text.remove_prefix(3);
  TargetArch a;
  if (text.back() == 'a' || text.back() == 'f') {
    a.suffix = text.back();
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() > 3 || text[0] == '0')
    return std::nullopt;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    a.sm = a.sm * 10 + static_cast<uint32_t>(c - '0');
  }
  if (a.sm < 50)
    return std::nullopt;
  return a;
}

bool LinkReport::ok() const {
  return std::all_of(archs.begin(), archs.end(), [](const ArchLink &a) { return !a.error; });
}

Expected<LinkReport> link_package(const LinkOptions &opt, const LinkCache &cache) {
  const std::string subject = opt.package.string();
  if (opt.archs.empty())
    return make_error(subject, "no target arch: give --arch sm_NN[,sm_NN...]");
  std::vector<TargetArch> targets;
  for (const std::string &a : opt.archs) {
    auto t = parse_arch(a);
    if (!t)
      return make_error(subject, "unknown arch '", a,
                        "': expected sm_NN with an optional a or f suffix, e.g. sm_90");
    if (std::none_of(targets.begin(), targets.end(),
                     [&](const TargetArch &x) { return x.str() == t->str(); }))
      targets.push_back(*t);
  }

  const fs::path package = entry_path(opt.package);
  auto pkg = Package::open(opt.package);
  if (!pkg)
    return std::move(pkg).take_error();
  const Manifest &m = pkg->manifest();

  // Blob bytes live here for the duration of the link; LinkInput spans point into them.
  std::vector<std::unique_ptr<std::string>> blobs;
  std::vector<InputFile> files;
  // Packed containers only: what a link added is taken afresh from where it came from.
  auto package_inputs = [&](auto pred, auto name_of) -> Expected<std::vector<LinkInput>> {
    std::vector<LinkInput> out;
    for (const ContainerRecord &c : m.containers) {
      if (!c.packed() || !pred(c))
        continue;
      auto bytes = pkg->read_blob(c.digest);
      if (!bytes)
        return std::move(bytes).take_error();
      blobs.push_back(std::make_unique<std::string>(std::move(*bytes)));
      auto parsed = split_blob(*blobs.back(), pkg->blob_path(c.digest).string());
      if (!parsed)
        return std::move(parsed).take_error();
      if (parsed->size() != 1)
        return make_error(pkg->blob_path(c.digest).string(), "blob holds ", parsed->size(),
                          " containers, not one");
      // The checks below go by the verified bytes, not by what the manifest says of them.
      std::vector<EntryRecord> entries;
      for (const Entry &e : parsed->front().entries)
        entries.push_back(entry_record(e));
      out.push_back({name_of(c), c.digest, as_bytes(*blobs.back()), std::move(entries)});
    }
    return out;
  };
  auto origin_name = [&](const ContainerRecord &c) {
    if (c.origins.empty())
      return c.digest.short_str();
    const Origin &o = c.origins[0];
    return cat(fs::path(m.sources[o.source].path).filename().string(),
               o.member.empty() ? "" : "(" + o.member + ")", "#", o.index);
  };

  Plan plan;
  // The dispatch kernel.
  std::vector<std::string> custom;
  for (const ExportEntry &e : m.exports)
    if (e.kind == export_kind_name(ExportKind::dispatch_kernel))
      custom.push_back(e.name);
  if (opt.dispatcher.empty() && custom.size() > 1)
    return make_error(subject, "the package exports ", custom.size(),
                      " dispatch kernels: choose one with --dispatcher NAME");
  plan.dispatcher = !opt.dispatcher.empty() ? opt.dispatcher
                    : custom.size() == 1    ? custom[0]
                                            : "builtin";
  auto builtin = parse_container(builtin_dispatcher_fatbin(), "built-in dispatcher", "fatbin");
  if (!builtin)
    return std::move(builtin).take_error();
  if (plan.dispatcher == "builtin") {
    plan.kernel = builtin_dispatcher_kernel;
    NewContainer nc{container_record(*builtin, sha256(builtin->bytes), Role::dispatcher, ""),
                    std::nullopt};
    nc.record.added_by = "cudaq-rt-link";
    plan.inputs.push_back(
        {"dispatcher builtin", nc.record.digest, builtin->bytes, nc.record.entries});
    if (!m.find_container(nc.record.digest))
      plan.new_containers.push_back(std::move(nc));
  } else {
    if (std::find(custom.begin(), custom.end(), plan.dispatcher) == custom.end())
      return make_error(subject, "no dispatch kernel '", plan.dispatcher,
                        "' in the package (it exports ",
                        custom.empty() ? std::string("none") : custom[0],
                        custom.size() > 1 ? ", ..." : "", "; 'builtin' is the unified kernel)");
    plan.kernel = plan.dispatcher;
    auto in =
        package_inputs([](const ContainerRecord &c) { return c.role == Role::dispatcher; },
                       [&](const ContainerRecord &c) { return "dispatcher " + origin_name(c); });
    if (!in)
      return std::move(in).take_error();
    plan.inputs.insert(plan.inputs.end(), in->begin(), in->end());
  }

  // The bridge's device hooks.
  std::set<std::string> packed_bridges;
  for (const ContainerRecord &c : m.containers)
    if (c.role == Role::bridge && c.packed())
      packed_bridges.insert(c.bridge);
  if (opt.bridge.empty() && packed_bridges.size() > 1)
    return make_error(subject, "the package holds ", packed_bridges.size(),
                      " bridges: choose one with --bridge NAME");
  plan.bridge = !opt.bridge.empty()          ? opt.bridge
                : packed_bridges.size() == 1 ? *packed_bridges.begin()
                                             : "loopback";
  if (packed_bridges.count(plan.bridge)) {
    auto in = package_inputs(
        [&](const ContainerRecord &c) { return c.role == Role::bridge && c.bridge == plan.bridge; },
        [&](const ContainerRecord &c) { return "bridge " + plan.bridge + " " + origin_name(c); });
    if (!in)
      return std::move(in).take_error();
    plan.inputs.insert(plan.inputs.end(), in->begin(), in->end());
  } else {
    auto lib = BridgeLibrary::open(plan.bridge);
    if (!lib)
      return std::move(lib).take_error();
    plan.bridge = std::string(lib->name());
    auto file = InputFile::open(lib->path().string());
    if (!file)
      return std::move(file).take_error();
    files.push_back(std::move(*file));
    const InputFile &f = files.back();
    // The library's own digest is only needed to record a container the package lacks.
    std::optional<Source> src;
    auto source = [&] {
      if (!src) {
        std::error_code ec;
        fs::path path = fs::weakly_canonical(f.path(), ec);
        src = Source{(ec ? fs::path(f.path()) : path).string(), input_kind_name(f.kind()),
                     f.bytes().size(), sha256(f.bytes())};
      }
      return *src;
    };
    size_t index = 0;
    for (const CodeUnit &u : f.units()) {
      if (!u.has_relfatbin)
        continue;
      auto containers = split_containers(u.relfatbin, f.unit_name(u), "section __nv_relfatbin");
      if (!containers)
        return std::move(containers).take_error();
      for (const Container &c : *containers) {
        NewContainer nc{container_record(c, sha256(c.bytes), Role::bridge, plan.bridge),
                        std::nullopt};
        nc.record.added_by = "cudaq-rt-link";
        nc.record.origins.push_back({0, u.member, c.offset, index++});
        plan.inputs.push_back({cat("bridge ", plan.bridge, " ", f.path(), "#", index - 1),
                               nc.record.digest, c.bytes, nc.record.entries});
        if (!m.find_container(nc.record.digest)) {
          nc.source = source();
          plan.new_containers.push_back(std::move(nc));
        }
      }
    }
    if (index == 0)
      return make_error(f.path(), "bridge '", plan.bridge,
                        "' carries no device code "
                        "(no __nv_relfatbin): its hooks cannot be linked");
  }

  // The application.
  auto app = package_inputs([](const ContainerRecord &c) { return c.role == Role::application; },
                            origin_name);
  if (!app)
    return std::move(app).take_error();
  plan.inputs.insert(plan.inputs.end(), app->begin(), app->end());
  for (const ExportEntry &e : m.exports)
    if (e.kind == export_kind_name(ExportKind::handler))
      plan.handler_symbols.push_back(e.symbol);

  auto identity = loaded_nvjitlink_identity();
  if (!identity)
    return std::move(identity).take_error();
  // The built-in dispatcher's LTO-IR is this build's toolkit's: the reference for every input,
  // whichever dispatch kernel is linked.
  for (const Entry &e : builtin->entries)
    if (e.is_ltoir()) {
      if (auto st = check_ltoir_versions(plan, subject, entry_record(e), *identity); !st)
        return std::move(st).take_error();
      break;
    }

  for (const TargetArch &t : targets)
    for (const LinkInput &in : plan.inputs)
      if (!serves(in.entries, t.sm))
        return make_error(subject, "cannot link for ", t.str(), ": ", in.name, " holds ",
                          describe_entries(in.entries), "; this package can serve ",
                          servable_archs(plan.inputs));

  bool lto = std::any_of(plan.inputs.begin(), plan.inputs.end(), [](const LinkInput &in) {
    return std::any_of(in.entries.begin(), in.entries.end(),
                       [](const EntryRecord &e) { return e.kind == "ltoir"; });
  });

  LinkReport report;
  report.package = opt.package;
  report.bridge = plan.bridge;
  report.dispatcher = plan.dispatcher;
  std::vector<Digest> input_digests;
  for (const LinkInput &in : plan.inputs)
    input_digests.push_back(in.digest);
  for (const TargetArch &t : targets) {
    ArchLink a;
    a.arch = t.str();
    a.options.push_back("-arch=" + t.str());
    if (lto)
      a.options.push_back("-lto");
    if (!opt.opt_level.empty())
      a.options.push_back(opt.opt_level);
    if (opt.kernels_used && lto) {
      a.options.push_back("-kernels-used=" + plan.kernel);
      for (const std::string &s : plan.handler_symbols)
        a.options.push_back("-variables-used=" + s);
    }
    a.options.insert(a.options.end(), opt.extra_options.begin(), opt.extra_options.end());
    if (opt.verbose) {
      a.options.push_back("-verbose");
      a.options.push_back("-time");
    }
    a.key = LinkKey::make(a.arch, a.options, *identity, input_digests);
    for (const LinkInput &in : plan.inputs)
      a.input_names.push_back(in.name);
    report.archs.push_back(std::move(a));
  }
  if (opt.dry_run)
    return report;

  // One nvJitLink handle per thread, archs handed out in order.
  std::vector<std::vector<uint8_t>> cubins(report.archs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < report.archs.size();) {
      ArchLink &a = report.archs[i];
      LinkRecord rec;
      rec.arch = a.arch;
      rec.bridge = plan.bridge;
      rec.dispatcher = plan.dispatcher;
      rec.mode = lto ? "lto" : "cubin";
      rec.options = a.options;
      rec.nvjitlink_version = identity->version();
      rec.inputs = input_digests;
      rec.cache_key = a.key.digest;
      if (auto hit = cache.get(a.key)) {
        a.cache_hit = true;
        cubins[i] = std::move(hit->cubin);
        rec.link_ms = hit->metadata.link_time_ms;
        a.info_log = hit->metadata.info_log;
      } else {
        std::vector<NvJitLinkInput> inputs;
        for (const LinkInput &in : plan.inputs)
          inputs.push_back({in.name, in.bytes});
        NvJitLinkOutcome out = nvjitlink_link(a.options, inputs);
        if (!out.ok) {
          a.error = explain_failure(subject, a.arch, out.failure, a.details, plan.inputs);
          a.info_log = out.failure.info_log;
          continue;
        }
        cubins[i] = std::move(out.result.cubin);
        rec.link_ms = out.result.link_ms;
        a.info_log = out.result.info_log;
      }
      // The cubin must be what the runtime will look for.
      auto info = read_cubin(cubins[i], cat(subject, ": ", a.arch));
      if (!info) {
        a.error = info.error();
        continue;
      }
      std::string lost;
      if (info->arch != targets[i].sm)
        a.error = make_error(subject, a.arch, ": nvJitLink produced a cubin for sm_", info->arch);
      else if (!info->functions.count(plan.kernel))
        a.error = make_error(subject, a.arch,
                             ": the linked cubin does not define the dispatch "
                             "kernel ",
                             plan.kernel);
      for (const std::string &s : plan.handler_symbols)
        if (!info->variables.count(s))
          lost += (lost.empty() ? "" : ", ") + s;
      if (!a.error && !lost.empty())
        a.error = make_error(subject, a.arch, ": the link lost exported handler globals: ", lost);
      if (a.error)
        continue;
      rec.cubin = sha256(cubins[i]);
      rec.cubin_size = cubins[i].size();
      rec.created = now_utc();
      if (!a.cache_hit) {
        LinkMetadata md = LinkMetadata::from_key(a.key);
        md.info_log = a.info_log;
        md.link_time_ms = rec.link_ms;
        md.created = std::time(nullptr);
        // The cubin is good whatever the cache does: a full disk or a read-only shared cache
        // costs the next process a link, not this one its result.
        if (auto st = cache.put(a.key, cubins[i], md); !st)
          a.warnings.push_back("not cached: " + st.error().str());
      }
      a.record = std::move(rec);
    }
  };
  unsigned jobs = opt.jobs ? opt.jobs : std::max(1u, std::thread::hardware_concurrency());
  jobs = std::min<unsigned>(jobs, static_cast<unsigned>(report.archs.size()));
  std::vector<std::thread> threads;
  for (unsigned j = 1; j < jobs; ++j)
    threads.emplace_back(work);
  work();
  for (std::thread &t : threads)
    t.join();

  if (opt.save_temps) {
    for (size_t i = 0; i < report.archs.size(); ++i) {
      const ArchLink &a = report.archs[i];
      fs::path dir = *opt.save_temps / a.arch;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec)
        return make_error(dir.string(), "cannot create: ", ec.message());
      for (size_t k = 0; k < plan.inputs.size(); ++k)
        if (auto st = write_file_atomic(
                dir / cat(k, "-", plan.inputs[k].digest.hex().substr(0, 12), ".fatbin"),
                plan.inputs[k].bytes);
            !st)
          return std::move(st).take_error();
      std::string opts;
      for (const std::string &o : a.options)
        opts += o + "\n";
      std::string log = a.info_log + a.details;
      for (auto [name, text] : {std::pair{"options.txt", &opts}, std::pair{"nvjitlink.log", &log}})
        if (auto st = write_file_atomic(dir / name, as_bytes(*text)); !st)
          return std::move(st).take_error();
      if (!cubins[i].empty())
        if (auto st = write_file_atomic(dir / "module.cubin", cubins[i]); !st)
          return std::move(st).take_error();
    }
  }

  if (!report.ok() || !opt.store_in_package)
    return report;

  // Store, under the lock every writer of this package takes, into the package as it is now:
  // links of other archs may have landed while this one ran (only the store is serialized, so
  // they run in parallel). Unless the packed code itself was replaced meanwhile, their records
  // stay, ours are added, and ours replace older ones for the same (arch, bridge, dispatcher).
  auto lock = PackageLock::acquire(package);
  if (!lock)
    return std::move(lock).take_error();
  auto current = Package::open(opt.package);
  if (!current)
    return std::move(current).take_error();
  auto packed = [](const Manifest &x) {
    std::vector<std::tuple<Digest, Role, std::string>> out;
    for (const ContainerRecord &c : x.containers)
      if (c.packed())
        out.emplace_back(c.digest, c.role, c.bridge);
    return out;
  };
  if (packed(current->manifest()) != packed(m))
    return make_error(subject, "the package was replaced while it was being linked (by "
                               "cudaq-rt-pack --force?): link it again");
  Manifest next_m = current->manifest();
  auto writer = PackageWriter::create(package);
  if (!writer)
    return std::move(writer).take_error();
  for (NewContainer &nc : plan.new_containers) {
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
  for (size_t i = 0; i < report.archs.size(); ++i) {
    const LinkRecord &rec = *report.archs[i].record;
    std::erase_if(next_m.links, [&](const LinkRecord &l) {
      return l.arch == rec.arch && l.bridge == rec.bridge && l.dispatcher == rec.dispatcher;
    });
    next_m.links.push_back(rec);
    if (auto st = writer->add_blob(rec.cubin, cubins[i]); !st)
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
  std::sort(next_m.links.begin(), next_m.links.end(), [](const LinkRecord &a, const LinkRecord &b) {
    auto sm = [](const LinkRecord &l) { return parse_arch(l.arch).value_or(TargetArch{}).sm; };
    return std::tuple(sm(a), a.arch, a.bridge, a.dispatcher) <
           std::tuple(sm(b), b.arch, b.bridge, b.dispatcher);
  });
  if (auto st = writer->commit(next_m, /*replace=*/true); !st)
    return std::move(st).take_error();
  return report;
}

} // namespace cudaq_rt
