// The interposer libraries as built: the names each exports for the dynamic linker (nm -D), every
// one that the newest release of its major defines (runtime/CMakeLists.txt's
// CUDAQ_RT_NVJITLINK_RELEASES) and nothing else; and what they answer, loaded into a child process
// (the real library is found once per process) that does not link libnvJitLink, where the
// program calls a name the real library lacks, or the real library is another major's.
// tests/interpose/test_nvjitlink_versions.py compares the names with NVIDIA's newest libraries.
#include "scratch_dir.h"
#include "unit_files.h"

#include <doctest/doctest.h>
#include <nvJitLink.h>

#include <dlfcn.h>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

// Each name of a library's dynamic symbol table it defines, with its version ("name@node").
std::set<std::string> dynamic_names(const std::string &library) {
  std::istringstream out(unit_files::command_output("nm -D --defined-only '" + library + "'"));
  std::set<std::string> names;
  for (std::string line; std::getline(out, line);) {
    std::string name = line.substr(line.rfind(' ') + 1);
    if (size_t at = name.find("@@"); at != std::string::npos)
      name.erase(at, 1);
    names.insert(name);
  }
  return names;
}

// The names the interposer of `major` must define when `newest` is the newest minor release of
// that major: every function under every release's name and unversioned, all under the real
// library's version node, and cudaq-rt's two hooks under a node of their own.
std::set<std::string> expected_names(unsigned major, unsigned newest) {
  std::vector<std::string> functions = {"Create",          "Destroy",          "AddData",
                                        "AddFile",         "Complete",         "GetLinkedCubinSize",
                                        "GetLinkedCubin",  "GetLinkedPtxSize", "GetLinkedPtx",
                                        "GetErrorLogSize", "GetErrorLog",      "GetInfoLogSize",
                                        "GetInfoLog"};
  if (major >= 13)
    functions.insert(functions.end(), {"GetLinkedLTOIRSize", "GetLinkedLTOIR"});
  const std::string node = "libnvJitLink.so." + std::to_string(major);
  std::set<std::string> names = {node,
                                 "nvJitLinkVersion@" + node,
                                 "__nvJitLinkAPI@" + node,
                                 "CUDAQ_RT_NVJITLINK_0",
                                 "cudaq_rt_nvjitlink_real_symbol@CUDAQ_RT_NVJITLINK_0",
                                 "cudaq_rt_nvjitlink_bypass@CUDAQ_RT_NVJITLINK_0"};
  for (const std::string &f : functions) {
    names.insert("nvJitLink" + f + "@" + node);
    for (unsigned minor = 0; minor <= newest; ++minor)
      names.insert("__nvJitLink" + f + "_" + std::to_string(major) + "_" + std::to_string(minor) +
                   "@" + node);
  }
  return names;
}

// The newest minor release of `major` in CUDAQ_RT_NVJITLINK_RELEASES ("12.9 13.5").
unsigned newest_minor(unsigned major) {
  std::istringstream releases(CUDAQ_RT_TEST_NVJITLINK_RELEASES);
  for (std::string r; releases >> r;)
    if (r.starts_with(std::to_string(major) + "."))
      return std::stoul(r.substr(r.find('.') + 1));
  FAIL("no release of major ", major, " in " CUDAQ_RT_TEST_NVJITLINK_RELEASES);
  return 0;
}

struct Answer {
  int result = -1;     // what the call returned
  std::string stderr_; // what the interposer wrote on stderr
};

// `symbol` of `library`, loaded into a child process, called as nvJitLinkCreate with a null
// handle twice (the real library answers NULL_INPUT); with $CUDAQ_RT_NVJITLINK_REAL at `real`
// where given, and no cache.
Answer create_in_child(const std::string &library, const std::string &symbol,
                       const std::string &real, const fs::path &scratch) {
  const fs::path err = scratch / "stderr", result = scratch / "result";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!::freopen(err.c_str(), "w", stderr))
      ::_exit(2);
    ::setenv("CUDAQ_RT_CACHE_DISABLE", "1", 1);
    if (real.empty())
      ::unsetenv("CUDAQ_RT_NVJITLINK_REAL");
    else
      ::setenv("CUDAQ_RT_NVJITLINK_REAL", real.c_str(), 1);
    void *lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    auto create =
        lib ? reinterpret_cast<nvJitLinkResult (*)(
                  nvJitLinkHandle *, uint32_t, const char *const *)>(::dlsym(lib, symbol.c_str()))
            : nullptr;
    if (!create)
      ::_exit(3);
    const char *options[] = {"-arch=sm_90"};
    const int first = create(nullptr, 1, options), second = create(nullptr, 1, options);
    std::fflush(stderr);
    unit_files::write_file(result, std::to_string(first == second ? first : -2));
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return {std::stoi(unit_files::read_file(result)), unit_files::read_file(err)};
}

const std::string toolkit_library = CUDAQ_RT_TEST_CUDA_LIBDIR "/libnvJitLink.so.13";

} // namespace

TEST_CASE("each interposer defines every name of the newest release of its major, and no other") {
  for (const auto &[major, library] :
       {std::pair<unsigned, std::string>{13, CUDAQ_RT_TEST_INTERPOSER_CU13},
        std::pair<unsigned, std::string>{12, CUDAQ_RT_TEST_INTERPOSER_CU12}}) {
    CAPTURE(library);
    CHECK(dynamic_names(library) == expected_names(major, newest_minor(major)));
  }
  // And every name the toolkit's library defines (the release cudaq-rt was built with).
  const std::set<std::string> cu13 = dynamic_names(CUDAQ_RT_TEST_INTERPOSER_CU13);
  for (const std::string &name : dynamic_names(toolkit_library)) {
    CAPTURE(name);
    CHECK(cu13.count(name) == 1);
  }
}

TEST_CASE("a name the real library lacks answers CUDA 13's OUTDATED_LIBRARY, said once") {
  ScratchDir dir;
  const std::string newest = "__nvJitLinkCreate_13_" + std::to_string(newest_minor(13));
  // Kept loaded: libnvJitLink's own allocations at load (its C++ runtime's) stay named by the
  // module, which the sanitizer's suppression matches; an unloaded one's are an unknown leak.
  void *real = ::dlopen(toolkit_library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  REQUIRE(real);
  const bool toolkit_has_it = ::dlsym(real, newest.c_str()) != nullptr;
  if (toolkit_has_it) {
    MESSAGE("the toolkit's nvJitLink is the newest release: no name it lacks");
    return;
  }
  const Answer a = create_in_child(CUDAQ_RT_TEST_INTERPOSER_CU13, newest, "", dir.path);
  CHECK(a.result == NVJITLINK_ERROR_OUTDATED_LIBRARY);
  CHECK(
      a.stderr_.starts_with("cudaq-rt-nvjitlink: error: " + newest + ": the real libnvJitLink ("));
  CHECK(a.stderr_.ends_with(") has no " + newest +
                            ": this program was built with a newer nvJitLink header than the "
                            "library it runs with\n"));
  CHECK(std::count(a.stderr_.begin(), a.stderr_.end(), '\n') == 1);
  // The name the real library has goes to it: a null handle is its NULL_INPUT.
  const Answer b = create_in_child(CUDAQ_RT_TEST_INTERPOSER_CU13, "__nvJitLinkCreate_13_0",
                                   toolkit_library, dir.path);
  CHECK(b.result == NVJITLINK_ERROR_NULL_INPUT);
  CHECK(b.stderr_.empty());
}

TEST_CASE("the CUDA 12 interposer refuses CUDA 13's library as its real one") {
  ScratchDir dir;
  const Answer a =
      create_in_child(CUDAQ_RT_TEST_INTERPOSER_CU12, "nvJitLinkCreate", toolkit_library, dir.path);
  CHECK(a.result == NVJITLINK_ERROR_INTERNAL);
  CHECK(a.stderr_.find("'" + toolkit_library +
                       "': is not the real libnvJitLink.so.12 (no libnvJitLink.so.12 version "
                       "node) (from $CUDAQ_RT_NVJITLINK_REAL)") != std::string::npos);
}
