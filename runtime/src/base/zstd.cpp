#include "base/zstd.h"

#include <stdexcept>
#include <zstd.h>

namespace cudaq_rt {

std::string zstd_compress(std::span<const uint8_t> data, int level) {
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  if (ZSTD_isError(n)) // only for a buffer too small, which compressBound rules out
    throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Expected<std::string> zstd_decompress(std::span<const uint8_t> frame, uint64_t max_size,
                                      const std::string &subject) {
  const unsigned long long declared = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return make_error(subject, "is not a zstd frame");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN)
    return make_error(subject, "is a zstd frame that does not declare its size");
  if (declared > max_size)
    return make_error(subject, "is a zstd frame of ", declared, " bytes, more than the ", max_size,
                      " it may hold");
  const size_t whole = ZSTD_findFrameCompressedSize(frame.data(), frame.size());
  if (ZSTD_isError(whole))
    return make_error(subject, "is a truncated zstd frame: ", ZSTD_getErrorName(whole));
  if (whole != frame.size())
    return make_error(subject, "holds ", frame.size() - whole, " bytes after its zstd frame");
  std::string out(declared, '\0');
  const size_t got = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(got))
    return make_error(subject, "is a corrupt zstd frame: ", ZSTD_getErrorName(got));
  if (got != declared)
    return make_error(subject, "is a zstd frame that gave ", got, " bytes, not the ", declared,
                      " it declares");
  return out;
}

} // namespace cudaq_rt
