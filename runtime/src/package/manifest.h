// The package manifest (manifest.json): what a package holds and where it came from. Its JSON
// Schema is schemas/manifest.schema.json; man/cudaq-rt-package.5 documents every field.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"
#include "formats/target.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// Format 1: every blob stored as its bytes. Format 2 adds `stored` (blobs kept compressed); a
// manifest is written as format 1 when it has none, so that such a package reads anywhere.
constexpr int manifest_format_version = 2;
constexpr int manifest_plain_format_version = 1;
constexpr const char *manifest_media_type = "application/vnd.cudaq-rt.manifest.v1+json";

// What an input contributes to the linked module.
enum class Role { application, bridge, dispatcher };
const char *role_name(Role r);

struct Source {
  std::string path; // file name (absolute: --absolute-paths), a record only: never read through
  std::string kind; // input_kind_name()
  uint64_t size = 0;
  Digest digest;
};

struct Origin {
  size_t source = 0;   // index into Manifest::sources
  std::string member;  // archive member, or empty
  uint64_t offset = 0; // from the start of the section (or fatbin file)
  size_t index = 0;    // the container's position in its section
};

struct EntryRecord {
  std::string kind; // entry_kind_name()
  uint16_t kind_code = 0;
  uint32_t arch = 0;
  uint16_t version_major = 0, version_minor = 0;
  uint64_t flags = 0;
  std::string compression;
  uint64_t payload_size = 0, compressed_size = 0, uncompressed_size = 0;
  std::string options, name;
};

struct ContainerRecord {
  Digest digest;
  uint64_t size = 0;
  Role role = Role::application;
  std::string bridge; // for Role::bridge
  // Empty for code cudaq-rt-pack packed; "cudaq-rt-link" for code a link took from elsewhere
  // (the built-in dispatch kernel, an installed bridge's hooks) and stored so that every input
  // of a link record resolves inside the package. Such containers are a record, never an input
  // of a later link: that takes them fresh from where they came from.
  std::string added_by;
  std::vector<Origin> origins;
  std::vector<EntryRecord> entries;

  bool packed() const { return added_by.empty(); }

  bool has_ltoir() const;
};

struct ExportEntry {
  std::string name;
  std::string kind; // export_kind_name()
  uint32_t function_id = 0;
  std::string symbol; // the device global (handlers) or kernel name
  Role role = Role::application;
  std::vector<size_t> sources;
  bool concurrent = false; // handlers: safe to run in several threads at once (warp dispatcher)
  bool direct = false;     // handlers: callable by name, cudaq_rt_handler_call__<name> (exports.h)
};

// A second wire name for a handler export (cudaq-rt-pack --alias NAME=HANDLER): the function table
// also answers function_id FNV-1a(NAME) with HANDLER. CUDA-Q realtime lets the application's
// function table choose the id its handlers answer to; an alias records that choice in the
// package, so that the code need not change.
struct AliasEntry {
  std::string name;    // the wire name, a C identifier
  std::string handler; // a handler export
  uint32_t function_id = 0;
};

struct LinkRecord {
  TargetArch arch;            // sm_NN, with any a/f suffix
  std::string bridge;         // bridge name, or empty for none
  std::string dispatcher;     // "builtin" or the custom kernel's name
  std::optional<LtoMode> lto; // how LTO-IR was linked; none: the inputs held no LTO-IR
  std::vector<std::string> options;
  std::string nvjitlink_version;
  std::vector<Digest> inputs; // in link order
  Digest cubin;
  uint64_t cubin_size = 0;
  Digest cache_key;
  std::string created; // UTC, ISO 8601
  double link_ms = 0;
};

// A link a program made through the nvJitLink API, as the interposer recorded it
// (CUDAQ_RT_NVJITLINK_RECORD): its options and inputs in order, each input a blob of the package.
// cudaq-rt-link links it again for other archs, with only -arch replaced.
struct RecipeInput {
  uint32_t type = 0; // nvJitLinkInputType
  std::string name;  // as the program named it (AddData's name, AddFile's path)
  Digest digest;
  uint64_t size = 0;
};

struct LinkRecipe {
  std::vector<std::string> options; // as passed to nvJitLinkCreate
  std::vector<RecipeInput> inputs;
  std::string output;  // "cubin", or "ptx" for a -ptx link
  std::string arch;    // the arch it was recorded for
  std::string program; // the process that made it (for the record only)
  std::string nvjitlink_version;
  Digest cache_key; // the interposer's key for it
};

// nvJitLinkInputType as a manifest names it ("fatbin", "ltoir", ...), and back.
const char *nvjitlink_input_type_name(uint32_t type);
std::optional<uint32_t> parse_nvjitlink_input_type(std::string_view name);

// How a blob is kept in the package's directory (and carried as an OCI layer) when not as its
// bytes: compressed, under the digest and size of what is stored. Everything else (container
// records, link inputs, cache keys, signatures) names the blob by the digest of its bytes; a
// reader decompresses it and checks that digest, as for a blob stored as it is.
enum class BlobEncoding { identity, zstd };
struct StoredBlob {
  Digest digest; // of the bytes as they are (the blob's name everywhere else)
  BlobEncoding encoding = BlobEncoding::zstd;
  Digest stored_digest; // of the file in blobs/sha256/, and of the OCI layer
  uint64_t stored_size = 0;
};

// A blob as it sits in blobs/sha256/: under which digest and of what size.
struct BlobOnDisk {
  Digest digest;
  uint64_t size = 0;
  const StoredBlob *stored = nullptr; // null: the file is the blob's bytes
};

struct Manifest {
  std::string name;
  std::string created_by;
  std::vector<Source> sources;
  std::vector<ContainerRecord> containers;
  std::vector<ExportEntry> exports;
  std::vector<AliasEntry> aliases; // sorted by name
  std::vector<LinkRecord> links;
  std::optional<LinkRecipe> recipe; // a recorded link (the interposer's), not a packed program
  std::vector<StoredBlob> stored;   // sorted by digest; blobs not named here are stored as is

  // format_version as written: manifest_plain_format_version unless a blob is stored compressed.
  int format_version() const;

  std::string to_json_text() const; // pretty-printed, ends with a newline
  nlohmann::json to_json() const;
  // Parses and checks structure; never throws. `subject` names the file in messages.
  static Expected<Manifest> parse(const std::string &text, const std::string &subject);

  const ContainerRecord *find_container(const Digest &d) const;
  // Every blob the manifest names (containers, linked cubins, recipe inputs), by the digest of
  // its bytes, with the size it records.
  std::map<Digest, uint64_t> blob_sizes() const;
  // How the blob named `d` is stored; null when it is stored as its bytes.
  const StoredBlob *find_stored(const Digest &d) const;
  // Every blob as it sits on disk (stored digest and size where compressed), by its digest.
  std::map<Digest, BlobOnDisk> blobs_on_disk() const;
};

const char *blob_encoding_name(BlobEncoding e);

// Whether `alias` can join `m.exports` and `m.aliases`: its handler is a handler export, its name
// is a C identifier that no export or other alias has, and its function_id is its name's and no
// other handler's or alias's. The error (no subject) says which.
Status check_alias(const Manifest &m, const AliasEntry &alias);

// Package names become directory names: letters, digits, '.', '_', '-', not starting with '.'.
bool valid_package_name(const std::string &name);

} // namespace cudaq_rt
