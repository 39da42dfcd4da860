// Finding the real libnvJitLink where no definition follows the interposer's: this test does not
// link libnvJitLink, so RTLD_NEXT finds none, and the library is loaded by path. real_nvjitlink
// remembers its first answer for the process, so each case asks in a child process of its own,
// with its environment set there.
#include "interpose/real_nvjitlink.h"

#include "scratch_dir.h"
#include "unit_files.h"

#include "nvjitlink_major.h"
#include <doctest/doctest.h>

#include <cstddef>
#include <dlfcn.h>
#include <link.h>
#include <optional>
#include <sys/wait.h>
#include <unistd.h>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

using test_majors::cuda13;

const std::string toolkit_library = CUDAQ_RT_TEST_CUDA_LIBDIR "/libnvJitLink.so.13";

// real_nvjitlink(cuda13) in a child with `env` set: "found PATH MAJOR.MINOR" (the version its
// nvJitLinkVersion answers), or the error's text.
std::string found_in_child(const std::vector<std::pair<std::string, std::string>> &env) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::unsetenv(nvjitlink_real_env);
    for (const auto &[name, value] : env)
      ::setenv(name.c_str(), value.c_str(), 1);
    std::string out;
    if (auto real = real_nvjitlink(cuda13)) {
      unsigned major = 0, minor = 0;
      (*real)->api.version(&major, &minor);
      out = cat("found ", (*real)->path, " ", major, ".", minor);
    } else {
      out = real.error().str();
    }
    ssize_t n = ::write(fds[1], out.data(), out.size());
    ::_exit(n == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return out;
}

std::string version_of_toolkit_library() {
  std::string found = found_in_child({{nvjitlink_real_env, toolkit_library}});
  return found.substr(found.rfind(' ') + 1);
}

// The first libnvJitLink.so.13 in the directories the loader searches for this program
// (LD_LIBRARY_PATH, its RUNPATH: cudaq-rt's CUDA libraries put the toolkit's there, the system's).
std::optional<std::string> first_in_loader_search() {
  void *program = ::dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  Dl_serinfo size{};
  REQUIRE(program);
  REQUIRE(::dlinfo(program, RTLD_DI_SERINFOSIZE, &size) == 0);
  std::vector<std::max_align_t> storage(size.dls_size / sizeof(std::max_align_t) + 1);
  auto *info = reinterpret_cast<Dl_serinfo *>(storage.data());
  *info = size;
  REQUIRE(::dlinfo(program, RTLD_DI_SERINFO, info) == 0);
  for (unsigned i = 0; i < info->dls_cnt; ++i) {
    const fs::path candidate = fs::path(info->dls_serpath[i].dls_name) / "libnvJitLink.so.13";
    std::error_code ec;
    if (fs::exists(candidate, ec))
      return candidate.string();
  }
  return std::nullopt;
}

} // namespace

TEST_CASE("$CUDAQ_RT_NVJITLINK_REAL names the real library, and only a real one is taken") {
  ScratchDir dir;
  const std::string from_env = " (from $CUDAQ_RT_NVJITLINK_REAL)";
  SUBCASE("the toolkit's libnvJitLink.so.13") {
    const std::string found = found_in_child({{nvjitlink_real_env, toolkit_library}});
    CHECK(found.starts_with("found " + toolkit_library + " 13."));
  }
  SUBCASE("a file that is no library") {
    const std::string text = unit_files::write_file(dir.path / "libnvJitLink.so.13", "text\n");
    const std::string refused = found_in_child({{nvjitlink_real_env, text}});
    CHECK(refused.starts_with("'" + text + "': cannot load the real libnvJitLink: "));
    CHECK(refused.ends_with(from_env));
  }
  SUBCASE("a library that is not nvJitLink") {
    const std::string cudart = CUDAQ_RT_TEST_CUDA_LIBDIR "/libcudart.so.13";
    CHECK(found_in_child({{nvjitlink_real_env, cudart}}) ==
          "'" + cudart +
              "': is not the real libnvJitLink.so.13 (no libnvJitLink.so.13 version node)" +
              from_env);
  }
  SUBCASE("the interposer itself") {
    CHECK(found_in_child({{nvjitlink_real_env, CUDAQ_RT_TEST_INTERPOSER_CU13}}) ==
          "'" CUDAQ_RT_TEST_INTERPOSER_CU13 "': is the interposer, not the real libnvJitLink" +
              from_env);
  }
  SUBCASE("a path where nothing is") {
    const std::string none = (dir.path / "none.so").string();
    const std::string refused = found_in_child({{nvjitlink_real_env, none}});
    CHECK(refused.starts_with("'" + none + "': cannot load the real libnvJitLink: "));
    CHECK(refused.ends_with(from_env));
  }
}

TEST_CASE("without it, the loader's search comes first, then $CUDA_HOME, then the toolkit's") {
  ScratchDir dir;
  const std::string toolkit_version = version_of_toolkit_library();
  const fs::path home = dir.path / "cuda";
  fs::create_directories(home / "lib64");
  const fs::path in_home = home / "lib64" / "libnvJitLink.so.13";
  SUBCASE("a real library under $CUDA_HOME is taken where the loader's search has none") {
    fs::create_symlink(toolkit_library, in_home);
    const std::string expected = first_in_loader_search().value_or(in_home.string());
    CHECK(found_in_child({{"CUDA_HOME", home.string()}}) ==
          "found " + expected + " " + toolkit_version);
  }
  SUBCASE("a file there that is not the library is passed over") {
    unit_files::write_file(in_home, "not a library\n");
    const std::string found = found_in_child({{"CUDA_HOME", home.string()}});
    CHECK(found.starts_with("found "));
    CHECK(found.find(in_home.string()) == std::string::npos);
    CHECK(found.ends_with(" " + toolkit_version));
  }
}
