#include "base/atomic_file.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <random>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

std::string random_hex() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return hex(rng()).substr(2);
}

std::string unique_suffix() {
  return cat(".tmp-", ::getpid(), "-", random_hex());
}

// This process's temporary files and directories, removed if a signal stops it. The mutex also
// makes "rename into place, then forget" one step as the signal thread sees it, so that it never
// removes what a commit has just made final.
std::mutex &registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<fs::path> &registry() {
  static std::vector<fs::path> r;
  return r;
}

void forget_locked(const fs::path &p) {
  std::vector<fs::path> &r = registry();
  r.erase(std::remove(r.begin(), r.end(), p), r.end());
}

void forget(const fs::path &p) {
  std::lock_guard lock(registry_mutex());
  forget_locked(p);
}

// Removes the directory at `path` if nobody holds a flock on it: not its writer, not a reader.
// Where directories cannot be locked at all (some network filesystems), readers hold nothing
// either, and it goes at once.
void remove_if_unheld(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 || errno != EWOULDBLOCK) {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  ::close(fd);
}

bool process_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

const char *not_regular(mode_t mode) {
  if (S_ISDIR(mode))
    return "is a directory";
  if (S_ISLNK(mode))
    return "is a symbolic link, not a regular file";
  if (S_ISFIFO(mode))
    return "is a FIFO or pipe, not a regular file";
  if (S_ISCHR(mode))
    return "is a character device, not a regular file";
  if (S_ISBLK(mode))
    return "is a block device, not a regular file";
  if (S_ISSOCK(mode))
    return "is a socket, not a regular file";
  return "is not a regular file";
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
  int fd;
  {
    std::lock_guard lock(registry_mutex());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      return make_error(path.string(), "cannot create: ", errno_text(errno));
    registry().push_back(tmp);
  }
  Status st = write_all(fd, data, path);
  if (st && ::fsync(fd) != 0)
    st = make_error(path.string(), "cannot sync: ", errno_text(errno));
  if (::close(fd) != 0 && st)
    st = make_error(path.string(), "cannot close: ", errno_text(errno));
  if (st) {
    std::lock_guard lock(registry_mutex());
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      st = make_error(path.string(), "cannot rename into place: ", errno_text(errno));
    else
      forget_locked(tmp);
  }
  if (!st) {
    ::unlink(tmp.c_str());
    forget(tmp);
    return st;
  }
  return fsync_path(dir);
}

Expected<std::optional<RegularFile>> RegularFile::open(const fs::path &path,
                                                       const OpenRules &rules) {
  return open_at(AT_FDCWD, path.string(), path, rules);
}

Expected<std::optional<RegularFile>> RegularFile::open_at(int dirfd, const std::string &name,
                                                          const fs::path &shown,
                                                          const OpenRules &rules) {
  int flags = (rules.write ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  if (!rules.follow_symlinks)
    flags |= O_NOFOLLOW;
  if (rules.create_mode)
    flags |= O_CREAT;
  int fd = ::openat(dirfd, name.c_str(), flags, rules.create_mode);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT)
      return std::optional<RegularFile>();
    // O_NOFOLLOW fails on a link with ELOOP; a socket fails with ENXIO: say what is there.
    struct stat st;
    if (::fstatat(dirfd, name.c_str(), &st, rules.follow_symlinks ? 0 : AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISREG(st.st_mode))
      return make_error(shown.string(), not_regular(st.st_mode));
    return make_error(shown.string(), "cannot open: ", errno_text(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return make_error(shown.string(), "cannot stat: ", errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(shown.string(), not_regular(st.st_mode));
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > rules.max_bytes) {
    ::close(fd);
    return make_error(shown.string(), "is ", size, " bytes, more than the limit of ",
                      rules.max_bytes);
  }
  return std::optional<RegularFile>(RegularFile(fd, size, shown));
}

RegularFile::RegularFile(RegularFile &&o) noexcept
    : fd_(o.fd_), size_(o.size_), shown_(std::move(o.shown_)) {
  o.fd_ = -1;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0)
    ::close(fd_);
}

Expected<std::string> RegularFile::read() const {
  std::string out(size_, '\0');
  uint64_t done = 0;
  while (done < size_) {
    ssize_t n = ::pread(fd_, out.data() + done, size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return make_error(shown_.string(), "cannot read: ", errno_text(errno));
    if (n == 0)
      return make_error(shown_.string(), "shrank while it was being read");
    done += static_cast<uint64_t>(n);
  }
  return out;
}

fs::path absolute_normal_path(const fs::path &p) {
  std::error_code ec;
  fs::path abs = fs::absolute(p, ec);
  if (ec)
    abs = p;
  abs = abs.lexically_normal();
  if (!abs.has_filename() && abs.has_parent_path() && abs != abs.root_path())
    abs = abs.parent_path();
  return abs;
}

void remove_stale_temporaries(const fs::path &final_path) {
  fs::path abs = absolute_normal_path(final_path);
  fs::path parent = abs.parent_path();
  const std::string temp = "." + abs.filename().string() + ".tmp-";
  const std::string old = "." + abs.filename().string() + ".old-";
  DIR *d = ::opendir(parent.c_str());
  if (!d)
    return;
  std::vector<fs::path> stale;
  while (dirent *e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (name.starts_with(temp)) {
      // A writer's directory until its process is gone; the lock covers a pid in another pid
      // namespace, and the pid covers the moment between mkdir and flock.
      char *end = nullptr;
      long pid = std::strtol(e->d_name + temp.size(), &end, 10);
      if (pid <= 0 || *end != '-' || process_alive(static_cast<pid_t>(pid)))
        continue;
    } else if (!name.starts_with(old)) {
      continue;
    }
    stale.push_back(parent / e->d_name);
  }
  ::closedir(d);
  for (const fs::path &p : stale)
    remove_if_unheld(p);
}

Expected<TempDir> TempDir::create_beside(const fs::path &final_path) {
  fs::path abs = absolute_normal_path(final_path);
  remove_stale_temporaries(abs);
  fs::path dir = abs.parent_path();
  fs::path tmp = dir / ("." + abs.filename().string() + unique_suffix());
  {
    std::lock_guard lock(registry_mutex());
    if (::mkdir(tmp.c_str(), 0755) != 0)
      return make_error(dir.string(), "cannot create a temporary directory: ", errno_text(errno));
    registry().push_back(tmp);
  }
  int fd = ::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::error_code ec;
    fs::remove_all(tmp, ec);
    forget(tmp);
    return make_error(tmp.string(), "cannot open a temporary directory: ", errno_text(err));
  }
  // Without flock on directories, the pid in the name alone tells a live writer's directory.
  while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  return TempDir(tmp, fd);
}

TempDir::TempDir(TempDir &&other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) {
  other.path_.clear();
  other.fd_ = -1;
}

TempDir::~TempDir() {
  if (!path_.empty()) {
    std::error_code ec;
    fs::remove_all(path_, ec);
    forget(path_);
  }
  if (fd_ >= 0)
    ::close(fd_);
}

Status TempDir::commit(const fs::path &final_path, bool replace) {
  fs::path abs = absolute_normal_path(final_path);
  fs::path parent = abs.parent_path();
  fs::path old = parent / ("." + abs.filename().string() + ".old-" + random_hex());
  std::error_code ec;
  bool exists = fs::exists(fs::symlink_status(abs, ec));
  // Once in place the directory is the package readers lock: this process must not hold it.
  auto unlock = [&] {
    ::close(fd_);
    fd_ = -1;
  };
  if (replace && exists) {
    std::unique_lock lock(registry_mutex());
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, abs.c_str(), RENAME_EXCHANGE) == 0) {
      // path_ now holds the old directory: no longer ours to remove on a signal. Killed before
      // it is renamed, it is left to the next writer (this pid will be gone then).
      forget_locked(path_);
      lock.unlock();
      unlock();
      if (::rename(path_.c_str(), old.c_str()) != 0)
        old = path_;
      path_.clear();
      remove_if_unheld(old);
      return fsync_path(parent);
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      return make_error(abs.string(), "cannot replace: ", errno_text(errno));
  }
  bool aside = replace && exists;
  if (aside && ::rename(abs.c_str(), old.c_str()) != 0)
    return make_error(abs.string(), "cannot move the existing one aside: ", errno_text(errno));
  // rename(2) onto an existing non-empty directory fails, so without `replace` an existing
  // package is never clobbered, even by a racing writer.
  std::unique_lock lock(registry_mutex());
  if (::rename(path_.c_str(), abs.c_str()) != 0) {
    int err = errno;
    lock.unlock();
    if (aside)
      ::rename(old.c_str(), abs.c_str());
    if (err == ENOTEMPTY || err == EEXIST)
      return make_error(abs.string(), "already exists (use --force to replace it)");
    return make_error(abs.string(), "cannot rename into place: ", errno_text(err));
  }
  forget_locked(path_);
  lock.unlock();
  path_.clear();
  unlock();
  if (aside)
    remove_if_unheld(old);
  return fsync_path(parent);
}

void remove_temporaries_on_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread([set] {
      int sig = 0;
      while (::sigwait(&set, &sig) != 0) {
      }
      // Held until the process ends, so that no commit moves a directory meanwhile.
      registry_mutex().lock();
      for (const fs::path &p : registry()) {
        // Another thread may still be adding files: a directory that was not empty yet when
        // remove_all came to it is tried again.
        std::error_code ec;
        for (int attempt = 0; attempt < 10 && (attempt == 0 || ec); ++attempt)
          fs::remove_all(p, ec);
      }
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::raise(sig);
    }).detach();
  });
}

Expected<MadeDirectories> MadeDirectories::make(const fs::path &dir) {
  MadeDirectories made;
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = absolute_normal_path(dir); !p.empty(); p = p.parent_path()) {
    if (fs::exists(fs::symlink_status(p, ec)))
      break;
    missing.push_back(p);
    if (p == p.root_path())
      break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const bool created = fs::create_directory(*it, ec);
    if (ec)
      return make_error(dir.string(), "cannot create the directory: ", ec.message());
    if (created) // not one another process made meanwhile: that one is not ours to take back
      made.made_.push_back(*it);
  }
  if (!fs::is_directory(dir, ec))
    return make_error(dir.string(), "is not a directory");
  return made;
}

MadeDirectories::~MadeDirectories() {
  std::error_code ec;
  for (auto it = made_.rbegin(); it != made_.rend(); ++it)
    if (fs::is_empty(*it, ec) && !ec)
      fs::remove(*it, ec);
}

} // namespace cudaq_rt
