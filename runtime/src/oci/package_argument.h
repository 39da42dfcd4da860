// The package a tool is given, wherever it is: a package directory (NAME.cudaqpkg, opened where it
// is), an OCI image layout that another tool wrote (DIR, or oci:DIR[:TAG] to pick one of its
// images: layout_source.h), or a registry reference (oci://HOST/REPO:TAG). The last two are
// pulled as cudaq-rt-pack --pull pulls (every byte checked against its digest, the package's own
// checks, and with `trusted` its signatures) into a temporary directory that lives as long as
// the result and is removed with it, or by the signal that stops the tool.
#pragma once

#include "base/atomic_file.h"
#include "base/digest.h"
#include "base/signing.h"
#include "cudaq_rt/error.h"

#include <filesystem>
#include <optional>
#include <string>

namespace cudaq_rt {

struct PackageArgument {
  std::filesystem::path package;        // the package directory to open
  std::string source;                   // the layout or reference it was copied from; empty: none
  std::optional<Digest> image_manifest; // of the copy's source
  std::optional<TempDir> copy;          // holds a copy: removed with this
  bool copied() const { return copy.has_value(); }
};

// Whether `text` names something package_argument() copies rather than opens in place.
bool is_copied_package_argument(const std::string &text);

Expected<PackageArgument> package_argument(const std::string &text,
                                           const TrustedKeys *trusted = nullptr);

} // namespace cudaq_rt
