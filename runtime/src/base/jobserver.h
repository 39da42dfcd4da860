// The make jobserver, as a client: when cudaq-rt-link runs under `make -jN` (a recipe make
// treats as recursive, marked '+', or any recipe with make 4.4's fifo jobserver), it takes its
// share of make's N job slots instead of a thread per core on top of them.
//
// GNU make's protocol: MAKEFLAGS holds --jobserver-auth=R,W (a pipe's two descriptors, inherited)
// or --jobserver-auth=fifo:PATH (make 4.4); older makes say --jobserver-fds=R,W. The pipe holds
// one byte per free slot beyond the one every job has. A client running more than one thing at
// once reads a byte before each extra one and writes the same byte back when it ends, whatever
// happens: a token lost is a slot the whole build loses.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

class Jobserver {
public:
  // The jobserver MAKEFLAGS names, or nullopt: none named, or one that cannot be used (its
  // descriptors closed, because make did not pass them to this recipe); `why` then says which,
  // empty when none was named.
  static std::optional<Jobserver> from_makeflags(std::string_view makeflags, std::string *why);
  Jobserver(Jobserver &&other) noexcept;
  Jobserver &operator=(Jobserver &&) = delete;
  ~Jobserver(); // gives back any token still held, closes what it opened

  // Takes a token: true once one is held, false when `wanted` turns false first (polled every
  // few milliseconds), so that a thread with nothing left to do does not wait for one.
  bool acquire(const std::function<bool()> &wanted);
  void release();
  // The most jobs this process ran at once: the implicit slot and the tokens held together.
  size_t peak() const { return peak_ + 1; }

private:
  Jobserver(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  int read_fd_ = -1, write_fd_ = -1; // this process's own open files (non-blocking reads)
  std::mutex mutex_;
  std::vector<char> held_;
  size_t peak_ = 0;
};

// Takes the process's jobserver from $MAKEFLAGS: a tool's main() calls it first thing, before it
// opens a file or a pipe of its own. Only then can descriptors MAKEFLAGS names be make's: a
// process that did not inherit them (a recipe make does not pass them to) may have opened other
// files under the same numbers since. A program that only uses the library (the C API, a link
// at load) never calls it, and so never takes make's tokens or reads a pipe of its own.
void take_jobserver_from_environment();
// The jobserver take_jobserver_from_environment() found; nullptr without one, or when it was not
// called. `why` says why one MAKEFLAGS named could not be used.
Jobserver *process_jobserver(std::string *why = nullptr);

} // namespace cudaq_rt
