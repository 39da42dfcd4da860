#include "oci/registry.h"

#include "loopback_http_server.h"
#include "scratch_dir.h"

#include <doctest/doctest.h>

#include <fstream>
#include <map>

using namespace cudaq_rt;
using namespace std::chrono_literals;

namespace {

Registry::Getenv env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::unique_ptr<Registry> open(const std::string &reference) {
  auto ref = RegistryRef::parse(reference);
  REQUIRE_MESSAGE(ref, (ref ? "" : ref.error().str()));
  auto r = Registry::open(*ref, env({}));
  REQUIRE_MESSAGE(r, (r ? "" : r.error().str()));
  return std::move(*r);
}

std::string open_error(const std::string &reference,
                       const std::map<std::string, std::string> &vars) {
  auto ref = RegistryRef::parse(reference);
  REQUIRE(ref);
  auto r = Registry::open(*ref, env(vars));
  REQUIRE_FALSE(r);
  return r.error().str();
}

const std::string blob = "the blob's bytes";
const Digest blob_digest = sha256(std::string_view(blob));

} // namespace

TEST_CASE("credentials named by the reference must be in the environment") {
  CHECK(open_error("oci://127.0.0.1:5000/team/app:1#bearer-env=TOK", {}) ==
        "oci://127.0.0.1:5000/team/app:1: TOK is unset or empty, but the reference's options "
        "take the bearer token from it");
  CHECK(open_error("oci://127.0.0.1:5000/team/app:1#basic-env=CREDS", {{"CREDS", ""}}) ==
        "oci://127.0.0.1:5000/team/app:1: CREDS is unset or empty, but the reference's options "
        "take the credentials from it");
  CHECK(open_error("oci://127.0.0.1:5000/app:1#bearer-env=TOK", {{"TOK", "a\r\nX-Evil: 1"}}) ==
        "oci://127.0.0.1:5000/app:1: TOK holds a line break");
  CHECK(open_error("oci://127.0.0.1:5000/app:1#basic-env=CREDS", {{"CREDS", "alice"}}) ==
        "oci://127.0.0.1:5000/app:1: CREDS must hold user:password for basic authentication");
}

TEST_CASE("without options, credentials come from an auth file; a broken one is an error") {
  ScratchDir dir;
  const auto file = dir.path / "auth.json";
  { std::ofstream(file) << R"({"auths": {"127.0.0.1:5000": {"auth": "Y2k6czNjcmV0"}}})"; }
  auto ref = RegistryRef::parse("oci://127.0.0.1:5000/app:1");
  REQUIRE(ref);
  auto r = Registry::open(*ref, env({{"REGISTRY_AUTH_FILE", file.string()}}));
  REQUIRE(r);
  CHECK((*r)->ref().auth == RegistryRef::Auth::basic);
  CHECK((*r)->ref().auth_file == file.string());
  { std::ofstream(file) << "{not json"; }
  const std::string e =
      open_error("oci://127.0.0.1:5000/app:1", {{"REGISTRY_AUTH_FILE", file.string()}});
  CHECK(e.starts_with("oci://127.0.0.1:5000/app:1: "));
  CHECK(e.find("auth.json") != std::string::npos);
}

TEST_CASE("the reference names the image and the manifest it asks for") {
  const std::string hex(64, 'c');
  auto by_digest = open("oci://127.0.0.1:5000/team/app@sha256:" + hex);
  CHECK(by_digest->name() == "oci://127.0.0.1:5000/team/app@sha256:" + hex);
  CHECK(by_digest->manifest_reference() == "sha256:" + hex);
  auto by_tag = open("oci://127.0.0.1:5000/team/app");
  CHECK(by_tag->name() == "oci://127.0.0.1:5000/team/app:latest");
  CHECK(by_tag->manifest_reference() == "latest");
}

TEST_CASE("a blob: its bytes when they match the digest, refused otherwise") {
  std::string served = blob;
  LoopbackHttpServer server(
      [&](const SeenRequest &, HttpConnection &c) { c.write(http_answer(200, served)); });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/team/app:1"));
  auto got = reg->get_blob(blob_digest, blob.size());
  REQUIRE_MESSAGE(got, (got ? "" : got.error().str()));
  CHECK(*got == blob);
  CHECK(server.requests().at(0).target == "/v2/team/app/blobs/" + blob_digest.str());

  served[3] ^= 1;
  got = reg->get_blob(blob_digest, blob.size());
  REQUIRE_FALSE(got);
  CHECK(got.error().str() == cat("oci://127.0.0.1:", server.port(), "/team/app:1: blob ",
                                 blob_digest.short_str(), " as served (", blob.size(),
                                 " bytes) does not match its digest: refused"));

  served = blob + "more";
  got = reg->get_blob(blob_digest, blob.size());
  REQUIRE_FALSE(got);
  CHECK(got.error().str() == cat("oci://127.0.0.1:", server.port(), "/team/app:1: blob ",
                                 blob_digest.short_str(), " is larger than the ", blob.size(),
                                 " bytes its descriptor says: refused"));
  CHECK(reg->traffic().requests == 3);
}

TEST_CASE("a blob declared larger than a package's may be is refused before a request") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &) {});
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1"));
  auto got = reg->get_blob(blob_digest, ImageSource::max_blob_bytes + 1);
  REQUIRE_FALSE(got);
  CHECK(got.error().str().ends_with("more than a package's blob may be (1073741824): refused"));
  CHECK(server.requests().empty());
}

TEST_CASE("a manifest over the bound is refused at its headers") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) {
    c.write(cat("HTTP/1.1 200 OK\r\nContent-Length: ", ImageSource::max_manifest_bytes + 1,
                "\r\n\r\n{"));
    c.hold(10s);
  });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1"));
  auto t0 = std::chrono::steady_clock::now();
  auto m = reg->get_manifest("1");
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  REQUIRE_FALSE(m);
  CHECK(m.error().str() == cat("oci://127.0.0.1:", server.port(),
                               "/app:1: the manifest is larger than 4194304 bytes: refused"));
  CHECK(server.requests().at(0).header("accept") == "application/vnd.oci.image.manifest.v1+json");
}

TEST_CASE("a manifest: checked against the digest asked for and the one the registry gives") {
  const std::string manifest = R"({"schemaVersion": 2})";
  const Digest digest = sha256(std::string_view(manifest));
  std::string said = digest.str();
  LoopbackHttpServer server([&](const SeenRequest &, HttpConnection &c) {
    c.write(http_answer(200, manifest,
                        {"Content-Type: application/vnd.oci.image.manifest.v1+json; x=1",
                         "Docker-Content-Digest: " + said}));
  });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1"));
  auto m = reg->get_manifest("1");
  REQUIRE_MESSAGE(m, (m ? "" : m.error().str()));
  CHECK(m->bytes == manifest);
  CHECK(m->digest == digest);
  CHECK(m->media_type == "application/vnd.oci.image.manifest.v1+json");

  const Digest other = sha256(std::string_view("other"));
  m = reg->get_manifest(other.str());
  REQUIRE_FALSE(m);
  CHECK(m.error().str().ends_with(
      cat(": the manifest served is ", digest.short_str(), ", not the one asked for: refused")));
  CHECK(server.requests().back().target == "/v2/app/manifests/" + other.str());

  said = other.str();
  m = reg->get_manifest("1");
  REQUIRE_FALSE(m);
  CHECK(m.error().str().ends_with(cat(": the manifest served does not match the digest '",
                                      other.str(), "' the registry gives for it: refused")));
}

TEST_CASE("a missing manifest and an HTTP error say what the registry said") {
  LoopbackHttpServer server([](const SeenRequest &req, HttpConnection &c) {
    if (req.target.ends_with("/nosuch"))
      c.write(http_answer(
          404, R"({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]})"));
    else
      c.write(http_answer(500, "oops"));
  });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1"));
  const std::string name = cat("oci://127.0.0.1:", server.port(), "/app:1");
  auto m = reg->get_manifest("nosuch");
  REQUIRE_FALSE(m);
  CHECK(m.error().str() == name + ": no such manifest (MANIFEST_UNKNOWN: manifest unknown)");
  m = reg->get_manifest("1");
  REQUIRE_FALSE(m);
  CHECK(m.error().str() ==
        name + ": cannot fetch the manifest: HTTP 500 (GET /v2/app/manifests/1)");
  auto has = reg->has_blob(blob_digest);
  REQUIRE_FALSE(has);
  CHECK(has.error().str() == name + ": cannot tell whether blob " + blob_digest.short_str() +
                                 " is there: HTTP 500 (HEAD /v2/app/blobs/" + blob_digest.str() +
                                 ")");
}

TEST_CASE("a registry that stops answering: one error after the stall bound") {
  LoopbackHttpServer server([](const SeenRequest &, HttpConnection &c) { c.hold(20s); });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1#stall=1s"));
  auto m = reg->get_manifest("1");
  REQUIRE_FALSE(m);
  CHECK(m.error().str().starts_with(
      cat("oci://127.0.0.1:", server.port(),
          "/app:1: GET /v2/app/manifests/1: the registry stopped answering: Operation too slow")));
}

TEST_CASE("a bearer challenge: a token from the realm, then the request again with it") {
  int port = 0;
  LoopbackHttpServer server([&](const SeenRequest &req, HttpConnection &c) {
    if (req.target.starts_with("/token"))
      c.write(http_answer(200, R"({"token": "t0k"})"));
    else if (req.header("authorization") != "Bearer t0k")
      c.write(http_answer(401, "",
                          {cat("WWW-Authenticate: Bearer realm=\"http://127.0.0.1:", port,
                               "/token\",service=\"reg\",scope=\"repository:app:pull\"")}));
    else
      c.write(http_answer(200, blob));
  });
  port = server.port();
  auto ref = RegistryRef::parse(cat("oci://127.0.0.1:", server.port(), "/app:1#basic-env=CREDS"));
  auto opened = Registry::open(*ref, env({{"CREDS", "alice:pw"}}));
  REQUIRE(opened);
  auto got = (*opened)->get_blob(blob_digest, blob.size());
  REQUIRE_MESSAGE(got, (got ? "" : got.error().str()));
  auto seen = server.requests();
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].header("authorization") == "Basic YWxpY2U6cHc=");
  CHECK(seen[1].target == "/token?service=reg&scope=repository%3Aapp%3Apull");
  CHECK(seen[1].header("authorization") == "Basic YWxpY2U6cHc=");
  CHECK(seen[2].header("authorization") == "Bearer t0k");
}

TEST_CASE("a blob upload: POST, PATCHes of the chunk size, PUT with the digest") {
  LoopbackHttpServer server([](const SeenRequest &req, HttpConnection &c) {
    if (req.method == "PUT")
      c.write(http_answer(201, ""));
    else
      c.write(http_answer(202, "", {"Location: /v2/app/blobs/uploads/u1?state=s"}));
  });
  auto reg = open(cat("oci://127.0.0.1:", server.port(), "/app:1#chunk=4k"));
  const std::string data(10000, 'd');
  const Digest d = sha256(std::string_view(data));
  auto st = reg->put_blob(d, as_bytes(data));
  REQUIRE_MESSAGE(st, (st ? "" : st.error().str()));
  auto seen = server.requests();
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].method == "POST");
  CHECK(seen[0].target == "/v2/app/blobs/uploads/");
  CHECK(seen[0].header("content-length") == "0");
  CHECK(seen[1].method == "PATCH");
  CHECK(seen[1].header("content-range") == "0-4095");
  CHECK(seen[1].body == data.substr(0, 4096));
  CHECK(seen[2].header("content-range") == "4096-8191");
  CHECK(seen[3].method == "PUT");
  CHECK(seen[3].target == "/v2/app/blobs/uploads/u1?state=s&digest=" + d.str());
  CHECK(seen[3].body == data.substr(8192));
  for (const SeenRequest &r : seen)
    CHECK(r.header("content-type") == "application/octet-stream");
  CHECK(reg->traffic().requests == 4);
  CHECK(reg->traffic().bytes_sent == data.size());
}
