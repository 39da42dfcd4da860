#include "cudaq_rt/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string unique_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return cat(".tmp-", ::getpid(), "-", hex(rng()).substr(2));
}

Status write_all(int fd, std::span<const uint8_t> data, const fs::path &path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return make_error(path.string(), "cannot write: ", errno_text(errno));
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

} // namespace

Status fsync_path(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(path.string(), "cannot open to sync: ", errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL) // some filesystems cannot fsync directories
    return make_error(path.string(), "cannot sync: ", errno_text(err));
  return Status::ok();
}

Status write_file_atomic(const fs::path &path, std::span<const uint8_t> data) {
  fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  fs::path tmp = dir / ("." + path.filename().string() + unique_suffix());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(path.string(), "cannot create: ", errno_text(errno));
  Status st = write_all(fd, data, path);
  if (st && ::fsync(fd) != 0)
    st = make_error(path.string(), "cannot sync: ", errno_text(errno));
  if (::close(fd) != 0 && st)
    st = make_error(path.string(), "cannot close: ", errno_text(errno));
  if (st && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = make_error(path.string(), "cannot rename into place: ", errno_text(errno));
  if (!st) {
    ::unlink(tmp.c_str());
    return st;
  }
  return fsync_path(dir);
}

Expected<std::string> read_file(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(path.string(), "cannot open: ", errno_text(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return make_error(path.string(), "cannot read: ", errno_text(err));
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

fs::path entry_path(const fs::path &p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec)
    abs = p;
  abs = abs.lexically_normal();
  if (!abs.has_filename() && abs.has_parent_path() && abs != abs.root_path())
    abs = abs.parent_path();
  return abs;
}

Expected<TempDir> TempDir::create_beside(const fs::path &final_path) {
  fs::path abs = entry_path(final_path);
  fs::path dir = abs.parent_path();
  fs::path tmp = dir / ("." + abs.filename().string() + unique_suffix());
  if (::mkdir(tmp.c_str(), 0755) != 0)
    return make_error(dir.string(), "cannot create a temporary directory: ", errno_text(errno));
  return TempDir(tmp);
}

TempDir::TempDir(TempDir &&other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

Status TempDir::commit(const fs::path &final_path, bool replace) {
  fs::path abs = entry_path(final_path);
  std::error_code ec;
  bool exists = fs::exists(fs::symlink_status(abs, ec));
  if (replace && exists) {
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, abs.c_str(), RENAME_EXCHANGE) == 0) {
      // path_ now holds the old directory.
      fs::remove_all(path_, ec);
      path_.clear();
      return fsync_path(abs.parent_path());
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      return make_error(abs.string(), "cannot replace: ", errno_text(errno));
  }
  fs::path aside;
  if (replace && exists) {
    aside = abs.parent_path() / ("." + abs.filename().string() + unique_suffix() + ".old");
    if (::rename(abs.c_str(), aside.c_str()) != 0)
      return make_error(abs.string(), "cannot move the existing one aside: ", errno_text(errno));
  }
  // rename(2) onto an existing non-empty directory fails, so without `replace` an existing
  // package is never clobbered, even by a racing writer.
  if (::rename(path_.c_str(), abs.c_str()) != 0) {
    int err = errno;
    if (!aside.empty())
      ::rename(aside.c_str(), abs.c_str());
    if (err == ENOTEMPTY || err == EEXIST)
      return make_error(abs.string(), "already exists (use --force to replace it)");
    return make_error(abs.string(), "cannot rename into place: ", errno_text(err));
  }
  path_.clear();
  if (!aside.empty())
    fs::remove_all(aside, ec);
  return fsync_path(abs.parent_path());
}

} // namespace cudaq_rt
