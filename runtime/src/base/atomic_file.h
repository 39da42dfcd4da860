// base/: what every stage stands on and that knows nothing of CUDA: SHA-256 digests (digest.h),
// files that appear whole or not at all (this file) and the tools' output sink (tool_output.h).
//
// Files and directories that appear whole or not at all, and files read without trusting what is
// at a path.
//
// Writing: write to a temporary name in the same directory, fsync, rename over the final name,
// fsync the directory. Readers never see a half-written package or cache entry, and a failed run
// leaves nothing behind. A temporary directory is flock(2)ed exclusively by the process that
// builds it, so that another can tell a live writer's directory from one a killed writer left:
// stale ones are removed by the next writer of the same path (TempDir::create_beside), and the
// tools remove their own when SIGINT, SIGTERM or SIGHUP stops them
// (remove_temporaries_on_signals). A directory that a commit replaced is removed only when no
// reader holds a flock on it (Package holds a shared one while it reads), so that a reader never
// loses the files of the package it opened.
//
// Reading: RegularFile opens with O_NONBLOCK (a FIFO cannot block the open) and checks what it
// opened with fstat(2), after the open, so nothing can be swapped in between: a FIFO, a device
// or a directory is refused, a symbolic link is refused unless the caller follows them (nothing
// inside a package or a cache is followed), and the size is bounded by the file's own and by
// the caller's limit, so that no read grows without bound.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <sys/types.h>
#include <vector>

namespace cudaq_rt {

// An absolute, lexically normal path naming the thing itself: "pkg.cudaqpkg/" and
// "./pkg.cudaqpkg" both give "/cwd/pkg.cudaqpkg", so its parent is the directory it lives in.
std::filesystem::path absolute_normal_path(const std::filesystem::path &p);

// Writes `data` to `path` atomically (replacing any file there).
Status write_file_atomic(const std::filesystem::path &path, std::span<const uint8_t> data);

// How RegularFile::open treats what it finds.
struct OpenRules {
  bool follow_symlinks = false; // a symbolic link as the last component: followed, or refused
  uint64_t max_bytes = UINT64_MAX;
  bool write = false;     // open for reading and writing
  mode_t create_mode = 0; // nonzero: create a missing file with this mode (less the umask)
};

// A regular file, open, and closed on destruction.
class RegularFile {
public:
  // Nothing at the path (ENOENT) gives nullopt, so that a caller can tell a missing file from a
  // bad one. Any other failure is an Error naming the path: "is a FIFO or pipe, not a regular
  // file", "is a symbolic link, not a regular file", "is N bytes, more than the limit of M".
  static Expected<std::optional<RegularFile>> open(const std::filesystem::path &path,
                                                   const OpenRules &rules);
  // `name` in the directory open as `dirfd`; `shown` is the path messages give.
  static Expected<std::optional<RegularFile>> open_at(int dirfd, const std::string &name,
                                                      const std::filesystem::path &shown,
                                                      const OpenRules &rules);
  RegularFile(RegularFile &&o) noexcept;
  RegularFile &operator=(RegularFile &&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // The whole file as it was when opened: size() bytes (a file that shrank since is an error).
  Expected<std::string> read() const;

private:
  RegularFile(int fd, uint64_t size, std::filesystem::path shown)
      : fd_(fd), size_(size), shown_(std::move(shown)) {}
  int fd_;
  uint64_t size_;
  std::filesystem::path shown_;
};

// A fresh directory `.<name>.tmp-<pid>-<random>` beside `final_path`, locked by this process and
// removed with its contents on destruction unless commit() moved it into place.
class TempDir {
public:
  // First removes what killed writers left beside `final_path`: temporary directories whose
  // process is gone and that nobody locks, and replaced ones that no reader holds any more.
  static Expected<TempDir> create_beside(const std::filesystem::path &final_path);
  TempDir(TempDir &&other) noexcept;
  TempDir &operator=(TempDir &&) = delete;
  ~TempDir();

  const std::filesystem::path &path() const { return path_; }
  // Renames the directory to final_path. With `replace`, an existing final_path is exchanged with
  // the new one in one renameat2(RENAME_EXCHANGE), so the path always names a whole directory;
  // the old one is renamed to `.<name>.old-<random>` and removed unless a reader holds it (the
  // reader, or the next writer, removes it later). Where the filesystem cannot exchange, the old
  // one is renamed aside first (the path is missing for that moment).
  Status commit(const std::filesystem::path &final_path, bool replace);

private:
  TempDir(std::filesystem::path p, int fd) : path_(std::move(p)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_; // the directory, flocked exclusively while it is being built
};

// Removes the directories beside `final_path` that TempDir left and nobody uses: a writer's that
// was killed (its pid is gone and nobody locks it), and replaced ones no reader holds.
void remove_stale_temporaries(const std::filesystem::path &final_path);

// For the tools: from now on, SIGINT, SIGTERM and SIGHUP remove this process's temporary files and
// directories, then stop the process with the same signal. The signals are blocked in every
// thread and taken by a thread of their own (so the removal needs no async-signal-safe code):
// call it before any other thread starts, so that they all inherit the mask.
void remove_temporaries_on_signals();

// A directory made with its missing parents (as `mkdir -p`, or `nvcc -o`, does), taken back again,
// deepest first and only while still empty, unless the command that made it succeeded and kept
// it: a command that fails leaves no directory of its own behind.
class MadeDirectories {
public:
  static Expected<MadeDirectories> make(const std::filesystem::path &dir);
  MadeDirectories(MadeDirectories &&other) noexcept : made_(std::move(other.made_)) {
    other.made_.clear();
  }
  MadeDirectories &operator=(MadeDirectories &&) = delete;
  ~MadeDirectories();
  void keep() { made_.clear(); }

private:
  MadeDirectories() = default;
  std::vector<std::filesystem::path> made_; // outermost first
};

// Makes `data` durable in a file descriptor-free way: fsyncs the file or directory at `path`.
Status fsync_path(const std::filesystem::path &path);

} // namespace cudaq_rt
