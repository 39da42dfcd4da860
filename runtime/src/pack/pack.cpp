#include "pack/pack.h"

#include "base/atomic_file.h"
#include "base/digest.h"
#include "cudaq_rt/wire.h"
#include "formats/export_records.h"
#include "formats/fatbin.h"
#include "formats/input_file.h"
#include "package/containers.h"
#include "package/package.h"

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

constexpr const char *relfatbin_what = "section __nv_relfatbin";

// An export as found in one code unit, with what it needs for the clash rules.
struct FoundExport {
  ExportRecord record;
  size_t source;
  std::string unit; // for messages
  Role role;
  std::set<Digest> unit_containers;
};

bool subset(const std::set<Digest> &a, const std::set<Digest> &b) {
  return std::includes(b.begin(), b.end(), a.begin(), a.end());
}

// The first application input's file name up to its first '.' (the first input's, if none is
// application code).
std::string default_name(const std::vector<PackInput> &inputs) {
  if (inputs.empty())
    return "";
  auto app = std::find_if(inputs.begin(), inputs.end(),
                          [](const PackInput &in) { return in.role == Role::application; });
  std::string file = fs::path(app != inputs.end() ? app->path : inputs[0].path).filename().string();
  return file.substr(0, file.find('.'));
}

std::string arch_list(const std::vector<uint32_t> &archs) {
  std::string s;
  for (uint32_t a : archs)
    s += cat(s.empty() ? "" : ",", "sm_", a);
  return s;
}

// Resolves exports: the same name seen twice is one export only when one unit's code is part of
// the other's (an object packed beside the executable it was linked into); otherwise two
// different functions would claim one name. Then no two names may share a function_id.
// A bridge's hook sets are not names of the module: every bridge whose code has the set says so,
// in a name space of their own (one entry per set, listing each source).
Expected<std::vector<ExportEntry>> resolve_exports(const std::vector<FoundExport> &found) {
  std::map<std::string, std::vector<const FoundExport *>> by_name;
  const auto hooks = [](const FoundExport &f) { return f.record.kind == ExportKind::bridge_hooks; };
  for (const FoundExport &f : found)
    by_name[(hooks(f) ? "bridge-hooks " : "") + f.record.name].push_back(&f);
  std::vector<ExportEntry> out;
  for (auto &[key, all] : by_name) {
    const FoundExport &first = *all.front();
    const std::string &name = first.record.name;
    ExportEntry e;
    e.name = name;
    e.kind = export_kind_name(first.record.kind);
    e.function_id = first.record.function_id;
    e.symbol = first.record.kind == ExportKind::handler ? handler_symbol(name) : name;
    e.concurrent = first.record.concurrent;
    e.direct = first.record.direct;
    e.role = first.role;
    for (size_t i = 0; i < all.size(); ++i) {
      const FoundExport &f = *all[i];
      for (size_t k = 0; k < i; ++k) {
        const FoundExport &g = *all[k];
        bool same_code =
            hooks(f) || (f.unit != g.unit && (subset(f.unit_containers, g.unit_containers) ||
                                              subset(g.unit_containers, f.unit_containers)));
        if (f.record.kind != g.record.kind || f.record.concurrent != g.record.concurrent ||
            f.record.direct != g.record.direct || !same_code)
          return make_error(f.unit, export_kind_name(f.record.kind), " ", quote(name),
                            " is also exported by ", quote(g.unit),
                            " with different code: export names must be unique");
      }
      if (std::find(e.sources.begin(), e.sources.end(), f.source) == e.sources.end())
        e.sources.push_back(f.source);
    }
    out.push_back(std::move(e));
  }
  // Sorted by name (the hook sets' entries were keyed apart).
  std::stable_sort(out.begin(), out.end(),
                   [](const ExportEntry &a, const ExportEntry &b) { return a.name < b.name; });
  std::map<uint32_t, const ExportEntry *> by_id;
  for (const ExportEntry &e : out) {
    if (e.kind != export_kind_name(ExportKind::handler))
      continue;
    auto [it, fresh] = by_id.emplace(e.function_id, &e);
    if (!fresh)
      return make_error(by_name[e.name].front()->unit, "handlers ", quote(it->second->name),
                        " (in ", quote(by_name[it->second->name].front()->unit), ") and ",
                        quote(e.name), " have the same function_id ", hex(e.function_id),
                        " (FNV-1a collision): rename one of them");
  }
  return out;
}

} // namespace

std::vector<std::string> code_warnings(const Manifest &m) {
  // One warning per input and kind of shortfall: a library of hundreds of translation units
  // built without LTO-IR says so once, not hundreds of times.
  struct Group {
    std::vector<const ContainerRecord *> containers;
  };
  std::vector<std::pair<std::string, Group>> groups; // keyed by "where|how", in input order
  std::map<std::string, size_t> group_index;         // key -> place in groups
  auto how_of = [](const ContainerRecord &c, bool plural) {
    std::set<uint32_t> cubins;
    bool ptx = false;
    for (const EntryRecord &e : c.entries) {
      if (e.kind == "cubin")
        cubins.insert(e.arch);
      ptx |= e.kind == "ptx";
    }
    std::string how = ptx ? "from PTX" : "";
    if (!cubins.empty())
      how += cat(how.empty() ? "" : ", or ", "for ",
                 arch_list(std::vector<uint32_t>(cubins.begin(), cubins.end())), " from ",
                 plural ? "their cubins" : "its cubins");
    return how.empty() ? std::string("nowhere (no PTX or cubin either)") : how;
  };
  auto where_of = [&](const ContainerRecord &c) {
    if (c.origins.empty())
      return c.digest.short_str();
    const Origin &o = c.origins[0];
    return m.sources[o.source].path + (o.member.empty() ? "" : "(" + o.member + ")");
  };
  for (const ContainerRecord &c : m.containers) {
    if (c.has_ltoir())
      continue;
    std::string key = where_of(c) + "|" + how_of(c, false);
    auto [at, fresh] = group_index.emplace(key, groups.size());
    if (fresh)
      groups.push_back({key, Group{}});
    groups[at->second].second.containers.push_back(&c);
  }
  std::vector<std::string> out;
  for (auto &[key, g] : groups) {
    const ContainerRecord &first = *g.containers.front();
    bool one = g.containers.size() == 1;
    std::string how = how_of(first, !one);
    std::string what = one ? cat("container ", first.origins.empty() ? 0 : first.origins[0].index,
                                 " (", first.digest.short_str(), ") has no LTO-IR: it can")
                           : cat(g.containers.size(), " containers have no LTO-IR: they can");
    out.push_back(cat(quote(where_of(first)), ": ", what, " only be linked ", how, "; build ",
                      one ? "it" : "them", " with -gencode arch=compute_NN,code=lto_NN"));
  }
  return out;
}

Expected<Inspection> inspect(const std::vector<PackInput> &inputs, const std::string &name_in,
                             const ContainerSink &sink) {
  Inspection out;
  Manifest &m = out.manifest;
  if (inputs.empty())
    return make_error("", "no input files");
  if (!name_in.empty() && !valid_package_name(name_in))
    return make_error(name_in, "is not a valid package name (letters, digits, '.', '_', '-')");
  m.created_by = "cudaq-rt-pack " CUDAQ_RT_VERSION;

  std::map<Digest, size_t> container_index;
  std::vector<FoundExport> found;
  std::set<std::string> seen; // absolute paths, whatever the manifest records
  for (size_t i = 0; i < inputs.size(); ++i) {
    const PackInput &pin = inputs[i];
    auto in = InputFile::open(pin.path);
    if (!in)
      return std::move(in).take_error();
    fs::path abs = absolute_normal_path(pin.path);
    std::error_code ec;
    if (fs::path canonical = fs::weakly_canonical(abs, ec); !ec)
      abs = canonical;
    if (!seen.insert(abs.string()).second)
      return make_error(pin.path, "is given twice");
    bool any_relfatbin = false, any_nv_fatbin = false;
    for (const CodeUnit &u : in->units()) {
      any_relfatbin |= u.has_relfatbin;
      any_nv_fatbin |= u.has_nv_fatbin;
    }
    if (!any_relfatbin) {
      const char *unit = in->kind() == InputKind::archive ? "no member has" : "no";
      if (any_nv_fatbin)
        return make_error(pin.path, unit,
                          " __nv_relfatbin section, only .nv_fatbin: it was "
                          "built without relocatable device code (rebuild with -rdc=true)");
      return make_error(pin.path, "no device code: ", unit, " __nv_relfatbin section");
    }

    // Every header is checked before any byte is hashed: a container that claims more than the
    // file holds is refused at once, not after gigabytes of SHA-256.
    struct UnitCode {
      std::string name, member;
      std::vector<Container> containers;
      std::vector<ExportRecord> exports;
    };
    std::vector<UnitCode> units;
    const char *what = in->kind() == InputKind::fatbin ? "fatbin" : relfatbin_what;
    for (const CodeUnit &u : in->units()) {
      if (!u.has_relfatbin)
        continue;
      std::string unit = in->unit_name(u);
      auto containers = split_unit(*in, u);
      if (!containers)
        return std::move(containers).take_error();
      auto records = parse_export_records(u.exports, unit);
      if (!records)
        return std::move(records).take_error();
      units.push_back({std::move(unit), u.member, std::move(*containers), std::move(*records)});
    }

    // The whole file's digest is the longest single piece of work in a pack (SHA-256 of every
    // byte): it runs on a thread of its own while the containers are hashed here.
    std::future<Digest> file_digest =
        std::async(std::launch::async, [bytes = in->bytes()] { return sha256(bytes); });
    m.sources.push_back({abs.string(), input_kind_name(in->kind()), in->bytes().size(), {}});
    for (UnitCode &unit : units) {
      std::set<Digest> unit_digests;
      for (size_t k = 0; k < unit.containers.size(); ++k) {
        ContainerRecord record =
            describe_container(unit.containers[k], i, unit.member, k, pin.role, pin.bridge);
        const Container &c = unit.containers[k];
        const Digest d = record.digest;
        unit_digests.insert(d);
        auto [it, fresh] = container_index.emplace(d, m.containers.size());
        if (!fresh) {
          ContainerRecord &rec = m.containers[it->second];
          if (rec.role != pin.role || rec.bridge != pin.bridge)
            return make_error(unit.name, what, ": container ", k, " at offset ", hex(c.offset),
                              " is also packed as ", role_name(rec.role), " code from ",
                              quote(m.sources[rec.origins[0].source].path),
                              ": one container cannot play two roles");
          rec.origins.push_back(record.origins[0]);
          continue;
        }
        if (sink)
          if (auto st = sink(d, c.bytes); !st)
            return std::move(st).take_error();
        out.container_bytes.push_back(c.bytes);
        m.containers.push_back(std::move(record));
      }
      for (ExportRecord &r : unit.exports)
        found.push_back({std::move(r), i, unit.name, pin.role, unit_digests});
    }
    if (pin.role == Role::dispatcher &&
        std::none_of(found.begin(), found.end(), [&](const FoundExport &f) {
          return f.source == i && f.record.kind == ExportKind::dispatch_kernel;
        }))
      return make_error(pin.path, "exports no dispatch kernel: mark the kernel with "
                                  "CUDAQ_RT_EXPORT_DISPATCH_KERNEL(name)");
    m.sources[i].digest = file_digest.get();
    out.files.push_back(std::move(*in));
  }
  // The default name is checked only now, so that an input that cannot be read (a directory
  // named ".") is reported as such rather than as the name it would give.
  m.name = name_in.empty() ? default_name(inputs) : name_in;
  auto exports = resolve_exports(found);
  if (!exports)
    return std::move(exports).take_error();
  m.exports = std::move(*exports);
  out.warnings = code_warnings(m);
  return out;
}

Status add_aliases(Manifest &m, const std::vector<std::string> &specs) {
  Manifest with = m;
  for (const std::string &spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return make_error("", "alias ", quote(spec), ": expected NAME=HANDLER");
    AliasEntry a{spec.substr(0, eq), spec.substr(eq + 1), 0};
    a.function_id = cudaq_rt_function_id(a.name.c_str());
    if (auto st = check_alias(with, a); !st)
      return make_error("", "alias ", quote(spec), ": ", st.error().message);
    with.aliases.push_back(std::move(a));
  }
  std::sort(with.aliases.begin(), with.aliases.end(),
            [](const AliasEntry &a, const AliasEntry &b) { return a.name < b.name; });
  m.aliases = std::move(with.aliases);
  return Status::ok();
}

namespace {

// Where a package is being written: its directory made, its lock held when it replaces one, and
// the writer of its temporary directory.
struct PackTarget {
  fs::path dir;
  MadeDirectories made;
  std::optional<PackageLock> lock;
  PackageWriter writer;
};

Expected<PackTarget> open_target(const PackOptions &options, const std::string &name) {
  fs::path dir = options.output_dir / (name + package_suffix);
  std::error_code ec;
  if (!options.force && fs::exists(fs::symlink_status(dir, ec)))
    return make_error(dir.string(), "already exists (use --force to replace it)");
  auto made = MadeDirectories::make(options.output_dir);
  if (!made)
    return std::move(made).take_error();
  // Replacing a package is a read-modify-write race with cudaq-rt-link storing into it: take the
  // lock link takes. Without --force the final rename cannot clobber anything, so no lock.
  std::optional<PackageLock> lock;
  if (options.force) {
    auto l = PackageLock::acquire(dir);
    if (!l)
      return std::move(l).take_error();
    lock.emplace(std::move(*l));
    // --force replaces a package, never whatever else happens to have its name.
    if (fs::exists(fs::symlink_status(dir, ec)))
      if (auto st = check_is_package(dir); !st)
        return std::move(st).take_error();
  }
  auto writer =
      PackageWriter::create(dir, options.compress ? BlobEncoding::zstd : BlobEncoding::identity);
  if (!writer)
    return std::move(writer).take_error();
  return PackTarget{dir, std::move(*made), std::move(lock), std::move(*writer)};
}

} // namespace

Expected<PackResult> pack(const PackOptions &options) {
  // When the package's place is clear before the inputs are read (a valid name, nothing in the
  // way), each container is written as soon as it is hashed, while the whole file is still being
  // hashed on another thread; otherwise the inputs are read first, so that what is wrong with
  // them is said before what is wrong with the name or the output directory.
  std::optional<PackTarget> target;
  const std::string early_name = options.name.empty() ? default_name(options.inputs) : options.name;
  std::error_code ec;
  if (valid_package_name(early_name) &&
      (options.force ||
       !fs::exists(fs::symlink_status(options.output_dir / (early_name + package_suffix), ec)))) {
    // One that cannot be opened is opened again, and refused, once the inputs have been read.
    if (auto t = open_target(options, early_name))
      target.emplace(std::move(*t));
  }
  ContainerSink sink;
  if (target)
    sink = [&](const Digest &d, std::span<const uint8_t> bytes) {
      return target->writer.add_blob(d, bytes);
    };
  auto inspection = inspect(options.inputs, options.name, sink);
  if (!inspection)
    return std::move(inspection).take_error();
  if (auto st = add_aliases(inspection->manifest, options.aliases); !st)
    return std::move(st).take_error();
  if (!target) {
    // Only a package needs a name that can be a directory; a listing does not.
    if (!valid_package_name(inspection->manifest.name))
      return make_error(options.inputs.front().path, "gives no valid package name (",
                        quote(inspection->manifest.name), "): name the package with --name");
    auto t = open_target(options, inspection->manifest.name);
    if (!t)
      return std::move(t).take_error();
    target.emplace(std::move(*t));
    for (size_t i = 0; i < inspection->manifest.containers.size(); ++i)
      if (auto st = target->writer.add_blob(inspection->manifest.containers[i].digest,
                                            inspection->container_bytes[i]);
          !st)
        return std::move(st).take_error();
  }
  // Each container was copied exactly once, from the mapping it was hashed in, into its blob. A
  // rewritten input would make those bytes differ from their digest: refuse rather than store it.
  for (size_t i = 0; i < inspection->files.size(); ++i) {
    const InputFile &f = inspection->files[i];
    std::error_code ec;
    if (fs::file_size(f.path(), ec) != f.bytes().size() || ec ||
        fs::last_write_time(f.path(), ec) != f.mtime())
      return make_error(f.path(), "changed while it was being packed");
  }
  // What is written records each input by its file name (messages above named its path), so
  // that the same inputs pack to the same bytes wherever they are, unless asked otherwise.
  Manifest written = inspection->manifest;
  if (!options.absolute_paths)
    for (Source &src : written.sources)
      src.path = fs::path(src.path).filename().string();
  std::vector<const SigningKey *> signers;
  if (options.signer)
    signers.push_back(options.signer.get());
  written = target->writer.as_written(written);
  if (auto st = target->writer.commit(written, options.force, signers); !st)
    return std::move(st).take_error();
  target->made.keep();
  return PackResult{target->dir, std::move(*inspection), std::move(written)};
}

std::string format_listing(const Manifest &m, const std::string &what) {
  std::ostringstream out;
  uint64_t bytes = 0;
  for (const ContainerRecord &c : m.containers)
    bytes += c.size;
  out << escape(what) << ": " << m.sources.size() << " source(s), " << m.containers.size()
      << " container(s) (" << bytes << " bytes), " << m.exports.size() << " export(s), "
      << m.links.size() << " link(s)\n";
  out << "sources:\n";
  for (size_t i = 0; i < m.sources.size(); ++i)
    out << "  [" << i << "] " << escape(m.sources[i].path) << "  " << escape(m.sources[i].kind)
        << ", " << m.sources[i].size << " bytes, " << m.sources[i].digest.short_str() << "\n";
  out << "containers:\n";
  for (const ContainerRecord &c : m.containers) {
    out << "  " << c.digest.short_str() << "  " << c.size << " bytes  " << role_name(c.role);
    if (c.role == Role::bridge)
      out << " " << escape(c.bridge);
    for (const Origin &o : c.origins)
      out << "  [" << o.source << "]" << (o.member.empty() ? "" : "(" + escape(o.member) + ")")
          << "#" << o.index << "@" << hex(o.offset);
    if (!c.packed())
      out << "  (added by " << c.added_by << ")";
    out << "\n";
    for (const EntryRecord &e : c.entries) {
      out << "    " << escape(e.kind) << " sm_" << e.arch << "  " << e.payload_size << " bytes";
      if (e.compression != "none")
        out << " " << escape(e.compression) << " (" << e.uncompressed_size << " uncompressed)";
      out << "\n";
    }
  }
  std::map<std::string, std::set<uint32_t>> by_kind;
  for (const ContainerRecord &c : m.containers)
    for (const EntryRecord &e : c.entries)
      by_kind[e.kind].insert(e.arch);
  out << "archs by kind:";
  for (auto &[kind, archs] : by_kind)
    out << "  " << escape(kind) << " "
        << arch_list(std::vector<uint32_t>(archs.begin(), archs.end()));
  out << "\nexports:\n";
  for (const ExportEntry &e : m.exports) {
    out << "  " << escape(e.kind) << " " << escape(e.name);
    if (e.kind == "handler")
      out << "  function_id " << hex(e.function_id);
    out << "  " << role_name(e.role) << (e.concurrent ? "  concurrent" : "")
        << (e.direct ? "  direct" : "") << "\n";
  }
  if (!m.aliases.empty()) {
    out << "aliases:\n";
    for (const AliasEntry &a : m.aliases)
      out << "  " << escape(a.name) << " -> " << escape(a.handler) << "  function_id "
          << hex(a.function_id) << "\n";
  }
  if (!m.links.empty()) {
    out << "links:\n";
    for (const LinkRecord &l : m.links)
      out << "  " << l.arch.str() << "  " << linked_mode_name(l.lto) << "  bridge "
          << (l.bridge.empty() ? "-" : escape(l.bridge)) << "  dispatcher " << escape(l.dispatcher)
          << "  cubin " << l.cubin.short_str() << " (" << l.cubin_size << " bytes)  nvJitLink "
          << escape(l.nvjitlink_version) << "\n";
  }
  if (m.recipe) {
    const LinkRecipe &r = *m.recipe;
    out << "recipe: a link " << escape(r.program) << " made through nvJitLink "
        << escape(r.nvjitlink_version) << " for " << escape(r.arch) << ", output " << r.output
        << ", key " << r.cache_key.short_str() << "\n  options:";
    for (const std::string &o : r.options)
      out << " " << escape(o);
    out << "\n";
    for (size_t i = 0; i < r.inputs.size(); ++i)
      out << "  input [" << i << "] " << nvjitlink_input_type_name(r.inputs[i].type) << " "
          << escape(r.inputs[i].name) << "  " << r.inputs[i].size << " bytes  "
          << r.inputs[i].digest.short_str() << "\n";
  }
  return out.str();
}

} // namespace cudaq_rt
