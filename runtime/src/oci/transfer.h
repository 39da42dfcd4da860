// A package to a registry and back. A push sends what the registry lacks (a HEAD per blob first,
// so that a relinked package sends only its new cubins and manifest), then the image manifest
// under the reference's tag. A pull fetches the image manifest, the config and every layer,
// checks each against its digest and the package's own checks, and writes the package as
// cudaq-rt-pack does: whole, under the package's lock, in one rename, or not at all.
#pragma once

#include "oci/image_source.h"
#include "oci/registry.h"
#include "package/package.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace cudaq_rt {

struct PushReport {
  Digest manifest; // the image manifest's digest: the reference by digest
  size_t blobs = 0;
  size_t uploaded = 0;
  uint64_t bytes_uploaded = 0;
};

// Pushes the package as it is. A reference by digest must name the package's image manifest.
Expected<PushReport> push_package(const Package &package, Registry &registry);
// Opens the package at `dir` and the registry `ref` names (its secret from the environment) and
// pushes the one to the other.
Expected<PushReport> push_package_to(const std::filesystem::path &dir, const RegistryRef &ref);
// The report as the tools print it: one line, and a JSON object (schemas/push.schema.json, the push object of cudaq-rt-link --json).
std::string format_push(const RegistryRef &ref, const PushReport &r);
nlohmann::json push_json(const RegistryRef &ref, const PushReport &r);

struct PullReport {
  std::filesystem::path dir; // the package written
  Digest manifest;           // the image manifest pulled
  size_t blobs = 0;
  uint64_t bytes = 0;
  std::optional<KeyId> verified_by; // with `trusted`
};

// Which layers a pull writes: every one (a package as cudaq-rt-pack writes it), or only the
// signatures, the other blobs left for the package's blob source to fetch when they are read
// (oci/store.h: a start fetches only what this GPU needs).
enum class PullLayers { all, signatures };

// Pulls the package the source's reference names (a registry's, or an OCI image layout's on
// disk) into `output_dir`/NAME.cudaqpkg (the directory is made). An existing package there is replaced only with `replace`.
// `fetched`: the image manifest, when the caller has already fetched (and so checked) it. With
// `trusted`, the package must verify (signatures.h) before anything is written: a package a
// pull refuses never replaces the one there.
Expected<PullReport> pull_package(ImageSource &source, const std::filesystem::path &output_dir,
                                  bool replace, const FetchedManifest *fetched = nullptr,
                                  const TrustedKeys *trusted = nullptr,
                                  PullLayers layers = PullLayers::all);

} // namespace cudaq_rt
