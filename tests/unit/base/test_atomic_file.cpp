#include "base/atomic_file.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"
#include "unit_files.h"

#include <algorithm>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace cudaq_rt;
using unit_files::entries;
using unit_files::write_file;
namespace fs = std::filesystem;

namespace {

// What RegularFile::open says of `path`: its bytes, "missing", or the error.
std::string open_and_read(const fs::path &path, const OpenRules &rules = {}) {
  auto f = RegularFile::open(path, rules);
  if (!f)
    return f.error().str();
  if (!*f)
    return "missing";
  auto bytes = (*f)->read();
  return bytes ? *bytes : bytes.error().str();
}

pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0)
    ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// fsync(2) and rename(2) as this process calls them, recorded while `recording` (the test
// executable's definitions come before libc's; the real calls are libc's, through RTLD_NEXT).
bool recording = false;
std::vector<std::string> calls;

std::string fd_path(int fd) {
  char buf[4096];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, size_t(n)) : "?";
}

} // namespace

extern "C" int fsync(int fd) {
  static auto real = reinterpret_cast<int (*)(int)>(::dlsym(RTLD_NEXT, "fsync"));
  if (recording)
    calls.push_back("fsync " + fd_path(fd));
  return real(fd);
}

extern "C" int rename(const char *from, const char *to) {
  static auto real =
      reinterpret_cast<int (*)(const char *, const char *)>(::dlsym(RTLD_NEXT, "rename"));
  if (recording)
    calls.push_back(std::string("rename ") + from + " " + to);
  return real(from, to);
}

TEST_CASE("RegularFile opens regular files only, without blocking, bounded") {
  ScratchDir s;
  fs::path file = s.path / "file", link = s.path / "link", fifo = s.path / "fifo";
  write_file(file, "contents");
  fs::create_symlink(file, link);
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  auto quoted = [](const fs::path &p) { return "'" + p.string() + "': "; };

  CHECK(open_and_read(file) == "contents");
  CHECK(open_and_read(s.path / "none") == "missing");
  CHECK(open_and_read(link) == quoted(link) + "is a symbolic link, not a regular file");
  CHECK(open_and_read(link, {.follow_symlinks = true}) == "contents");
  CHECK(open_and_read(fifo) == quoted(fifo) + "is a FIFO or pipe, not a regular file");
  CHECK(open_and_read("/dev/zero", {.follow_symlinks = true}) ==
        "'/dev/zero': is a character device, not a regular file");
  CHECK(open_and_read(s.path) == quoted(s.path) + "is a directory");
  CHECK(open_and_read(file, {.max_bytes = 7}) ==
        quoted(file) + "is 8 bytes, more than the limit of 7");
  CHECK(open_and_read(file, {.max_bytes = 8}) == "contents");

  // Creating never goes through a link, not even a dangling one.
  fs::path dangling = s.path / "dangling";
  fs::create_symlink(s.path / "target", dangling);
  CHECK(open_and_read(dangling, {.create_mode = 0644}) ==
        quoted(dangling) + "is a symbolic link, not a regular file");
  CHECK_FALSE(fs::exists(s.path / "target"));
  CHECK(open_and_read(s.path / "new", {.create_mode = 0644}).empty());
}

TEST_CASE("a temporary directory is locked by its writer and removed when it is stale") {
  ScratchDir s;
  fs::path final_path = s.path / "app.cudaqpkg";
  auto live = TempDir::create_beside(final_path);
  REQUIRE(live);
  // Its writer holds it: nobody else can lock it.
  int fd = ::open(live->path().c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  CHECK(::flock(fd, LOCK_EX | LOCK_NB) != 0);
  ::close(fd);

  const std::string stale = cat(".app.cudaqpkg.tmp-", dead_pid(), "-1");
  const std::string held = cat(".app.cudaqpkg.tmp-", dead_pid(), "-2");
  fs::create_directories(s.path / stale / "blobs");
  fs::create_directory(s.path / held);
  fs::create_directory(s.path / ".app.cudaqpkg.old-1");
  fs::create_directory(s.path / ".other.cudaqpkg.old-1"); // another package's
  int hold = ::open((s.path / held).c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(::flock(hold, LOCK_SH) == 0);
  remove_stale_temporaries(final_path);
  ::close(hold);
  std::vector<std::string> left = {".other.cudaqpkg.old-1", held, live->path().filename().string()};
  std::sort(left.begin(), left.end());
  CHECK(entries(s.path) == left);
}

TEST_CASE("made directories are taken back unless kept, and only while empty") {
  ScratchDir s;
  const fs::path deep = s.path / "a" / "b" / "c";
  {
    auto made = MadeDirectories::make(deep);
    REQUIRE(made);
    CHECK(fs::is_directory(deep));
  }
  CHECK_FALSE(fs::exists(s.path / "a")); // every level it made, none it found
  CHECK(fs::is_directory(s.path));
  {
    auto made = MadeDirectories::make(deep);
    REQUIRE(made);
    made->keep();
  }
  CHECK(fs::is_directory(deep));
  // What another writer put there meanwhile stays, and so do the directories holding it.
  const fs::path other = s.path / "x" / "y";
  {
    auto made = MadeDirectories::make(other / "z");
    REQUIRE(made);
    write_file(other / "theirs", "kept");
  }
  CHECK(fs::exists(other / "theirs"));
  CHECK_FALSE(fs::exists(other / "z"));
  // An existing directory is no error; a file in the way is.
  CHECK(MadeDirectories::make(deep));
  write_file(s.path / "file", "x");
  auto refused = MadeDirectories::make(s.path / "file");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().str() == "'" + (s.path / "file").string() + "': is not a directory");
  auto under_file = MadeDirectories::make(s.path / "file" / "sub");
  REQUIRE_FALSE(under_file);
  CHECK(under_file.error().str().starts_with("'" + (s.path / "file" / "sub").string() +
                                             "': cannot create the directory: "));
}

TEST_CASE(
    "write_file_atomic: the bytes synced, then renamed into place, then the directory synced") {
  // A rename that can reach the disk before the file's bytes would leave an empty or torn file
  // under the real name after a crash. The order, from the calls themselves: a mutation that
  // skipped the first fsync passed every other test.
  ScratchDir s;
  const fs::path dir = fs::canonical(s.path);
  const std::string data = "the bytes";
  calls.clear();
  recording = true;
  Status st = write_file_atomic(
      dir / "f", std::span(reinterpret_cast<const uint8_t *>(data.data()), data.size()));
  recording = false;
  REQUIRE_MESSAGE(st, (st ? "" : st.error().str()));
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].starts_with("fsync " + (dir / ".f").string()));
  const std::string tmp = calls[0].substr(std::string("fsync ").size());
  CHECK(calls[1] == "rename " + tmp + " " + (dir / "f").string());
  CHECK(calls[2] == "fsync " + dir.string());
  CHECK(open_and_read(dir / "f") == data);
}
