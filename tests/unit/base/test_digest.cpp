#include "base/digest.h"

#include <doctest/doctest.h>

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
