// An OCI image layout on disk as an image source (layout_source.h).
#include "oci/layout_source.h"

#include "base/atomic_file.h"
#include "package/oci_layout.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {

namespace {

constexpr std::string_view layout_scheme = "oci:";
// index.json lists descriptors: a layout of thousands of images is still well under this.
constexpr uint64_t max_index_bytes = uint64_t{16} << 20;

} // namespace

bool is_layout_reference(std::string_view text) {
  return text.starts_with(layout_scheme) && !text.starts_with("oci://");
}

bool is_foreign_layout(const fs::path &dir) {
  struct stat st;
  return ::lstat((dir / "index.json").c_str(), &st) == 0 &&
         ::lstat((dir / "oci-layout").c_str(), &st) == 0 &&
         ::lstat((dir / "manifest.json").c_str(), &st) != 0 && errno == ENOENT;
}

Expected<LayoutRef> LayoutRef::parse(std::string_view text) {
  if (!is_layout_reference(text))
    return make_error("", quote(text), " is not an OCI layout reference: oci:DIR[:TAG]");
  std::string_view rest = text.substr(layout_scheme.size());
  LayoutRef ref;
  if (const size_t at = rest.rfind("@sha256:"); at != std::string_view::npos) {
    auto d = Digest::parse(rest.substr(at + 1));
    if (!d)
      return make_error("", quote(text), ": the digest after '@' is not sha256:<64 hex digits>");
    ref.reference = d->str();
    rest = rest.substr(0, at);
  } else if (const size_t colon = rest.rfind(':');
             colon != std::string_view::npos && rest.find('/', colon) == std::string_view::npos) {
    ref.reference = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
    if (ref.reference.empty())
      return make_error("", quote(text), ": an empty tag after ':'");
  }
  if (rest.empty())
    return make_error("", quote(text), ": no directory: oci:DIR[:TAG]");
  ref.dir = fs::path(rest);
  return ref;
}

std::string LayoutRef::name() const {
  if (reference.empty())
    return cat(layout_scheme, dir.string());
  return cat(layout_scheme, dir.string(), reference.starts_with("sha256:") ? "@" : ":", reference);
}

Expected<std::unique_ptr<LayoutSource>> LayoutSource::open(LayoutRef ref) {
  const fs::path marker = ref.dir / "oci-layout";
  auto file = RegularFile::open(marker, {.max_bytes = 64 << 10});
  if (!file)
    return std::move(file).take_error();
  if (!*file) {
    std::error_code ec;
    if (!fs::is_directory(ref.dir, ec))
      return make_error(ref.dir.string(), "no such directory (an OCI image layout)");
    return make_error(ref.dir.string(), "not an OCI image layout: no oci-layout file");
  }
  auto text = (*file)->read();
  if (!text)
    return std::move(text).take_error();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  auto version = j.is_object() ? j.find("imageLayoutVersion") : j.end();
  if (!j.is_object() || version == j.end() || !version->is_string() ||
      !version->get<std::string>().starts_with("1."))
    return make_error(marker.string(), "is not an image layout version 1.x marker");
  return std::unique_ptr<LayoutSource>(new LayoutSource(std::move(ref)));
}

Expected<FetchedManifest> LayoutSource::get_manifest(const std::string &reference) {
  const fs::path index_path = ref_.dir / "index.json";
  auto file = RegularFile::open(index_path, {.max_bytes = max_index_bytes});
  if (!file)
    return std::move(file).take_error();
  if (!*file)
    return make_error(index_path.string(), "missing: not an OCI image layout");
  auto text = (*file)->read();
  if (!text)
    return std::move(text).take_error();
  auto listed = parse_image_index(*text, index_path.string());
  if (!listed)
    return std::move(listed).take_error();
  auto tag_of = [](const OciDescriptor &d) {
    auto it = d.annotations.find(oci_ref_name_annotation);
    return it == d.annotations.end() ? std::string() : it->second;
  };
  const OciDescriptor *chosen = nullptr;
  if (reference.empty()) {
    if (listed->size() != 1) {
      std::string tags;
      for (const OciDescriptor &d : *listed)
        tags += cat(tags.empty() ? "" : ", ", tag_of(d).empty() ? d.digest.str() : tag_of(d));
      return make_error(index_path.string(), "holds ", listed->size(), " images (", tags,
                        "): name one, oci:DIR:TAG");
    }
    chosen = &listed->front();
  } else {
    for (const OciDescriptor &d : *listed)
      if (reference.starts_with("sha256:") ? d.digest.str() == reference : tag_of(d) == reference)
        chosen = &d;
    if (!chosen)
      return make_error(index_path.string(), "has no image ", quote(reference));
  }
  if (chosen->media_type != oci_image_manifest_media_type)
    return make_error(name(), ": names a ", quote(chosen->media_type),
                      ", not an OCI image manifest (an image index of several platforms is not a "
                      "package)");
  if (chosen->size > max_manifest_bytes)
    return make_error(name(), ": its image manifest is ", chosen->size, " bytes, more than ",
                      max_manifest_bytes);
  auto bytes = get_blob(chosen->digest, chosen->size);
  if (!bytes)
    return std::move(bytes).take_error();
  return FetchedManifest{std::move(*bytes), chosen->digest, chosen->media_type};
}

Expected<std::string> LayoutSource::get_blob(const Digest &d, uint64_t size) {
  const fs::path path = ref_.dir / "blobs" / "sha256" / d.hex();
  if (size > max_blob_bytes)
    return make_error(path.string(), "is ", size,
                      " bytes by its descriptor, more than a blob may "
                      "be (",
                      max_blob_bytes, "): refused");
  auto file = RegularFile::open(path, {.max_bytes = size});
  if (!file)
    return std::move(file).take_error();
  if (!*file)
    return make_error(path.string(), "missing: the layout lacks blob ", d.short_str());
  if ((*file)->size() != size)
    return make_error(path.string(), "is ", (*file)->size(), " bytes, but its descriptor says ",
                      size);
  auto bytes = (*file)->read();
  if (!bytes)
    return bytes;
  if (sha256(*bytes) != d)
    return make_error(path.string(), "does not match its digest ", d.short_str(),
                      " (the layout is corrupt or was modified)");
  return bytes;
}

} // namespace cudaq_rt
