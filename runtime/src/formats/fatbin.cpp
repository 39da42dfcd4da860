// The fatbin container, as nvcc 13 writes it (measured on CUDA 13.0 objects, executables and
// libraries; the entry layout agrees with the public fatbin readers jiegec/fatbinary and
// n-eiling/cuda-fatbin-decompression).
//
//   container header, 16 bytes:  u32 magic 0xBA55ED50 | u16 version 1 | u16 header size 16 |
//                                u64 size of everything after the header
//   entry header, >= 64 bytes:   +0x00 u16 kind (1 PTX, 2 cubin, 8 LTO-IR; others carried through)
//                                +0x04 u32 header size       +0x08 u64 payload size
//                                +0x10 u32 compressed size   +0x14 u32 options offset
//                                +0x18 u16 minor  +0x1A u16 major   +0x1C u32 arch (SM number)
//                                +0x20 u32 name offset  +0x24 u32 name length
//                                +0x28 u64 flags (0x8000 zstd, 0x2000 LZ4, 0x10000 compressed
//                                          LTO-IR)           +0x38 u64 uncompressed size
//   next entry = entry + header size + payload size; no terminator.
//
// A linked binary's __nv_relfatbin is one container per translation unit, back to back, with
// zero padding to 8 bytes. nvJitLink reads only the first container of a FATBIN input, so the
// packer splits them, and it does so by the headers' sizes: a compressed payload can contain the
// magic, and a scan for it would cut a container in two (LLVM's offload bundles had exactly that
// bug). Every size is checked against what remains before it is used, in 64-bit arithmetic that
// cannot overflow, because these bytes come from files we did not write.
//
// Measured: fed a whole linked __nv_relfatbin as one FATBIN input, nvJitLink failed with
// "Unresolved extern function" for a function defined in the second container; the same bytes
// split into two FATBIN inputs linked. Static archives need no splitting: each member is its own
// object. Containers measured so far are multiples of 8 bytes long, but the padding is skipped
// rather than assumed.
//
// nvcc 13 compresses with zstd by default. Its ELF and PTX payloads are plain zstd frames (or raw
// LZ4 blocks with 0x2000), but compressed LTO-IR (flag 0x10000) is neither, and nothing public
// decompresses it; nvJitLink accepts whole compressed containers, LTO-IR included, and links them
// to the same cubin as the raw LTO-IR. So containers are kept verbatim and never re-encoded.
#include "formats/fatbin.h"

#include <cstring>

namespace cudaq_rt {
namespace {

template <class T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof v); // little-endian hosts only, like the format
  return v;
}

constexpr uint64_t flag_lz4 = 0x2000, flag_zstd = 0x8000;

Expected<Entry> parse_entry(std::span<const uint8_t> c, uint64_t at, const std::string &subject,
                            const std::string &where) {
  uint64_t remain = c.size() - at;
  if (remain < entry_base_header_size)
    return make_error(subject, where, ": entry at offset ", hex(at), " has ", remain,
                      " bytes, less than a ", entry_base_header_size, "-byte entry header");
  const uint8_t *p = c.data() + at;
  Entry e;
  e.offset = at;
  e.kind = load<uint16_t>(p + 0x00);
  e.header_size = load<uint32_t>(p + 0x04);
  e.payload_size = load<uint64_t>(p + 0x08);
  e.compressed_size = load<uint32_t>(p + 0x10);
  uint32_t options_at = load<uint32_t>(p + 0x14);
  e.version_minor = load<uint16_t>(p + 0x18);
  e.version_major = load<uint16_t>(p + 0x1A);
  e.arch = load<uint32_t>(p + 0x1C);
  uint32_t name_at = load<uint32_t>(p + 0x20);
  uint32_t name_len = load<uint32_t>(p + 0x24);
  e.flags = load<uint64_t>(p + 0x28);
  e.uncompressed_size = load<uint64_t>(p + 0x38);

  if (e.header_size < entry_base_header_size || e.header_size > remain)
    return make_error(subject, where, ": entry at offset ", hex(at), " has header size ",
                      e.header_size, " (at least ", entry_base_header_size, ", at most ", remain,
                      " remain)");
  if (e.payload_size > remain - e.header_size)
    return make_error(subject, where, ": entry at offset ", hex(at), " claims ", e.payload_size,
                      " payload bytes but ", remain - e.header_size, " remain");
  if (e.flags & flag_zstd)
    e.compression = Compression::zstd;
  else if (e.flags & flag_lz4)
    e.compression = Compression::lz4;
  if (e.compression != Compression::none && e.compressed_size > e.payload_size)
    return make_error(subject, where, ": entry at offset ", hex(at), " claims ", e.compressed_size,
                      " compressed bytes in a ", e.payload_size, "-byte payload");

  // The options string is reached through a {u32 offset, u32 length} pair inside the header.
  if (options_at != 0) {
    if (options_at < entry_base_header_size || uint64_t(options_at) + 8 > e.header_size)
      return make_error(subject, where, ": entry at offset ", hex(at), ": options pointer ",
                        hex(options_at), " lies outside its ", e.header_size, "-byte header");
    uint32_t off = load<uint32_t>(p + options_at), len = load<uint32_t>(p + options_at + 4);
    if (uint64_t(off) + len > e.header_size)
      return make_error(subject, where, ": entry at offset ", hex(at), ": options string (", len,
                        " bytes at +", hex(off), ") runs past its header");
    e.options.assign(reinterpret_cast<const char *>(p + off), len);
    e.options.resize(std::strlen(e.options.c_str()));
  }
  if (name_len != 0) {
    if (uint64_t(name_at) + name_len > e.header_size)
      return make_error(subject, where, ": entry at offset ", hex(at), ": name (", name_len,
                        " bytes at +", hex(name_at), ") runs past its header");
    e.name.assign(reinterpret_cast<const char *>(p + name_at), name_len);
    e.name.resize(std::strlen(e.name.c_str()));
  }
  return e;
}

// Parses the container at the start of `data`, which may continue past it.
Expected<Container> parse_one(std::span<const uint8_t> data, uint64_t offset,
                              const std::string &subject, const std::string &what, size_t index) {
  std::string where = cat(what, ": container ", index, " at offset ", hex(offset));
  if (data.size() < container_header_size)
    return make_error(subject, where, " has ", data.size(), " bytes, less than a ",
                      container_header_size, "-byte header");
  uint32_t magic = load<uint32_t>(data.data());
  if (magic != fatbin_magic)
    return make_error(subject, where, ": bad magic ", hex(magic), " (expected ", hex(fatbin_magic),
                      ")");
  Container c;
  c.offset = offset;
  c.version = load<uint16_t>(data.data() + 4);
  uint16_t header_size = load<uint16_t>(data.data() + 6);
  uint64_t fat_size = load<uint64_t>(data.data() + 8);
  if (header_size < container_header_size || header_size > data.size())
    return make_error(subject, where, ": header size ", header_size, " is invalid");
  if (fat_size > data.size() - header_size)
    return make_error(subject, where, " claims ", fat_size, " bytes but ",
                      data.size() - header_size, " remain");
  c.bytes = data.subspan(0, header_size + fat_size);
  for (uint64_t at = header_size; at < c.bytes.size();) {
    auto e = parse_entry(c.bytes, at, subject, where);
    if (!e)
      return std::move(e).take_error();
    at += e->header_size + e->payload_size; // both bounded by what remains: no overflow
    c.entries.push_back(std::move(*e));
  }
  return c;
}

} // namespace

std::string entry_kind_name(uint16_t kind) {
  switch (kind) {
  case static_cast<uint16_t>(EntryKind::ptx):
    return "ptx";
  case static_cast<uint16_t>(EntryKind::cubin):
    return "cubin";
  case static_cast<uint16_t>(EntryKind::ltoir):
    return "ltoir";
  }
  return cat("kind-", kind);
}

const char *compression_name(Compression c) {
  switch (c) {
  case Compression::zstd:
    return "zstd";
  case Compression::lz4:
    return "lz4";
  case Compression::none:
    break;
  }
  return "none";
}

Expected<std::vector<Container>> split_containers(std::span<const uint8_t> data,
                                                  const std::string &subject,
                                                  const std::string &what) {
  if (data.empty())
    return make_error(subject, what, " is empty");
  std::vector<Container> out;
  uint64_t at = 0;
  while (at < data.size()) {
    // Containers follow each other directly or after zero padding to the next 8 bytes.
    bool magic_here = data.size() - at >= 4 && load<uint32_t>(data.data() + at) == fatbin_magic;
    if (!magic_here && data[at] == 0) {
      uint64_t stop = std::min<uint64_t>((at + 8) & ~uint64_t(7), data.size());
      for (uint64_t i = at; i < stop; ++i)
        if (data[i] != 0)
          return make_error(subject, what, ": unexpected byte ", hex(data[i]), " at offset ",
                            hex(i),
                            out.empty() ? " before the first container"
                                        : cat(" in the padding after container ", out.size() - 1));
      at = stop;
      continue;
    }
    auto c = parse_one(data.subspan(at), at, subject, what, out.size());
    if (!c)
      return std::move(c).take_error();
    at += c->bytes.size();
    out.push_back(std::move(*c));
  }
  if (out.empty())
    return make_error(subject, what, " holds only zero bytes");
  return out;
}

Expected<Container> parse_container(std::span<const uint8_t> data, const std::string &subject,
                                    const std::string &what) {
  auto c = parse_one(data, 0, subject, what, 0);
  if (c && c->bytes.size() != data.size())
    return make_error(subject, what, ": ", data.size() - c->bytes.size(),
                      " bytes follow the container");
  return c;
}

} // namespace cudaq_rt
