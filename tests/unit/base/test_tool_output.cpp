#include "base/tool_output.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "scratch_dir.h"

#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path &p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Points file descriptor `fd` at a file while it lives, then back where it was.
class Redirect {
public:
  Redirect(int fd, const fs::path &to) : fd_(fd), saved_(::dup(fd)) {
    REQUIRE(saved_ >= 0);
    int file = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    REQUIRE(file >= 0);
    REQUIRE(::dup2(file, fd_) == fd_);
    ::close(file);
  }
  ~Redirect() {
    ::dup2(saved_, fd_);
    ::close(saved_);
  }
  Redirect(const Redirect &) = delete;
  Redirect &operator=(const Redirect &) = delete;

private:
  int fd_, saved_;
};

} // namespace

TEST_CASE("diagnostics are one line each on stderr, in the tools' one form") {
  StringToolOutput o("cudaq-rt-link");
  CHECK(o.tool() == "cudaq-rt-link");
  CHECK(o.fail(make_error("app.cudaqpkg", "no manifest.json")) == 1);
  CHECK(o.fail(make_error("", "no package given")) == 1);
  o.warn("sm_90: the package's record is stale");
  o.note("sm_90: linked per TU");
  CHECK(o.err_text == "cudaq-rt-link: error: 'app.cudaqpkg': no manifest.json\n"
                      "cudaq-rt-link: error: no package given\n"
                      "cudaq-rt-link: warning: sm_90: the package's record is stale\n"
                      "cudaq-rt-link: note: sm_90: linked per TU\n");
  CHECK(o.out_text.empty());
  CHECK(o.flushes == 0);
}

TEST_CASE("a subject is quoted and escaped, so that an error stays one line") {
  StringToolOutput o("cudaq-rt-pack");
  o.fail(make_error("a\nb's.o", "section __nv_relfatbin: truncated"));
  CHECK(o.err_text == "cudaq-rt-pack: error: 'a\\nb\\'s.o': section __nv_relfatbin: truncated\n");
}

TEST_CASE("what the user asked for goes to stdout as it is, and flushes are counted") {
  StringToolOutput o("cudaq-rt-run");
  o.out("first ");
  o.out("line\n");
  o.flush();
  o.out("{\"ok\": true}\n");
  o.flush();
  CHECK(o.out_text == "first line\n{\"ok\": true}\n");
  CHECK(o.err_text.empty());
  CHECK(o.flushes == 2);
}

TEST_CASE("the stdio output writes to the process's stdout and stderr") {
  ScratchDir tmp;
  std::fflush(stdout);
  std::fflush(stderr);
  int rc = 0;
  { // No assertion in here: doctest would report to the redirected stdout.
    Redirect out(STDOUT_FILENO, tmp.path / "stdout");
    Redirect err(STDERR_FILENO, tmp.path / "stderr");
    StdioToolOutput o("cudaq-rt-link");
    o.out("sm_90  linked  1234 bytes\n");
    rc = o.fail(make_error("pkg", "bad"));
    o.warn("w");
    o.note("n");
    o.flush(); // stdout is a file here: without the flush its line would come out later
  }
  CHECK(rc == 1);
  CHECK(slurp(tmp.path / "stdout") == "sm_90  linked  1234 bytes\n");
  CHECK(slurp(tmp.path / "stderr") == "cudaq-rt-link: error: 'pkg': bad\n"
                                      "cudaq-rt-link: warning: w\n"
                                      "cudaq-rt-link: note: n\n");
}

TEST_CASE("every JSON document carries the format version, unless it has its own") {
  StringToolOutput o("tool");
  o.out_json({{"a", 1}});
  CHECK(o.out_text == "{\n  \"a\": 1,\n  \"format_version\": 1\n}\n");
  StringToolOutput own("tool");
  own.out_json({{"format_version", 7}});
  CHECK(own.out_text == "{\n  \"format_version\": 7\n}\n");
  StringToolOutput array("tool");
  array.out_json(nlohmann::json::array({1}));
  CHECK(array.out_text == "[\n  1\n]\n");
}
