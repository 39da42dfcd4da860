// zstd frames (libzstd) for what cudaq-rt stores compressed: link cache entries (cache_entry.h)
// and package blobs (package.h). One frame holds one whole blob and declares its size, so that a
// reader knows what it will get before it allocates anything, and refuses a frame that would
// decompress to more than the caller expects.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace cudaq_rt {

// The level cudaq-rt compresses at: cubins shrink about 4x, at several hundred MB/s.
constexpr int zstd_level = 1;

// One zstd frame holding `data`, its content size in the frame header.
std::string zstd_compress(std::span<const uint8_t> data, int level = zstd_level);

// The bytes of `frame`, which must be exactly one zstd frame (no trailing bytes, no second frame)
// declaring a content size of at most `max_size`: nothing is allocated for a frame that declares
// more. `subject` names it in errors.
Expected<std::string> zstd_decompress(std::span<const uint8_t> frame, uint64_t max_size,
                                      const std::string &subject);

// The same checks, but the bytes are handed to `piece` a block at a time as they come and never
// held: constant memory whatever the frame declares. Forty bytes of zstd declare a gibibyte of
// zeros; a reader that must know the bytes are the ones it expects (their digest) streams them
// through this first and allocates only then. The number of bytes the frame gave.
Expected<uint64_t> zstd_stream(std::span<const uint8_t> frame, uint64_t max_size,
                               const std::string &subject,
                               const std::function<void(std::span<const uint8_t>)> &piece);

} // namespace cudaq_rt
