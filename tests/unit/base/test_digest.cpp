#include "base/digest.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace cudaq_rt;

TEST_CASE("sha256 matches the FIPS 180-2 test vectors") {
  CHECK(sha256(std::string_view("abc")).hex() ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256(std::string_view("")).hex() ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("incremental hashing equals one-shot hashing") {
  Sha256 h;
  h.update(std::string_view("a"));
  h.update(std::string_view("bc"));
  CHECK(h.finish() == sha256(std::string_view("abc")));
}

TEST_CASE("fields are length-prefixed") {
  Sha256 a, b;
  a.field("ab");
  a.field("c");
  b.field("a");
  b.field("bc");
  CHECK(a.finish() != b.finish());
}

TEST_CASE("digests round-trip through their text form and reject anything else") {
  Digest d = sha256(std::string_view("abc"));
  auto back = Digest::parse(d.str());
  REQUIRE(back);
  CHECK(*back == d);
  CHECK_FALSE(Digest::parse(d.hex()));                   // no prefix
  CHECK_FALSE(Digest::parse("sha256:" + d.hex() + "0")); // too long
  std::string upper = d.str();
  upper[10] = 'A';
  CHECK_FALSE(Digest::parse(upper));
  CHECK_FALSE(Digest::parse("sha256:../../../../etc/passwd"));
}

TEST_CASE("the chunked digest is SHA-256 over the size and the 1 MiB chunks' digests, in order") {
  // 2.5 chunks: two whole ones and a short last one, hashed on several threads.
  std::vector<uint8_t> data(chunked_sha256_chunk * 5 / 2);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::span<const uint8_t> all(data);
  Sha256 h;
  const std::string_view label("cudaq-rt chunked sha256 v1\0", 27);
  h.update(label);
  const uint64_t size = data.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i)
    le[i] = static_cast<uint8_t>(size >> (8 * i));
  h.update(std::span<const uint8_t>(le, 8));
  for (size_t at = 0; at < data.size(); at += chunked_sha256_chunk) {
    Digest d = sha256(all.subspan(at, std::min(chunked_sha256_chunk, data.size() - at)));
    h.update(std::span<const uint8_t>(d.bytes.data(), d.bytes.size()));
  }
  CHECK(chunked_sha256(data) == h.finish());
  CHECK(chunked_sha256(data) != sha256(data));
  // Every byte counts, the last chunk's too; so does the size (a zero appended).
  data.back() ^= 1;
  CHECK(chunked_sha256(data) != h.finish());
  data.back() ^= 1;
  std::vector<uint8_t> longer = data;
  longer.push_back(0);
  CHECK(chunked_sha256(longer) != chunked_sha256(data));
  CHECK(chunked_sha256(std::span<const uint8_t>()) != sha256(std::string_view()));
}
