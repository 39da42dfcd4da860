// oci/: packages through an OCI registry (the distribution spec, v1.1): where a package lives
// (this file), the registry's HTTP API (registry.h), and moving a package there and back
// (transfer.h). man/cudaq-rt-package.5 ("Registries") documents the reference syntax.
//
// A reference: oci://HOST[:PORT]/REPOSITORY[:TAG|@sha256:HEX][#OPTION,...]
//   REPOSITORY   the distribution spec's path components (lowercase, '/'-separated)
//   TAG          [A-Za-z0-9_][A-Za-z0-9._-]{0,127}; "latest" when neither a tag nor a digest
// Options, after '#', as the remote cache's (remote_cache.h):
//   plain-http       talk HTTP, not HTTPS (implied for a loopback host: 127.0.0.0/8, ::1,
//                    localhost)
//   https            talk HTTPS, to a loopback host too
//   ca=FILE          verify the registry's certificate against the CA certificates (PEM) in
//                    FILE instead of the system's store: a private registry's own CA
//   chunk=SIZE       upload a blob beyond SIZE in chunks of SIZE (bytes, or with k or M;
//                    default 16M, at least 4k): for a proxy that bounds a request's body
//   timeout=D        connecting may take at most D (default 5s)
//   stall=D          a transfer that moves no byte for D fails (default 30s)
//   bearer-env=VAR   send `Authorization: Bearer $VAR`
//   basic-env=VAR    basic authentication with $VAR's user:password, also for a token service
// A registry that answers 401 with `WWW-Authenticate: Bearer realm=...` is asked for a token
// (with the basic credentials, if any) and the request is sent again with it.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cudaq_rt {

constexpr std::string_view oci_scheme = "oci://";

struct RegistryRef {
  static constexpr uint32_t default_connect_timeout_ms = 5000;
  static constexpr uint32_t default_stall_ms = 30000;

  std::string host; // HOST[:PORT], as written ([::1]:5000 keeps its brackets)
  std::string repository;
  std::string tag;              // empty when a digest names the manifest
  std::optional<Digest> digest; // @sha256:...
  static constexpr uint64_t default_chunk_bytes = uint64_t{16} << 20;
  static constexpr uint64_t min_chunk_bytes = 4096;

  bool plain_http = false;
  bool https_asked = false; // #https: never plain HTTP, even to a loopback host
  std::string ca_file;      // #ca=FILE
  uint64_t chunk_bytes = default_chunk_bytes;
  uint32_t connect_timeout_ms = default_connect_timeout_ms;
  uint32_t stall_ms = default_stall_ms;
  enum class Auth { none, bearer, basic } auth = Auth::none;
  std::string auth_env;  // the variable that holds the secret, never the secret
  std::string auth_file; // or the auth file it came from (auth_file.h), never the secret

  // Parses a reference; the error says what is wrong and what was expected.
  static Expected<RegistryRef> parse(std::string_view text);
  // The tag or the digest, as a manifest URL ends.
  std::string manifest_reference() const { return digest ? digest->str() : tag; }
  // http(s)://HOST/v2/REPOSITORY
  std::string base_url() const;
  // The reference as a user would write it again, options included (never a secret).
  std::string str() const;
  // The reference without options: for messages.
  std::string name() const;
};

// Whether `text` is meant as a registry reference (starts with oci://).
bool is_oci_reference(std::string_view text);

} // namespace cudaq_rt
