// An OCI image layout on disk as an image source (image_source.h): what `skopeo copy
// docker://HOST/team/app:1 oci:DIR:1`, `oras copy --to-oci-layout` or `podman push ... oci:DIR`
// write. The layout (image-spec "image-layout.md") is
//
//   DIR/oci-layout         {"imageLayoutVersion": "1.0.0"}
//   DIR/index.json         an image index: manifests[] descriptors, a tag in each one's
//                          org.opencontainers.image.ref.name annotation
//   DIR/blobs/<alg>/<hex>  every manifest, config and layer, by digest
//
// and may hold many images. One is chosen by its tag, by its digest, or, where the layout holds
// only one, without either. Nothing of cudaq-rt's is needed beyond the layout: a package's own
// directory is such a layout too (oci_layout.h), tagged "latest". Every file is read without
// following a symbolic link, bounded by the size its descriptor gives, and checked against its
// digest before it is returned.
#pragma once

#include "oci/image_source.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace cudaq_rt {

// oci:DIR[:TAG] or oci:DIR@sha256:HEX, as skopeo spells a layout. The tag is what follows the
// last ':' when it holds no '/': a directory whose name has a ':' needs its tag written out.
struct LayoutRef {
  std::filesystem::path dir;
  std::string reference; // a tag, "sha256:HEX", or empty: the layout's only image
  static Expected<LayoutRef> parse(std::string_view text);
  std::string name() const; // oci:DIR[:TAG]
};
// Whether `text` is meant as a layout reference: "oci:" and not "oci://".
bool is_layout_reference(std::string_view text);
// Whether `dir` is an OCI image layout that is not a package (no manifest.json of ours): what
// another tool wrote, opened through a LayoutSource.
bool is_foreign_layout(const std::filesystem::path &dir);

class LayoutSource final : public ImageSource {
public:
  // Checks the oci-layout file (image layout version 1.x); index.json is read when a manifest is
  // asked for.
  static Expected<std::unique_ptr<LayoutSource>> open(LayoutRef ref);

  std::string name() const override { return ref_.name(); }
  std::string manifest_reference() const override { return ref_.reference; }
  // "" picks the only image manifest, a tag the one index.json tags so, "sha256:..." that one.
  Expected<FetchedManifest> get_manifest(const std::string &reference) override;
  Expected<std::string> get_blob(const Digest &d, uint64_t size) override;

private:
  explicit LayoutSource(LayoutRef ref) : ref_(std::move(ref)) {}
  LayoutRef ref_;
};

} // namespace cudaq_rt
