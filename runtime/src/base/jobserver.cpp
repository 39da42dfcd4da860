#include "base/jobserver.h"

#include "cudaq_rt/error.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace cudaq_rt {
namespace {

std::optional<int> parse_fd(std::string_view s) {
  int v = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0)
    return std::nullopt;
  return v;
}

// A file of our own for an inherited pipe descriptor: opening /proc/self/fd/N gives a new open
// file description, which can be made non-blocking without changing make's.
int reopen(int fd, int flags) {
  struct stat st;
  if (::fcntl(fd, F_GETFD) < 0 || ::fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
    return -1;
  return ::open(cat("/proc/self/fd/", fd).c_str(), flags | O_CLOEXEC);
}

} // namespace

std::optional<Jobserver> Jobserver::from_makeflags(std::string_view flags, std::string *why) {
  // The last --jobserver-auth= (or the older --jobserver-fds=) word is the one in force.
  std::string_view auth;
  for (size_t at = 0; at < flags.size();) {
    size_t end = flags.find(' ', at);
    std::string_view word = flags.substr(at, end == flags.npos ? flags.npos : end - at);
    for (std::string_view key : {"--jobserver-auth=", "--jobserver-fds="})
      if (word.starts_with(key))
        auth = word.substr(key.size());
    at = end == flags.npos ? flags.size() : end + 1;
  }
  if (auth.empty())
    return std::nullopt;
  auto refuse = [&](std::string reason) -> std::optional<Jobserver> {
    if (why)
      *why = cat("MAKEFLAGS names a jobserver (", auth, ") that ", reason,
                 ": running as if there were none");
    return std::nullopt;
  };
  int r = -1, w = -1;
  if (auth.starts_with("fifo:")) {
    const std::string path(auth.substr(5));
    r = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    w = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (r < 0 || w < 0) {
      const int err = errno;
      if (r >= 0)
        ::close(r);
      return refuse(cat("cannot be opened: ", std::strerror(err)));
    }
  } else {
    const size_t comma = auth.find(',');
    auto rf = parse_fd(auth.substr(0, comma));
    auto wf = comma == auth.npos ? std::nullopt : parse_fd(auth.substr(comma + 1));
    if (!rf || !wf)
      return refuse("is not R,W or fifo:PATH");
    r = reopen(*rf, O_RDONLY | O_NONBLOCK);
    w = reopen(*wf, O_WRONLY);
    if (r < 0 || w < 0) {
      if (r >= 0)
        ::close(r);
      if (w >= 0)
        ::close(w);
      return refuse("this process did not inherit (a recipe make does not take for a "
                    "recursive one: mark it with '+')");
    }
  }
  return Jobserver(r, w);
}

Jobserver::Jobserver(Jobserver &&o) noexcept
    : read_fd_(o.read_fd_), write_fd_(o.write_fd_), held_(std::move(o.held_)), peak_(o.peak_) {
  o.read_fd_ = o.write_fd_ = -1;
  o.held_.clear();
}

Jobserver::~Jobserver() {
  while (!held_.empty())
    release();
  if (read_fd_ >= 0)
    ::close(read_fd_);
  if (write_fd_ >= 0)
    ::close(write_fd_);
}

bool Jobserver::acquire(const std::function<bool()> &wanted) {
  while (wanted()) {
    pollfd p{read_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) {
      char token;
      // Another client may have taken the byte poll saw: the read is non-blocking.
      if (::read(read_fd_, &token, 1) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);
        held_.push_back(token);
        peak_ = std::max(peak_, held_.size());
        return true;
      }
    }
  }
  return false;
}

void Jobserver::release() {
  char token;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (held_.empty())
      return;
    token = held_.back();
    held_.pop_back();
  }
  while (::write(write_fd_, &token, 1) < 0 && errno == EINTR) {
  }
}

namespace {

struct ProcessJobserver {
  std::once_flag taken;
  std::optional<Jobserver> js;
  std::string why;
};

ProcessJobserver &process_state() {
  static ProcessJobserver state;
  return state;
}

} // namespace

void take_jobserver_from_environment() {
  ProcessJobserver &p = process_state();
  std::call_once(p.taken, [&p] {
    if (const char *flags = std::getenv("MAKEFLAGS"))
      if (auto js = Jobserver::from_makeflags(flags, &p.why))
        p.js.emplace(std::move(*js));
  });
}

Jobserver *process_jobserver(std::string *why) {
  ProcessJobserver &p = process_state();
  if (why)
    *why = p.why;
  return p.js ? &*p.js : nullptr;
}

} // namespace cudaq_rt
