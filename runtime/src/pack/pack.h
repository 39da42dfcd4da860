// pack/: from binaries to a package. It reads formats/ and writes package/; nothing else.
//
// cudaq-rt-pack's library: read inputs, split their device code into containers, find exports,
// and write a package.
#pragma once

#include "base/signing.h"
#include "formats/fatbin.h"
#include "formats/input_file.h"
#include "package/manifest.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cudaq_rt {

struct PackInput {
  std::string path;
  Role role = Role::application;
  std::string bridge; // for Role::bridge
};

struct PackOptions {
  std::vector<PackInput> inputs;
  std::filesystem::path output_dir = ".";
  std::string name; // default: the first application input's file name up to its first '.'
  bool force = false;
  // Wire names for handler exports, each "NAME=HANDLER" (cudaq-rt-pack --alias).
  std::vector<std::string> aliases;
  // Signs the package's manifest (--sign): the signature is in the package when it appears.
  std::shared_ptr<const SigningKey> signer;
  // Record each input's absolute path (--absolute-paths); by default its file name, so that the
  // same inputs pack to the same bytes wherever they are.
  bool absolute_paths = false;
  // Keep blobs zstd-compressed where that saves a sixteenth or more (--no-compress: every blob as
  // it is, and a format 1 manifest, for a cudaq-rt older than format 2).
  bool compress = true;
};

// What a set of inputs would become, without writing anything: the manifest of the package
// pack() would write, and the warnings it would print.
struct Inspection {
  Manifest manifest;
  std::vector<std::string> warnings;
  // The inputs stay mapped so pack() writes each container from the bytes that were hashed,
  // without reading or hashing any file a second time.
  std::vector<InputFile> files;
  std::vector<std::span<const uint8_t>> container_bytes; // parallel to manifest.containers
};

// Where each new container goes as soon as it is found and hashed (pack() writes its blob then).
using ContainerSink = std::function<Status(const Digest &, std::span<const uint8_t>)>;

Expected<Inspection> inspect(const std::vector<PackInput> &inputs, const std::string &name,
                             const ContainerSink &sink = {});

struct PackResult {
  std::filesystem::path dir;
  Inspection inspection; // its manifest names each input by its absolute path, for messages
  Manifest written;      // the manifest as written: inputs by file name unless absolute_paths
};

// Adds "NAME=HANDLER" aliases to a manifest that has its exports, sorted by name; nothing is
// added unless all of them are good.
Status add_aliases(Manifest &m, const std::vector<std::string> &specs);

// Writes output_dir/NAME.cudaqpkg atomically. On any error nothing is left behind.
Expected<PackResult> pack(const PackOptions &options);

// Warnings about a package's code, e.g. a translation unit without LTO-IR.
std::vector<std::string> code_warnings(const Manifest &m);

// The human-readable listing of `cudaq-rt-pack --list`.
std::string format_listing(const Manifest &m, const std::string &what);

} // namespace cudaq_rt
