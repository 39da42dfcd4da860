// Where cudaq-rt-run keeps the packages it starts from a registry reference: a content store
// under the link cache's directory, <cache dir>/oci/, shared by every process of the user (or
// of the fleet node, as the cache is).
//
//   oci/packages/<hex of the image manifest>/NAME.cudaqpkg   the package's manifest, signatures
//                                                             and image layout, and the blobs
//                                                             starts have read
//   oci/blobs/sha256/<hex>                                   every blob a start fetched, hard
//                                                             linked into the packages using it
//   oci/refs/<hex of sha256(reference)>                      the image manifest a tag named
//                                                             when it was last resolved
//
// A start resolves the reference at the registry (one manifest GET). The first start of an image
// manifest fetches its config (the package's manifest) and its signatures, nothing more: the
// package is opened with a blob source (package.h) that fetches a blob, verified, the first time
// the load path reads it. So a GPU fetches the one cubin the package has linked for its arch,
// bridge and dispatcher, or, where there is none and no cache holds it, the inputs of a link at
// load; never another arch's cubins. A blob the store already has (another image manifest of
// the package, relinked or tagged again, shares it) is not fetched again. A second start fetches
// nothing but the manifest. With `offline`, or when the registry cannot be reached and a stored
// copy of the reference exists, nothing is fetched (the second with a warning), and a blob no
// earlier start read is an error that says so. The store keeps at most max_store_packages
// packages, the least recently used beyond that removed (with the blobs only they used) unless a
// process has one open.
#pragma once

#include "cache/cache_config.h"
#include "oci/registry.h"
#include "package/package.h"

#include <filesystem>
#include <string>
#include <vector>

namespace cudaq_rt {

constexpr size_t max_store_packages = 8;

struct StoredPackage {
  std::filesystem::path package;
  // Open the package with it (PackageOpenOptions): it fetches the blobs not stored yet.
  std::shared_ptr<const BlobSource> source;
  Digest manifest;
  bool pulled = false; // false: the stored copy served
  uint64_t bytes = 0;  // fetched for it before its blobs (the source counts those)
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
