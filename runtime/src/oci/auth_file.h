// Registry credentials from the files that docker, podman and skopeo write (`docker login`,
// `podman login`, `skopeo login`), so that a machine already logged in to a registry needs no
// #basic-env option. The format (containers-auth.json(5)) is
//
//   {"auths": {"HOST[:PORT][/NAMESPACE...]": {"auth": base64("user:password")}}}
//
// and the files are read in the order podman and skopeo read them, the first one with an entry
// for the reference winning: $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json,
// $HOME/.config/containers/auth.json, then docker's $DOCKER_CONFIG/config.json (default
// $HOME/.docker/config.json). Within a file the longest key that is the host or a prefix of
// host/repository at a '/' wins, as podman matches a namespace's credentials. Entries that hold
// only a credential helper's name ("credsStore", "credHelpers") name no secret and are skipped.
#pragma once

#include "cudaq_rt/error.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace cudaq_rt {

struct FileCredentials {
  std::string user_password;  // "user:password", as basic authentication sends it
  std::filesystem::path file; // where it was found, for messages
};

// The credentials for `host` (HOST[:PORT]) and `repository`, or nullopt when no file has any.
// A file that exists and cannot be read or parsed, or an entry that does not decode to
// user:password, is an error that names the file.
Expected<std::optional<FileCredentials>>
credentials_from_auth_files(const std::string &host, const std::string &repository,
                            const std::function<const char *(const char *)> &getenv);

// The same lookup in one file's text (`file` names it in errors).
Expected<std::optional<FileCredentials>> credentials_in_auth_file(std::string_view text,
                                                                  const std::filesystem::path &file,
                                                                  const std::string &host,
                                                                  const std::string &repository);

} // namespace cudaq_rt
