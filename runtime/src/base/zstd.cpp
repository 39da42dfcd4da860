#include "base/zstd.h"

#include <memory>
#include <new>
#include <stdexcept>
#include <vector>
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

namespace {

// The frame's declared size, once the frame is known to be one whole frame that declares at most
// `max_size`.
Expected<uint64_t> checked_frame(std::span<const uint8_t> frame, uint64_t max_size,
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
  return static_cast<uint64_t>(declared);
}

} // namespace

Expected<std::string> zstd_decompress(std::span<const uint8_t> frame, uint64_t max_size,
                                      const std::string &subject) {
  auto declared = checked_frame(frame, max_size, subject);
  if (!declared)
    return declared.error();
  std::string out(*declared, '\0');
  const size_t got = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(got))
    return make_error(subject, "is a corrupt zstd frame: ", ZSTD_getErrorName(got));
  if (got != *declared)
    return make_error(subject, "is a zstd frame that gave ", got, " bytes, not the ", *declared,
                      " it declares");
  return out;
}

Expected<uint64_t> zstd_stream(std::span<const uint8_t> frame, uint64_t max_size,
                               const std::string &subject,
                               const std::function<void(std::span<const uint8_t>)> &piece) {
  auto declared = checked_frame(frame, max_size, subject);
  if (!declared)
    return declared.error();
  std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream *)> stream(ZSTD_createDStream(),
                                                                   ZSTD_freeDStream);
  if (!stream)
    throw std::bad_alloc();
  std::vector<uint8_t> block(ZSTD_DStreamOutSize());
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  uint64_t got = 0;
  for (;;) {
    ZSTD_outBuffer out{block.data(), block.size(), 0};
    const size_t r = ZSTD_decompressStream(stream.get(), &out, &in);
    if (ZSTD_isError(r))
      return make_error(subject, "is a corrupt zstd frame: ", ZSTD_getErrorName(r));
    got += out.pos;
    if (got > *declared)
      return make_error(subject, "is a zstd frame that gives more than the ", *declared,
                        " bytes it declares");
    if (out.pos)
      piece(std::span<const uint8_t>(block.data(), out.pos));
    if (r == 0)
      break; // the frame is whole
    if (in.pos == in.size && out.pos < out.size)
      return make_error(subject, "is a truncated zstd frame");
  }
  if (got != *declared)
    return make_error(subject, "is a zstd frame that gave ", got, " bytes, not the ", *declared,
                      " it declares");
  return got;
}

} // namespace cudaq_rt
