#include "oci/transfer.h"

#include "package/oci_layout.h"
#include "package/signatures.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace fs = std::filesystem;

namespace cudaq_rt {

Expected<PushReport> push_package(const Package &package, Registry &registry) {
  auto signatures = package.signature_files();
  if (!signatures)
    return std::move(signatures).take_error();
  const OciImageManifest im =
      package_image_manifest(package.manifest(), package.manifest_text(), *signatures);
  const std::string image = im.to_json_text();
  PushReport report;
  report.manifest = sha256(image);
  const RegistryRef &ref = registry.ref();
  if (ref.digest && *ref.digest != report.manifest)
    return make_error("", ref.name(), ": names image manifest ", ref.digest->short_str(),
                      ", but the package's is ", report.manifest.short_str());
  // The config and the layers, each read (and so verified) only when the registry lacks it.
  std::vector<OciDescriptor> blobs = {im.config};
  blobs.insert(blobs.end(), im.layers.begin(), im.layers.end());
  for (const OciDescriptor &d : blobs) {
    ++report.blobs;
    auto there = registry.has_blob(d.digest);
    if (!there)
      return std::move(there).take_error();
    if (*there)
      continue;
    std::string bytes;
    if (d.digest == package.manifest_digest()) {
      bytes = package.manifest_text();
    } else if (d.media_type == signature_layer_media_type) {
      for (const auto &[name, text] : *signatures)
        if (sha256(text) == d.digest)
          bytes = text;
    } else {
      auto read = package.read_blob(d.digest);
      if (!read)
        return std::move(read).take_error();
      bytes = std::move(*read);
    }
    if (auto st = registry.put_blob(d.digest, as_bytes(bytes)); !st)
      return std::move(st).take_error();
    ++report.uploaded;
    report.bytes_uploaded += bytes.size();
  }
  if (auto st =
          registry.put_manifest(ref.manifest_reference(), oci_image_manifest_media_type, image);
      !st)
    return std::move(st).take_error();
  return report;
}

Expected<PushReport> push_package_to(const fs::path &dir, const RegistryRef &ref) {
  auto registry = Registry::open(ref, [](const char *v) -> const char * { return std::getenv(v); });
  if (!registry)
    return std::move(registry).take_error();
  auto package = Package::open(dir);
  if (!package)
    return std::move(package).take_error();
  return push_package(*package, **registry);
}

std::string format_push(const RegistryRef &ref, const PushReport &r) {
  return cat("pushed  ", ref.name(), "@", r.manifest.str(), ": ", r.blobs, " blobs, ", r.uploaded,
             " uploaded (", r.bytes_uploaded, " bytes), ", r.blobs - r.uploaded,
             " already there\n");
}

nlohmann::json push_json(const RegistryRef &ref, const PushReport &r) {
  return {{"reference", ref.name()},
          {"digest", r.manifest.str()},
          {"blobs", r.blobs},
          {"uploaded", r.uploaded},
          {"bytes_uploaded", r.bytes_uploaded}};
}

Expected<PullReport> pull_package(ImageSource &source, const fs::path &output_dir, bool replace,
                                  const FetchedManifest *given, const TrustedKeys *trusted,
                                  PullLayers layers) {
  const std::string name = source.name();
  Expected<FetchedManifest> fetched =
      given ? Expected<FetchedManifest>(*given) : source.get_manifest(source.manifest_reference());
  if (!fetched)
    return std::move(fetched).take_error();
  auto im = OciImageManifest::parse(fetched->bytes, name);
  if (!im)
    return std::move(im).take_error();
  if (im->config.size > max_manifest_bytes)
    return make_error("", name, ": its config is ", im->config.size,
                      " bytes, more than a package manifest may be");
  auto text = source.get_blob(im->config.digest, im->config.size);
  if (!text)
    return std::move(text).take_error();
  auto manifest = Manifest::parse(*text, name + " (config)");
  if (!manifest)
    return std::move(manifest).take_error();
  if (!valid_package_name(manifest->name))
    return make_error("", name, ": package name ", quote(manifest->name),
                      " is not a valid directory name");
  // The blobs the manifest refers to, as they are stored (a compressed one as its frame), each
  // with the size it records: a layer must be one of them or a signature, and every one of them
  // must be a layer.
  // What a reader of the package would refuse is refused here, before anything is written: a
  // compressed blob recorded as larger than one may hold, more signatures than a package may have.
  std::map<Digest, uint64_t> wanted;
  const std::map<Digest, uint64_t> claims = manifest->blob_sizes();
  for (const auto &[d, disk] : manifest->blobs_on_disk()) {
    wanted.emplace(disk.digest, disk.size);
    if (const uint64_t claimed = claims.at(d); disk.stored && claimed > max_compressed_blob_bytes)
      return make_error("", name, ": blob ", d.short_str(), " is recorded as ", claimed,
                        " bytes, more than a compressed blob may hold (", max_compressed_blob_bytes,
                        "): refused");
  }
  const size_t signature_layers =
      std::count_if(im->layers.begin(), im->layers.end(), [](const OciDescriptor &l) {
        return l.media_type == signature_layer_media_type;
      });
  if (signature_layers > max_signature_files)
    return make_error("", name, ": ", signature_layers, " signature layers, more than the ",
                      max_signature_files, " a package may have: refused");
  std::set<Digest> have;
  for (const OciDescriptor &l : im->layers) {
    if (l.media_type == signature_layer_media_type) {
      if (signature_layer_file_name(l).empty())
        return make_error("", name, ": signature layer ", l.digest.short_str(),
                          " has no valid io.cudaq-rt.key-id annotation");
      if (l.size > max_signature_bytes)
        return make_error("", name, ": signature layer ", l.digest.short_str(), " is ", l.size,
                          " bytes: not a signature");
      continue;
    }
    auto w = wanted.find(l.digest);
    if (w == wanted.end())
      return make_error("", name, ": layer ", l.digest.short_str(), " (", quote(l.media_type),
                        ") is not a blob the package's manifest names");
    if (w->second != l.size)
      return make_error("", name, ": layer ", l.digest.short_str(), " is ", l.size,
                        " bytes by its descriptor, ", w->second, " by the package's manifest");
    have.insert(l.digest);
  }
  for (const auto &[d, size] : wanted)
    if (!have.count(d))
      return make_error("", name, ": the package's manifest names blob ", d.short_str(),
                        ", which the image manifest does not carry");

  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec)
    return make_error(output_dir.string(), "cannot create: ", ec.message());
  const fs::path dir = output_dir / (manifest->name + package_suffix);
  auto lock = PackageLock::acquire(dir);
  if (!lock)
    return std::move(lock).take_error();
  if (!replace && fs::exists(fs::symlink_status(dir, ec)))
    return make_error(dir.string(), "already exists (use --force to replace it)");
  if (replace && fs::exists(fs::symlink_status(dir, ec)))
    if (auto st = check_is_package(dir); !st)
      return std::move(st).take_error();
  auto writer = PackageWriter::create(dir);
  if (!writer)
    return std::move(writer).take_error();
  PullReport report;
  report.dir = dir;
  report.manifest = fetched->digest;
  report.bytes = fetched->bytes.size() + text->size();
  report.blobs = 1;
  std::vector<std::pair<std::string, std::string>> signatures;
  for (const OciDescriptor &l : im->layers) {
    if (layers == PullLayers::signatures && l.media_type != signature_layer_media_type)
      continue;
    auto bytes = source.get_blob(l.digest, l.size);
    if (!bytes)
      return std::move(bytes).take_error();
    ++report.blobs;
    report.bytes += bytes->size();
    if (l.media_type == signature_layer_media_type) {
      signatures.emplace_back(signature_layer_file_name(l), *bytes);
      if (auto st = writer->add_signature(signatures.back().first, *bytes); !st)
        return std::move(st).take_error();
    } else if (auto st = writer->add_blob(l.digest, as_bytes(*bytes)); !st) {
      return std::move(st).take_error();
    }
  }
  if (trusted) {
    std::sort(signatures.begin(), signatures.end());
    auto by = verify_signature_files(name, manifest->name, im->config.digest, signatures, *trusted);
    if (!by)
      return std::move(by).take_error();
    report.verified_by = *by;
  }
  if (auto st = writer->commit(*manifest, replace, {}, *text); !st)
    return std::move(st).take_error();
  return report;
}

} // namespace cudaq_rt
