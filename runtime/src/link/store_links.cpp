// What a link leaves in the package and beyond it: the cubins and link records stored into the
// package under its lock (store_links, with the keys whose signatures that breaks), the report's
// ending both link_package and a recording's link share (store_report), and the package's cubins
// pushed to the remote cache (push_links, --cache-push).
#include "link/link.h"

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

// Two records of one link: the same inputs, options, nvJitLink and cubin; only when it was recorded
// may differ.
bool same_link(const LinkRecord &a, const LinkRecord &b) {
  return a.arch == b.arch && a.bridge == b.bridge && a.dispatcher == b.dispatcher &&
         a.lto == b.lto && a.options == b.options && a.nvjitlink_version == b.nvjitlink_version &&
         a.inputs == b.inputs && a.cubin == b.cubin && a.cubin_size == b.cubin_size &&
         a.cache_key == b.cache_key;
}

// The keys whose signature files are over the package's manifest as it is, in key order.
Expected<std::vector<KeyId>> current_signers(const Package &package) {
  auto files = package.signature_files();
  if (!files)
    return std::move(files).take_error();
  std::vector<KeyId> keys;
  for (const auto &[name, text] : *files) {
    auto sig = PackageSignature::parse(text, name);
    if (sig && sig->manifest == package.manifest_digest())
      keys.push_back(sig->key);
  }
  return keys;
}

} // namespace

std::optional<std::string> broken_signatures_warning(const std::string &package,
                                                     const std::vector<KeyId> &keys) {
  if (keys.empty())
    return std::nullopt;
  std::string names;
  for (const KeyId &k : keys)
    names += cat(names.empty() ? "" : ", ", k.short_str());
  const bool one = keys.size() == 1;
  return make_error(package, "the stored links changed its manifest: the signature",
                    one ? " of key " : "s of keys ", names,
                    one ? " no longer holds" : " no longer hold", " (sign it again: cudaq-rt-link ",
                    escape(package), " --sign KEY)")
      .str();
}

Expected<std::vector<KeyId>> store_links(const fs::path &package_path, const LinkPlan &plan,
                                         std::span<const ArchLink> links, const TrustPolicy &trust,
                                         BlobEncoding encoding) {
  // The records' time (cudaq-rt-run --store comes here without check_link_options).
  if (auto epoch = source_date_epoch(); !epoch)
    return std::move(epoch).take_error();
  const fs::path package = absolute_normal_path(package_path);
  auto lock = PackageLock::acquire(package);
  if (!lock)
    return std::move(lock).take_error();
  auto current = Package::open(package_path);
  if (!current)
    return std::move(current).take_error();
  if (trust.trusted)
    if (auto key = verify_package(*current, *trust.trusted); !key)
      return std::move(key).take_error();
  if (packed_code(current->manifest()) != plan.packed)
    return make_error(plan.subject, "the package was replaced while it was being linked (by "
                                    "cudaq-rt-pack --force?): link it again");
  Manifest next_m = current->manifest();
  auto writer = PackageWriter::create(package, encoding);
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
      return std::move(st).take_error();
    if (!next_m.find_container(nc.record.digest))
      next_m.containers.push_back(nc.record);
  }
  for (const ArchLink &a : links) {
    const LinkRecord &rec = *a.record;
    auto same_target = [&](const LinkRecord &l) {
      return l.arch == rec.arch && l.bridge == rec.bridge && l.dispatcher == rec.dispatcher;
    };
    // The same link again (a relink the cache answered): the record stays as it was, its time
    // included, so that the manifest, and the signatures over it, do not change for nothing.
    auto kept = std::find_if(next_m.links.begin(), next_m.links.end(), same_target);
    if (kept != next_m.links.end() && same_link(*kept, rec))
      continue;
    std::erase_if(next_m.links, same_target);
    next_m.links.push_back(rec);
    if (auto st = writer->add_blob(rec.cubin, a.cubin); !st)
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
  if (next_m.recipe)
    for (const RecipeInput &in : next_m.recipe->inputs)
      if (auto st = writer->carry_blob(*current, in.digest); !st)
        return std::move(st).take_error();
  std::sort(next_m.links.begin(), next_m.links.end(), [](const LinkRecord &a, const LinkRecord &b) {
    return std::tie(a.arch, a.bridge, a.dispatcher) < std::tie(b.arch, b.bridge, b.dispatcher);
  });
  if (auto st = writer->carry_signatures(*current); !st)
    return std::move(st).take_error();
  std::vector<const SigningKey *> signers;
  if (trust.signer)
    signers.push_back(trust.signer.get());
  auto held = current_signers(*current);
  if (!held)
    return std::move(held).take_error();
  if (auto st = writer->commit(next_m, /*replace=*/true, signers); !st)
    return std::move(st).take_error();
  auto written = Package::open(package_path);
  if (!written)
    return std::move(written).take_error();
  std::vector<KeyId> broken;
  if (written->manifest_digest() != current->manifest_digest())
    for (const KeyId &k : *held)
      if (!trust.signer || !(trust.signer->id() == k))
        broken.push_back(k);
  return broken;
}

Status store_report(const LinkOptions &opt, const LinkPlan &plan, LinkReport &report) {
  auto broken = store_links(opt.package, plan, report.archs, opt.trust,
                            opt.compress ? BlobEncoding::zstd : BlobEncoding::identity);
  if (!broken)
    return std::move(broken).take_error();
  report.unsigned_by = std::move(*broken);
  if (const SigningKey *signer = opt.trust.signer.get())
    report.signed_by = signer->id();
  return Status::ok();
}

Expected<std::vector<PushedLink>> push_links(const fs::path &package_path, const LinkCache &cache,
                                             const TrustedKeys *trusted) {
  if (!cache.remote())
    return make_error(package_path.string(),
                      "no remote cache to push to: give --remote-cache URL or set "
                      "CUDAQ_RT_REMOTE_CACHE");
  auto pkg = Package::open(package_path);
  if (!pkg)
    return std::move(pkg).take_error();
  // Under --trust, only a signed package's cubins go to the fleet.
  if (trusted)
    if (auto key = verify_package(*pkg, *trusted); !key)
      return std::move(key).take_error();
  std::vector<PushedLink> out;
  for (const LinkRecord &l : pkg->manifest().links) {
    PushedLink p{l.arch.str(), l.cache_key, 0, std::nullopt};
    auto cubin = pkg->read_blob(l.cubin);
    if (!cubin)
      return std::move(cubin).take_error();
    // The entry the link stored, rebuilt from the record: the same key, cubin and metadata, so
    // that a fleet machine that fetches it gets what its own link would have given.
    LinkMetadata md;
    md.arch = l.arch.str();
    md.options = normalize_link_options(l.options);
    md.nvjitlink_version = l.nvjitlink_version;
    md.inputs = l.inputs;
    md.form = LinkedForm{l.lto.value_or(LtoMode::whole)};
    // A recording's links are keyed as the interposer keys them (recorded_link.h).
    if (pkg->manifest().recipe)
      md.form = LinkedForm{LtoMode::whole, false, true};
    md.link_time_ms = l.link_ms;
    md.created = static_cast<int64_t>(std::time(nullptr));
    std::vector<uint8_t> entry = cache.encode(l.cache_key, as_bytes(*cubin), md);
    p.bytes = entry.size();
    if (auto st = cache.push_remote(l.cache_key, entry); !st)
      p.error = make_error(package_path.string(), l.arch, ": ", st.error().message);
    out.push_back(std::move(p));
  }
  return out;
}

} // namespace cudaq_rt
