#include "base/jobserver.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"

#include "cudaq_rt/error.h"

#include <cstdlib>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace cudaq_rt;

namespace {

// make's side of a jobserver: a pipe holding `tokens` bytes.
struct Pipe {
  int r = -1, w = -1;
  explicit Pipe(const std::string &tokens) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    r = fds[0];
    w = fds[1];
    REQUIRE(::write(w, tokens.data(), tokens.size()) == static_cast<ssize_t>(tokens.size()));
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
  // What the pipe holds now (read without blocking).
  std::string drain() const {
    int fd = ::open(cat("/proc/self/fd/", r).c_str(), O_RDONLY | O_NONBLOCK);
    std::string out;
    char c;
    while (::read(fd, &c, 1) == 1)
      out += c;
    ::close(fd);
    return out;
  }
};

} // namespace

TEST_CASE("MAKEFLAGS without a jobserver names none") {
  std::string why;
  CHECK_FALSE(Jobserver::from_makeflags("", &why));
  CHECK_FALSE(Jobserver::from_makeflags(" -j1 -- FOO=bar", &why));
  CHECK(why.empty());
}

TEST_CASE("tokens are taken from make's pipe and every one goes back, byte for byte") {
  Pipe make("+-");
  std::string why;
  auto js = Jobserver::from_makeflags(cat("w -j3 --jobserver-auth=", make.r, ",", make.w), &why);
  REQUIRE_MESSAGE(js, why);
  CHECK(js->peak() == 1);
  CHECK(js->acquire([] { return true; }));
  CHECK(js->acquire([] { return true; }));
  CHECK(js->peak() == 3);
  int polls = 0;
  CHECK_FALSE(js->acquire([&] { return ++polls < 3; })); // none left: gives up when not wanted
  CHECK(make.drain().empty());
  js->release();
  js->release();
  js->release(); // none held: nothing written
  const std::string back = make.drain();
  CHECK(back.size() == 2);
  CHECK(back.find('+') != std::string::npos);
  CHECK(back.find('-') != std::string::npos);
}

TEST_CASE("a token still held is given back when the client ends") {
  Pipe make("x");
  {
    auto js = Jobserver::from_makeflags(cat("--jobserver-fds=", make.r, ",", make.w), nullptr);
    REQUIRE(js);
    CHECK(js->acquire([] { return true; }));
  }
  CHECK(make.drain() == "x");
}

TEST_CASE("make 4.4's fifo jobserver") {
  ScratchDir dir;
  const std::string fifo = (dir.path / "jobserver").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  int keep = ::open(fifo.c_str(), O_RDWR); // make's end, holding one token
  REQUIRE(keep >= 0);
  REQUIRE(::write(keep, "t", 1) == 1);
  std::string why;
  auto js = Jobserver::from_makeflags("-j2 --jobserver-auth=fifo:" + fifo, &why);
  REQUIRE_MESSAGE(js, why);
  CHECK(js->acquire([] { return true; }));
  js->release();
  char c = 0;
  CHECK(::read(keep, &c, 1) == 1);
  CHECK(c == 't');
  ::close(keep);
}

TEST_CASE("a jobserver that cannot be used is none, and says why") {
  std::string why;
  CHECK_FALSE(Jobserver::from_makeflags("--jobserver-auth=banana", &why));
  CHECK(why.find("is not R,W or fifo:PATH") != std::string::npos);
  CHECK_FALSE(Jobserver::from_makeflags("--jobserver-auth=1000,1001", &why));
  CHECK(why == "MAKEFLAGS names a jobserver (1000,1001) that this process did not inherit (a "
               "recipe make does not take for a recursive one: mark it with '+'): running as if "
               "there were none");
  CHECK_FALSE(Jobserver::from_makeflags("--jobserver-auth=fifo:/nonexistent/fifo", &why));
  CHECK(why.find("cannot be opened: No such file or directory") != std::string::npos);
  // Descriptors that are open but not a pipe are not make's.
  ScratchDir dir;
  int f = ::open((dir.path / "file").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(f >= 0);
  CHECK_FALSE(Jobserver::from_makeflags(cat("--jobserver-auth=", f, ",", f), &why));
  ::close(f);
}

TEST_CASE("the process's jobserver is make's only once a tool's main has taken it") {
  Pipe make("t");
  ::setenv("MAKEFLAGS", cat("-j2 --jobserver-auth=", make.r, ",", make.w).c_str(), 1);
  CHECK(process_jobserver() == nullptr); // a program using the library never reads it
  take_jobserver_from_environment();
  Jobserver *js = process_jobserver();
  REQUIRE(js != nullptr);
  CHECK(js->acquire([] { return true; }));
  js->release();
  CHECK(make.drain() == "t");
  ::unsetenv("MAKEFLAGS");
}
