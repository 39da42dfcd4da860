#include "package/signatures.h"

#include "base/atomic_file.h"
#include "package/package.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

constexpr const char *signature_kind = "cudaq-rt package signature";
constexpr int signature_format_version = 1;

bool verifies(const PublicKey &key, const PackageSignature &s) {
  return key.verify(as_bytes(package_signature_message(s.package, s.manifest)), s.signature);
}

} // namespace

std::string package_signature_message(const std::string &package, const Digest &manifest) {
  std::string m = "cudaq-rt package signature v1";
  m += '\0';
  m += package;
  m += '\0';
  m += manifest.str();
  return m;
}

PackageSignature sign_manifest(const SigningKey &key, const std::string &package,
                               const Digest &manifest) {
  PackageSignature s{key.id(), package, manifest, {}};
  s.signature = key.sign(as_bytes(package_signature_message(package, manifest)));
  return s;
}

bool is_signature_file_name(const std::string &name) {
  Digest d;
  return name.size() == 64 + 5 && name.ends_with(".json") &&
         from_hex(std::string_view(name).substr(0, 64), d.bytes);
}

std::string PackageSignature::to_json_text() const {
  json j = {{"format_version", signature_format_version},
            {"kind", signature_kind},
            {"package", package},
            {"manifest", manifest.str()},
            {"key", key.hex()},
            {"algorithm", "ed25519"},
            {"signature", to_hex(signature)}};
  return j.dump(2) + "\n";
}

Expected<PackageSignature> PackageSignature::parse(std::string_view text, const std::string &what) {
  auto bad = [&](const std::string &why) { return make_error(what, why); };
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return bad("not a JSON object");
  auto string_at = [&](const char *k) -> std::optional<std::string> {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string())
      return std::nullopt;
    return it->get<std::string>();
  };
  auto version = j.find("format_version");
  if (version == j.end() || !version->is_number_integer() ||
      version->get<int64_t>() != signature_format_version)
    return bad("format_version is not 1");
  if (string_at("kind") != signature_kind)
    return bad(cat("kind is not \"", signature_kind, "\""));
  if (string_at("algorithm") != "ed25519")
    return bad("algorithm is not \"ed25519\"");
  auto package = string_at("package"), manifest = string_at("manifest"), key = string_at("key"),
       signature = string_at("signature");
  if (!package || !manifest || !key || !signature)
    return bad("package, manifest, key and signature are required strings");
  PackageSignature s;
  s.package = *package;
  auto d = Digest::parse(*manifest);
  if (!d)
    return bad("manifest is not sha256:<64 hex digits>");
  s.manifest = *d;
  if (!from_hex(*key, s.key.digest.bytes))
    return bad("key is not 64 hex digits");
  if (signature->size() % 2 != 0 || signature->size() / 2 != s.signature.size())
    return bad(cat("the signature is ", signature->size() / 2, " bytes, not ", s.signature.size()));
  if (!from_hex(*signature, s.signature))
    return bad("the signature is not hex");
  return s;
}

Expected<KeyId> verify_package(const Package &pkg, const TrustedKeys &trusted) {
  auto files = pkg.signature_files();
  if (!files)
    return std::move(files).take_error();
  return verify_signature_files(pkg.dir().string(), pkg.manifest().name, pkg.manifest_digest(),
                                *files, trusted);
}

Expected<KeyId>
verify_signature_files(const std::string &subject, const std::string &package,
                       const Digest &manifest,
                       const std::vector<std::pair<std::string, std::string>> &signature_files,
                       const TrustedKeys &trusted) {
  const auto *files = &signature_files;
  if (files->empty())
    return make_error(subject, "not signed: no signature in ", signatures_dir,
                      "/ (cudaq-rt-pack or cudaq-rt-link --sign KEY signs a package)");
  std::vector<std::string> refusals;
  std::string untrusted;
  for (const auto &[name, text] : *files) {
    const std::string shown = cat(signatures_dir, "/", name);
    KeyId named;
    from_hex(std::string_view(name).substr(0, 64), named.digest.bytes);
    const PublicKey *key = trusted.find(named);
    if (!key) {
      untrusted += (untrusted.empty() ? "" : ", ") + named.short_str();
      continue;
    }
    const std::string by = cat("the signature by trusted key ", named.short_str());
    auto sig = PackageSignature::parse(text, shown);
    if (!sig) {
      refusals.push_back(cat(by, " is malformed: ", shown, ": ", sig.error().message));
      continue;
    }
    if (sig->key != named) {
      refusals.push_back(cat(by, " is malformed: ", shown, " holds key ", sig->key.short_str()));
      continue;
    }
    if (!verifies(*key, *sig)) {
      refusals.push_back(cat("bad signature: ", by,
                             " does not verify (it was altered, or made with another key)"));
      continue;
    }
    if (sig->package != package) {
      refusals.push_back(cat(by, " is for package ", quote(sig->package), ", not ", quote(package),
                             " (copied from another package)"));
      continue;
    }
    if (sig->manifest != manifest) {
      refusals.push_back(cat("manifest changed after signing: key ", named.short_str(),
                             " signed manifest ", sig->manifest.short_str(), ", the manifest is ",
                             manifest.short_str(),
                             " (changed by a relink without --sign, or by hand)"));
      continue;
    }
    return named;
  }
  if (refusals.empty())
    return make_error(subject, "signed only by keys that are not trusted: ", untrusted,
                      " (trusted: ", trusted.names(), ")");
  std::string why;
  for (const std::string &r : refusals)
    why += (why.empty() ? "" : "; ") + r;
  return make_error(subject, why);
}

Status sign_package(const fs::path &package, const SigningKey &key, const TrustedKeys *trusted) {
  auto lock = PackageLock::acquire(package);
  if (!lock)
    return std::move(lock).take_error();
  auto pkg = Package::open(package);
  if (!pkg)
    return std::move(pkg).take_error();
  if (trusted)
    if (auto by = verify_package(*pkg, *trusted); !by)
      return std::move(by).take_error();
  // The package is written again, its blobs hard-linked and its manifest's bytes kept, so that
  // the new signature and the OCI layout that lists it appear together, in one rename.
  auto writer = PackageWriter::create(package);
  if (!writer)
    return std::move(writer).take_error();
  for (const Digest &d : pkg->referenced_blobs())
    if (auto st = writer->carry_blob(*pkg, d); !st)
      return st;
  if (auto st = writer->carry_signatures(*pkg); !st)
    return st;
  return writer->commit(pkg->manifest(), true, {&key}, pkg->manifest_text());
}

} // namespace cudaq_rt
