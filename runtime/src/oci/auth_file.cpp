// Registry credentials from docker's, podman's and skopeo's auth files (auth_file.h).
#include "oci/auth_file.h"

#include "base/atomic_file.h"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <vector>

namespace fs = std::filesystem;

namespace cudaq_rt {

namespace {

// An auth file is a few entries; a file larger than this is not one.
constexpr uint64_t max_auth_file_bytes = uint64_t{1} << 20;

// "https://host:5000/v1/" -> "host:5000/v1": the scheme and trailing slashes, as docker's older
// keys carry them.
std::string key_without_scheme(std::string key) {
  for (std::string_view scheme : {"https://", "http://"})
    if (key.starts_with(scheme))
      key.erase(0, scheme.size());
  while (!key.empty() && key.back() == '/')
    key.pop_back();
  return key;
}

Expected<std::string> decode_auth(const std::string &encoded, const fs::path &file,
                                  const std::string &key) {
  auto bad = [&] {
    return make_error(file.string(), "the entry for ", quote(key),
                      " is not base64 of user:password");
  };
  if (encoded.empty() || encoded.size() % 4 != 0 || encoded.size() > 64 << 10)
    return bad();
  std::vector<unsigned char> out(encoded.size() / 4 * 3 + 1);
  const int n = EVP_DecodeBlock(out.data(), reinterpret_cast<const unsigned char *>(encoded.data()),
                                static_cast<int>(encoded.size()));
  if (n < 0)
    return bad();
  // EVP_DecodeBlock counts the padding's zero bytes in: drop them.
  size_t size = static_cast<size_t>(n);
  for (size_t pad = encoded.size(); pad > 0 && encoded[pad - 1] == '=' && size > 0; --pad)
    --size;
  std::string text(reinterpret_cast<const char *>(out.data()), size);
  if (text.find(':') == std::string::npos || text.find_first_of("\r\n") != std::string::npos ||
      text.find('\0') != std::string::npos)
    return bad();
  return text;
}

} // namespace

Expected<std::optional<FileCredentials>> credentials_in_auth_file(std::string_view text,
                                                                  const fs::path &file,
                                                                  const std::string &host,
                                                                  const std::string &repository) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    return make_error(file.string(), "is not a JSON object (an auth file: {\"auths\": {...}})");
  auto auths = j.find("auths");
  if (auths == j.end())
    return std::optional<FileCredentials>();
  if (!auths->is_object())
    return make_error(file.string(), "\"auths\" is not an object");
  // host/a/b, host/a, host: the longest that has an entry.
  std::vector<std::string> wanted;
  std::string scope = host + "/" + repository;
  for (;;) {
    wanted.push_back(scope);
    const size_t slash = scope.rfind('/');
    if (slash == std::string::npos)
      break;
    scope.resize(slash);
  }
  for (const std::string &want : wanted)
    for (const auto &[key, entry] : auths->items()) {
      if (key_without_scheme(key) != want || !entry.is_object())
        continue;
      auto auth = entry.find("auth");
      if (auth == entry.end() || !auth->is_string() || auth->get<std::string>().empty())
        continue; // a credential helper's entry
      auto decoded = decode_auth(auth->get<std::string>(), file, key);
      if (!decoded)
        return std::move(decoded).take_error();
      return std::optional<FileCredentials>(FileCredentials{std::move(*decoded), file});
    }
  return std::optional<FileCredentials>();
}

Expected<std::optional<FileCredentials>>
credentials_from_auth_files(const std::string &host, const std::string &repository,
                            const std::function<const char *(const char *)> &getenv) {
  auto env = [&](const char *name) -> std::string {
    const char *v = getenv(name);
    return v && *v ? v : "";
  };
  std::vector<fs::path> files;
  if (std::string f = env("REGISTRY_AUTH_FILE"); !f.empty())
    files.emplace_back(f);
  if (std::string run = env("XDG_RUNTIME_DIR"); !run.empty())
    files.push_back(fs::path(run) / "containers" / "auth.json");
  const std::string home = env("HOME");
  if (!home.empty())
    files.push_back(fs::path(home) / ".config" / "containers" / "auth.json");
  if (std::string docker = env("DOCKER_CONFIG"); !docker.empty())
    files.push_back(fs::path(docker) / "config.json");
  else if (!home.empty())
    files.push_back(fs::path(home) / ".docker" / "config.json");
  for (const fs::path &file : files) {
    auto opened =
        RegularFile::open(file, {.follow_symlinks = true, .max_bytes = max_auth_file_bytes});
    if (!opened)
      return std::move(opened).take_error();
    if (!*opened)
      continue;
    auto text = (*opened)->read();
    if (!text)
      return std::move(text).take_error();
    auto found = credentials_in_auth_file(*text, file, host, repository);
    if (!found || *found)
      return found;
  }
  return std::optional<FileCredentials>();
}

} // namespace cudaq_rt
