// formats/: the formats of device code as they come, each parsed with bounds checks and errors
// that carry offsets: the fatbin container (this file), ELF inputs (input_file.h), export records
// (export_records.h), cubins (cubin.h), and the target arch and LTO mode (target.h).
//
// The fatbin container format: what a `__nv_relfatbin` section holds. See fatbin.cpp for the
// layout and the facts it rests on.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

enum class EntryKind : uint16_t { ptx = 1, cubin = 2, ltoir = 8 };

// "ptx", "cubin", "ltoir", or "kind-N" for kinds we carry through without knowing them.
std::string entry_kind_name(uint16_t kind);

enum class Compression { none, zstd, lz4 };
const char *compression_name(Compression c);

struct Entry {
  uint64_t offset = 0; // from the start of its container
  uint16_t kind = 0;
  uint32_t header_size = 0;
  uint64_t payload_size = 0;      // bytes stored after the header (padded)
  uint32_t compressed_size = 0;   // 0 when stored uncompressed
  uint64_t uncompressed_size = 0; // 0 when stored uncompressed
  uint16_t version_major = 0;
  uint16_t version_minor = 0;
  uint32_t arch = 0; // SM number: 80, 90, 100...
  uint64_t flags = 0;
  Compression compression = Compression::none;
  std::string options; // the producer's options string, if the entry records one
  std::string name;    // e.g. "lto" for a device-link output, usually empty

  bool is_ltoir() const { return kind == static_cast<uint16_t>(EntryKind::ltoir); }
};

// One container: 16-byte header plus entries. `bytes` views the caller's buffer.
struct Container {
  uint64_t offset = 0; // from the start of the section (or file) it was found in
  std::span<const uint8_t> bytes;
  uint16_t version = 0;
  std::vector<Entry> entries;
};

constexpr uint32_t fatbin_magic = 0xBA55ED50u;
constexpr size_t container_header_size = 16;
constexpr size_t entry_base_header_size = 64;

// Splits a section holding containers back to back, each sized by its header, with 8-byte zero
// padding between them. `what` names the data in messages (e.g. "section __nv_relfatbin").
// Fails on the first malformed byte; an empty span is an error too.
Expected<std::vector<Container>> split_containers(std::span<const uint8_t> data,
                                                  const std::string &subject,
                                                  const std::string &what);

// Parses one container that must fill `data` exactly (a blob, a .fatbin file).
Expected<Container> parse_container(std::span<const uint8_t> data, const std::string &subject,
                                    const std::string &what);

} // namespace cudaq_rt
