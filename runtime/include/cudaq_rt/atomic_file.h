// Files and directories that appear whole or not at all: write to a temporary name in the same
// directory, fsync, rename over the final name, fsync the directory. Readers never see a
// half-written package or cache entry, and a failed run leaves nothing behind.
#pragma once

#include "cudaq_rt/error.h"

#include <filesystem>
#include <span>
#include <string>

namespace cudaq_rt {

// An absolute, lexically normal path naming the thing itself: "pkg.cudaqpkg/" and
// "./pkg.cudaqpkg" both give "/cwd/pkg.cudaqpkg", so its parent is the directory it lives in.
std::filesystem::path entry_path(const std::filesystem::path &p);

// Writes `data` to `path` atomically (replacing any file there).
Status write_file_atomic(const std::filesystem::path &path, std::span<const uint8_t> data);

// Reads a whole file.
Expected<std::string> read_file(const std::filesystem::path &path);

// A fresh directory `.<name>.tmp-<pid>-<random>` beside `final_path`, removed with its contents on
// destruction unless commit() moved it into place.
class TempDir {
public:
  static Expected<TempDir> create_beside(const std::filesystem::path &final_path);
  TempDir(TempDir &&other) noexcept;
  TempDir &operator=(TempDir &&) = delete;
  ~TempDir();

  const std::filesystem::path &path() const { return path_; }
  // Renames the directory to final_path. With `replace`, an existing final_path is exchanged with
  // the new one in one renameat2(RENAME_EXCHANGE), so the path always names a whole directory,
  // then the old one is removed. Where the filesystem cannot exchange, the old one is renamed
  // aside first (the path is missing for that moment).
  Status commit(const std::filesystem::path &final_path, bool replace);

private:
  explicit TempDir(std::filesystem::path p) : path_(std::move(p)) {}
  std::filesystem::path path_;
};

// Makes `data` durable in a file descriptor-free way: fsyncs the file or directory at `path`.
Status fsync_path(const std::filesystem::path &path);

} // namespace cudaq_rt
