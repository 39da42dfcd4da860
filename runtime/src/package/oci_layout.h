// A package is also an OCI image layout (image-spec v1.1, "image-layout.md"), so that any OCI
// registry stores it and any OCI client (skopeo, oras, containerd) moves it, and so that a client
// can choose the layers it needs from the image manifest without reading the package manifest.
//
//   NAME.cudaqpkg/oci-layout       {"imageLayoutVersion": "1.0.0"}
//   NAME.cudaqpkg/index.json       one image manifest, tagged "latest"
//   blobs/sha256/<image manifest>  artifactType application/vnd.cudaq-rt.package.v1
//     config                       manifest.json's exact bytes (a blob as well)
//     layers                       every blob the manifest refers to, each with its kind's media
//                                  type and annotations (a compressed blob as its zstd frame,
//                                  the type suffixed +zstd), then each signature file as a blob
//
// The layout is derived: PackageWriter::commit writes it from the manifest and the signatures on
// every write, under the same lock and in the same rename, and cudaq-rt-pack --list checks that
// it is the one the package's manifest and signatures give. A package written before the layout
// existed has none, opens as before, and gains it on its next write. man/cudaq-rt-package.5
// ("OCI image layout") is the reference.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"
#include "package/manifest.h"

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudaq_rt {

constexpr const char *oci_image_manifest_media_type = "application/vnd.oci.image.manifest.v1+json";
constexpr const char *oci_image_index_media_type = "application/vnd.oci.image.index.v1+json";
constexpr const char *package_artifact_type = "application/vnd.cudaq-rt.package.v1";
constexpr const char *container_layer_media_type = "application/vnd.cudaq-rt.container.v1";
constexpr const char *cubin_layer_media_type = "application/vnd.cudaq-rt.cubin.v1";
constexpr const char *link_input_layer_media_type = "application/vnd.cudaq-rt.link-input.v1";
constexpr const char *signature_layer_media_type = "application/vnd.cudaq-rt.signature.v1+json";
// The annotations a layer carries (io.cudaq-rt.*), so that a client picks layers by them.
constexpr const char *annotation_prefix = "io.cudaq-rt.";
constexpr const char *layout_tag = "latest";

// A content descriptor (image-spec descriptor.md), as far as packages use one.
struct OciDescriptor {
  std::string media_type;
  Digest digest;
  uint64_t size = 0;
  std::map<std::string, std::string> annotations;
};

// An image manifest as packages write it and as a registry returns it.
struct OciImageManifest {
  std::string artifact_type;
  OciDescriptor config;
  std::vector<OciDescriptor> layers;
  std::map<std::string, std::string> annotations;

  // The JSON text: compact, keys sorted, so that the same package gives the same bytes.
  std::string to_json_text() const;
  // Parses and checks an image manifest that should hold a cudaq-rt package: schemaVersion 2,
  // the image manifest media type (when given), the artifact type and the config's media type.
  // `subject` names it in errors.
  static Expected<OciImageManifest> parse(std::string_view text, const std::string &subject);
};

// The image manifest of a package: `manifest_text` is manifest.json's bytes (its config), and
// `signatures` each signature file's name (<key id>.json) and text, in name order.
OciImageManifest
package_image_manifest(const Manifest &m, std::string_view manifest_text,
                       const std::vector<std::pair<std::string, std::string>> &signatures);

// index.json for a layout holding one image manifest (its text), and the oci-layout file.
std::string layout_index_text(std::string_view image_manifest_text);
constexpr std::string_view oci_layout_text = "{\"imageLayoutVersion\":\"1.0.0\"}\n";

// Every descriptor an image index (index.json) lists, in order. `subject` names it in errors.
Expected<std::vector<OciDescriptor>> parse_image_index(std::string_view text,
                                                       const std::string &subject);
// The tag a descriptor of index.json carries (org.opencontainers.image.ref.name), or "".
constexpr const char *oci_ref_name_annotation = "org.opencontainers.image.ref.name";

// The image manifest's digest that index.json names, after checking that it names exactly one
// image manifest. `subject` names the file in errors.
Expected<OciDescriptor> parse_layout_index(std::string_view text, const std::string &subject);

// The signature file name (<key id>.json) a signature layer stands for, from its annotation;
// empty when the layer has none or an invalid one.
std::string signature_layer_file_name(const OciDescriptor &layer);

} // namespace cudaq_rt
