// A BlobSource for the tests of a package whose blobs are not all on disk: it serves the blobs
// of another directory (a whole copy of the package), counts what it was asked for, and can
// serve one blob with a byte changed or fail. The load path's own source, a registry's, is
// tested against a real registry (tests/integration/test_oci.py).
#pragma once

#include "package/package.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

class DirectoryBlobSource final : public cudaq_rt::BlobSource {
public:
  explicit DirectoryBlobSource(std::filesystem::path blobs) : blobs_(std::move(blobs)) {}

  cudaq_rt::Expected<cudaq_rt::FetchedBlob> fetch(const cudaq_rt::Digest &d,
                                                  uint64_t size) const override {
    ++fetches;
    if (fail)
      return cudaq_rt::make_error("", "the source is down");
    std::ifstream in(blobs_ / d.hex(), std::ios::binary);
    if (!in)
      return cudaq_rt::make_error("", "no blob ", d.short_str());
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (tamper && *tamper == d && !bytes.empty())
      bytes[bytes.size() / 2] ^= 1;
    if (bytes.size() != size)
      return cudaq_rt::make_error("", "blob ", d.short_str(), " is not ", size, " bytes");
    // The file itself only when its bytes are served as they are: a package links it then.
    return cudaq_rt::FetchedBlob{std::move(bytes), tamper || !offer_file ? std::filesystem::path()
                                                                         : blobs_ / d.hex()};
  }

  mutable std::atomic<int> fetches{0};
  bool fail = false;
  bool offer_file = false;                // serve the file too, for the package to link
  std::optional<cudaq_rt::Digest> tamper; // served with one byte changed

private:
  std::filesystem::path blobs_;
};
