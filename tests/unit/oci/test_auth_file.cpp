#include "oci/auth_file.h"

#include "scratch_dir.h"

#include <doctest/doctest.h>

#include <fstream>
#include <map>

using namespace cudaq_rt;

namespace {

std::optional<std::string> found(std::string_view text, const std::string &host,
                                 const std::string &repository = "team/app") {
  auto c = credentials_in_auth_file(text, "auth.json", host, repository);
  REQUIRE_MESSAGE(c, (c ? "" : c.error().str()));
  if (!*c)
    return std::nullopt;
  CHECK((*c)->file == "auth.json");
  return (*c)->user_password;
}

std::string error_of(std::string_view text) {
  auto c = credentials_in_auth_file(text, "auth.json", "reg:5000", "team/app");
  REQUIRE_FALSE(c);
  return c.error().str();
}

} // namespace

TEST_CASE("an auth file's entry for the host gives user:password, decoded") {
  // base64("ci:s3cret") and base64("ns:pw"), as skopeo login and docker login write them.
  const std::string file = R"({"auths": {"reg:5000": {"auth": "Y2k6czNjcmV0"},
                                          "reg:5000/team": {"auth": "bnM6cHc="},
                                          "other": {"auth": "Y2k6czNjcmV0"}}})";
  // The longest key that is host/repository or a prefix of it at a '/' wins.
  CHECK(found(file, "reg:5000") == "ns:pw");
  CHECK(found(file, "reg:5000", "elsewhere/app") == "ci:s3cret");
  CHECK(found(file, "reg:5000", "teamster/app") == "ci:s3cret"); // not a prefix at a '/'
  CHECK(found(file, "reg:5001") == std::nullopt);
  CHECK(found(file, "reg") == std::nullopt);
  // docker's older keys carry a scheme and a trailing slash.
  CHECK(found(R"({"auths": {"https://reg:5000/": {"auth": "Y2k6czNjcmV0"}}})", "reg:5000") ==
        "ci:s3cret");
  // A credential helper's entry (no auth) names no secret; no auths at all is no entry.
  CHECK(found(R"({"auths": {"reg:5000": {}}, "credsStore": "desktop"})", "reg:5000") ==
        std::nullopt);
  CHECK(found(R"({"credHelpers": {"reg:5000": "ecr-login"}})", "reg:5000") == std::nullopt);
}

TEST_CASE("an auth file that is not one, or an entry that is not user:password, is one line") {
  CHECK(error_of("[]") == "'auth.json': is not a JSON object (an auth file: {\"auths\": {...}})");
  CHECK(error_of(R"({"auths": []})") == "'auth.json': \"auths\" is not an object");
  for (const char *bad : {"!!!!", "Y2k", "bm9jb2xvbg==" /* nocolon */, "Y2k6czNj\\ncmV0"}) {
    CAPTURE(bad);
    CHECK(error_of(std::string(R"({"auths": {"reg:5000": {"auth": ")") + bad + "\"}}}") ==
          "'auth.json': the entry for 'reg:5000' is not base64 of user:password");
  }
}

TEST_CASE("the files are read in podman's order, the first with an entry winning") {
  ScratchDir dir;
  auto write = [&](const std::string &rel, const std::string &text) {
    std::filesystem::create_directories((dir.path / rel).parent_path());
    std::ofstream(dir.path / rel) << text;
  };
  const std::string a = R"({"auths": {"reg:5000": {"auth": "YTph"}}})"; // a:a
  const std::string b = R"({"auths": {"reg:5000": {"auth": "Yjpi"}}})"; // b:b
  write("home/.docker/config.json", b);
  std::map<std::string, std::string> env = {{"HOME", (dir.path / "home").string()}};
  auto getenv = [&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto user = [&]() -> std::string {
    auto c = credentials_from_auth_files("reg:5000", "team/app", getenv);
    REQUIRE_MESSAGE(c, (c ? "" : c.error().str()));
    return *c ? (*c)->user_password : "";
  };
  CHECK(user() == "b:b"); // docker's, the last resort
  write("home/.config/containers/auth.json", a);
  CHECK(user() == "a:a"); // podman's per-user file comes first
  write("explicit.json", R"({"auths": {}})");
  env["REGISTRY_AUTH_FILE"] = (dir.path / "explicit.json").string();
  CHECK(user() == "a:a"); // a file without the host's entry passes to the next
  env["DOCKER_CONFIG"] = (dir.path / "nowhere").string();
  std::filesystem::remove(dir.path / "home/.config/containers/auth.json");
  CHECK(user() == ""); // DOCKER_CONFIG replaces ~/.docker
  write("explicit.json", "not json");
  auto c = credentials_from_auth_files("reg:5000", "team/app", getenv);
  REQUIRE_FALSE(c);
  CHECK(c.error().str().find("explicit.json") != std::string::npos);
}
