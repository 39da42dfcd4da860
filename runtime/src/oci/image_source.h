// Where a pull reads an OCI image from: a registry (registry.h), or an OCI image layout on disk
// that another tool wrote (layout_source.h: `skopeo copy ... oci:DIR:TAG`). Both hand out the
// image manifest by tag or digest and the blobs by digest, each checked against its digest
// before it is returned.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <string>

namespace cudaq_rt {

struct FetchedManifest {
  std::string bytes;
  Digest digest;          // of the bytes (checked against the one asked for, or the source's)
  std::string media_type; // the response's Content-Type, or the layout's descriptor's
};

class ImageSource {
public:
  virtual ~ImageSource() = default;
  // The image as a user would write it, without options or secrets: for messages.
  virtual std::string name() const = 0;
  // The tag or digest the source was opened for ("" where a layout holds only one image).
  virtual std::string manifest_reference() const = 0;
  // An image manifest, at most max_manifest_bytes.
  static constexpr uint64_t max_manifest_bytes = uint64_t{4} << 20;
  virtual Expected<FetchedManifest> get_manifest(const std::string &reference) = 0;
  // The blob's bytes: exactly `size` of them, matching `d`, or an error. A size beyond
  // max_blob_bytes is refused before anything is read: no container or cubin is near it, and a
  // hostile manifest must not make a client hold gigabytes before the digest check.
  static constexpr uint64_t max_blob_bytes = uint64_t{1} << 30;
  virtual Expected<std::string> get_blob(const Digest &d, uint64_t size) = 0;
};

} // namespace cudaq_rt
