#include "oci/reference.h"

#include <doctest/doctest.h>

using namespace cudaq_rt;

TEST_CASE("a reference: host, repository and a tag, a digest or latest") {
  auto r = RegistryRef::parse("oci://127.0.0.1:5000/team/example:1.2");
  REQUIRE(r);
  CHECK(r->host == "127.0.0.1:5000");
  CHECK(r->repository == "team/example");
  CHECK(r->tag == "1.2");
  CHECK_FALSE(r->digest);
  CHECK(r->plain_http); // loopback
  CHECK(r->base_url() == "http://127.0.0.1:5000/v2/team/example");
  CHECK(r->manifest_reference() == "1.2");

  r = RegistryRef::parse("oci://registry.example.com/example");
  REQUIRE(r);
  CHECK(r->tag == "latest");
  CHECK_FALSE(r->plain_http);
  CHECK(r->base_url() == "https://registry.example.com/v2/example");

  const std::string hex(64, 'c');
  r = RegistryRef::parse("oci://[::1]:5000/example@sha256:" + hex);
  REQUIRE(r);
  CHECK(r->host == "[::1]:5000");
  CHECK(r->plain_http);
  CHECK(r->tag.empty());
  REQUIRE(r->digest);
  CHECK(r->manifest_reference() == "sha256:" + hex);
}

TEST_CASE("options: plain HTTP, bounds and where the secret is") {
  auto r = RegistryRef::parse(
      "oci://reg.internal:443/x:1#plain-http,timeout=250ms,stall=2,basic-env=REG");
  REQUIRE(r);
  CHECK(r->plain_http);
  CHECK(r->connect_timeout_ms == 250);
  CHECK(r->stall_ms == 2000);
  CHECK(r->auth == RegistryRef::Auth::basic);
  CHECK(r->auth_env == "REG");
  CHECK(r->str() ==
        "oci://reg.internal:443/x:1#plain-http,timeout=250ms,stall=2000ms,basic-env=REG");
  auto again = RegistryRef::parse(r->str());
  REQUIRE(again);
  CHECK(again->str() == r->str());
}

TEST_CASE("options: HTTPS to a loopback host, a CA file, the upload's chunk size") {
  auto plain = RegistryRef::parse("oci://127.0.0.1:5000/x:1");
  REQUIRE(plain);
  CHECK(plain->plain_http);
  CHECK(plain->chunk_bytes == RegistryRef::default_chunk_bytes);
  CHECK(plain->base_url() == "http://127.0.0.1:5000/v2/x");
  auto tls = RegistryRef::parse("oci://127.0.0.1:5000/x:1#https,chunk=64k");
  REQUIRE(tls);
  CHECK_FALSE(tls->plain_http);
  CHECK(tls->base_url() == "https://127.0.0.1:5000/v2/x");
  CHECK(tls->chunk_bytes == 64 * 1024);
  CHECK(tls->str() == "oci://127.0.0.1:5000/x:1#https,chunk=65536");
  auto ca = RegistryRef::parse("oci://localhost:5000/x:1#ca=/etc/reg/ca.pem,chunk=2M");
  REQUIRE(ca);
  CHECK_FALSE(ca->plain_http); // a CA to verify against means HTTPS
  CHECK(ca->ca_file == "/etc/reg/ca.pem");
  CHECK(ca->chunk_bytes == 2 * 1024 * 1024);
  auto again = RegistryRef::parse(ca->str());
  REQUIRE(again);
  CHECK(again->str() == ca->str());
  CHECK_FALSE(again->plain_http);
}

TEST_CASE("what is not a reference is refused, saying why") {
  auto why = [](const std::string &text) {
    auto r = RegistryRef::parse(text);
    REQUIRE_FALSE(r);
    return r.error().message;
  };
  CHECK(why("docker://x/y").find("does not start with oci://") != std::string::npos);
  CHECK(why("oci://host").find("no repository") != std::string::npos);
  CHECK(why("oci://host/Example:1").find("repository 'Example'") != std::string::npos);
  CHECK(why("oci://host/a..b:1").find("repository 'a..b'") != std::string::npos);
  CHECK(why("oci://host/a/:1").find("repository") != std::string::npos);
  CHECK(why("oci://host/a:-x").find("tag '-x'") != std::string::npos);
  CHECK(why("oci://host/a:" + std::string(129, 'x')).find("tag") != std::string::npos);
  CHECK(why("oci://u:p@host/a:1").find("credentials do not go") != std::string::npos);
  CHECK(why("oci://host:99999/a:1").find("host 'host:99999'") != std::string::npos);
  CHECK(why("oci://host:/a:1").find("host 'host:'") != std::string::npos);
  CHECK(why("oci://host/a@sha256:abc").find("the digest after '@'") != std::string::npos);
  CHECK(why("oci://host/a:1#timeout=0").find("is not a duration") != std::string::npos);
  CHECK(why("oci://host/a:1#basic-env=A,bearer-env=B").find("exclude each other") !=
        std::string::npos);
  CHECK(why("oci://host/a:1#read-only").find("option 'read-only'") != std::string::npos);
  CHECK(why("oci://host/a:1#chunk=1k").find("at least 4k") != std::string::npos);
  CHECK(why("oci://host/a:1#chunk=4G").find("option chunk='4G'") != std::string::npos);
  CHECK(why("oci://host/a:1#chunk=").find("option 'chunk='") != std::string::npos);
  CHECK(why("oci://host/a:1#plain-http,https").find("excludes https") != std::string::npos);
  CHECK(why("oci://host/a:1#ca=x.pem,plain-http").find("excludes https") != std::string::npos);
  // A port on the last component is not a tag: the tag is after the last '/'.
  auto r = RegistryRef::parse("oci://host:5000/a/b");
  REQUIRE(r);
  CHECK(r->repository == "a/b");
  CHECK(r->tag == "latest");
}
