// Where cudaq-rt-run keeps the packages it starts from a registry reference: a content store
// under the link cache's directory, <cache dir>/oci/, shared by every process of the user (or
// of the fleet node, as the cache is).
//
//   oci/packages/<hex of the image manifest>/NAME.cudaqpkg   a package as cudaq-rt-pack --pull
//                                                             writes it: whole, verified
//   oci/refs/<hex of sha256(reference)>                      the image manifest a tag named
//                                                             when it was last resolved
//
// A start resolves the reference at the registry (one manifest GET) and uses the stored package
// of that image manifest if there is one: a second start fetches nothing else. With `offline`,
// or when the registry cannot be reached and a stored copy of the reference exists, nothing is
// fetched (the second with a warning). The store keeps at most max_store_packages packages,
// the least recently used beyond that removed unless a process has one open.
#pragma once

#include "cache/cache_config.h"
#include "oci/registry.h"

#include <filesystem>
#include <string>
#include <vector>

namespace cudaq_rt {

constexpr size_t max_store_packages = 8;

struct StoredPackage {
  std::filesystem::path package;
  Digest manifest;
  bool pulled = false; // false: the stored copy served
  uint64_t bytes = 0;  // fetched for it
  std::vector<std::string> warnings;
};

Expected<StoredPackage> package_from_registry(const RegistryRef &ref,
                                              const std::filesystem::path &store, bool offline,
                                              const Registry::Getenv &getenv);

// The same for a reference as a user wrote it, with the store under the directory of the link
// cache that `cache` and the process's environment give (cudaq-rt-run, cudaq_rt_open_package).
Expected<StoredPackage> package_from_reference(std::string_view reference,
                                               const CacheRequest &cache, bool offline);

} // namespace cudaq_rt
