// A package's signatures: detached Ed25519 signatures over its manifest, one file per key in
// NAME.cudaqpkg/signatures/<key id>.json (schemas/signature.schema.json), so that several
// parties (CI after a link, a release step) can each sign and a verifier can say exactly why it
// refuses. The manifest names every blob by digest and every read checks the digest, so a valid
// signature over the manifest vouches for every byte that is loaded.
//
// What a key signs is the message
//     "cudaq-rt package signature v1" NUL <package name> NUL "sha256:<manifest.json's digest>"
// over the manifest file's exact bytes: reformatting or reordering it invalidates the signature.
// The file records the name and the digest it signed, so that a signature over another manifest
// is told apart from one that does not verify at all.
#pragma once

#include "base/signing.h"
#include "cudaq_rt/error.h"

#include <filesystem>
#include <string>
#include <vector>

namespace cudaq_rt {

class Package;

constexpr const char *signatures_dir = "signatures";

struct PackageSignature {
  KeyId key;
  std::string package;
  Digest manifest;
  Signature signature{};

  std::string file_name() const { return key.hex() + ".json"; }
  std::string to_json_text() const;
  // The file's text; `what` names it in errors ("malformed: ...").
  static Expected<PackageSignature> parse(std::string_view text, const std::string &what);
};

// The message a key signs for a package.
std::string package_signature_message(const std::string &package, const Digest &manifest);
PackageSignature sign_manifest(const SigningKey &key, const std::string &package,
                               const Digest &manifest);

// Whether `file_name` (in signatures/) is a signature file's name: <64 hex digits>.json.
bool is_signature_file_name(const std::string &file_name);

// Checks the package against the trusted keys: ok when one of them made a valid signature over
// this manifest; otherwise the one line that says why not (not signed; signed only by keys that
// are not trusted; a trusted key's signature malformed, not verifying, for another package, or
// over an earlier manifest). The key that vouched is returned.
Expected<KeyId> verify_package(const Package &package, const TrustedKeys &trusted);
// The same check over signature files (name, text) not yet in a package: a pull's, before it
// writes anything. `subject` names the package in the error.
Expected<KeyId>
verify_signature_files(const std::string &subject, const std::string &package,
                       const Digest &manifest,
                       const std::vector<std::pair<std::string, std::string>> &signature_files,
                       const TrustedKeys &trusted);

// Adds (or replaces) `key`'s signature over the package as it is now, under its lock: the
// package is written again (its blobs hard-linked, its manifest's bytes kept) with the signature
// and the OCI layout that lists it, in one rename, or not at all. With `trusted`, the package must first
// verify, as it is under the lock (what is checked is what is signed).
Status sign_package(const std::filesystem::path &package, const SigningKey &key,
                    const TrustedKeys *trusted = nullptr);

} // namespace cudaq_rt
