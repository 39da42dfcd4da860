// An OCI registry's HTTP API (distribution spec v1.1, "spec.md"), as far as moving packages
// needs it: blobs by digest (HEAD, GET, monolithic or chunked upload) and manifests by tag or
// digest (GET, PUT). Every byte that comes back is checked against the digest it was asked by
// before it is returned; nothing a registry says is trusted otherwise.
#pragma once

#include "base/digest.h"
#include "base/http_client.h"
#include "cudaq_rt/error.h"
#include "oci/image_source.h"
#include "oci/reference.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace cudaq_rt {

// Counts of what a client did, for reports and tests.
struct RegistryTraffic {
  uint64_t requests = 0;
  uint64_t bytes_sent = 0;     // request bodies
  uint64_t bytes_received = 0; // response bodies
};

class Registry final : public ImageSource {
public:
  using Getenv = std::function<const char *(const char *)>;
  // Reads the secret now: from the environment where the reference's options name a variable,
  // else from the auth files docker, podman and skopeo write (auth_file.h), else none.
  static Expected<std::unique_ptr<Registry>> open(RegistryRef ref, const Getenv &getenv);
  ~Registry();

  const RegistryRef &ref() const { return ref_; }
  const RegistryTraffic &traffic() const { return traffic_; }

  // Whether the repository has the blob (HEAD); an error when the registry cannot say.
  Expected<bool> has_blob(const Digest &d);
  // Uploads a blob: one PUT up to the reference's chunk size (16 MiB unless #chunk= says),
  // PATCHes of that size beyond; the registry checks the digest at the end.
  Status put_blob(const Digest &d, std::span<const uint8_t> bytes);
  // ImageSource: max_blob_bytes is refused before anything is asked.
  std::string name() const override { return ref_.name(); }
  std::string manifest_reference() const override { return ref_.manifest_reference(); }
  Expected<std::string> get_blob(const Digest &d, uint64_t size) override;
  // PUT a manifest under a tag or a digest.
  Status put_manifest(const std::string &reference, const std::string &media_type,
                      std::string_view bytes);
  // GET a manifest (an OCI image manifest) by tag or digest, at most max_manifest_bytes.
  Expected<FetchedManifest> get_manifest(const std::string &reference) override;

private:
  Registry(RegistryRef ref, std::string secret);
  // A request with the registry's credentials, and the token flow when it asks for one.
  Expected<HttpResponse> send(const HttpRequest &req);
  RegistryRef ref_;
  std::string secret_;
  std::string token_; // from the registry's token service, once one was asked
  RegistryTraffic traffic_;
  HttpClient http_;
};

} // namespace cudaq_rt
