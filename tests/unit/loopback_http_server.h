// An HTTP/1.1 server in the test's own process, on a loopback port: one thread, one request per
// connection (each closed after its answer). A test answers each request with a handler that
// writes whatever bytes it likes, so that it can be a server that lies about a length, sends
// without end, or says nothing at all.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct SeenRequest {
  std::string method;
  std::string target;                         // as the request line has it: /path?query
  std::map<std::string, std::string> headers; // names in lowercase
  std::string body;

  std::string header(const std::string &name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// One accepted connection, as a handler sees it.
class HttpConnection {
public:
  explicit HttpConnection(int fd, const std::atomic<bool> &stopping)
      : fd_(fd), stopping_(stopping) {}
  // Writes all of `bytes`; false once the client has gone.
  bool write(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0)
        return false;
      written_ += static_cast<uint64_t>(n);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Says nothing until the client closes the connection, the server stops, or `limit` passes.
  void hold(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    char buf[256];
    while (!stopping_ && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0 && ::recv(fd_, buf, sizeof buf, 0) <= 0)
        return;
    }
  }
  uint64_t written() const { return written_; }

private:
  int fd_;
  const std::atomic<bool> &stopping_;
  uint64_t written_ = 0;
};

// A whole answer with a body and its Content-Length.
inline std::string http_answer(int status, std::string_view body,
                               const std::vector<std::string> &headers = {}) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " X\r\n";
  for (const std::string &h : headers)
    out += h + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  out += body;
  return out;
}

class LoopbackHttpServer {
public:
  using Handler = std::function<void(const SeenRequest &, HttpConnection &)>;

  explicit LoopbackHttpServer(Handler handler) : handler_(std::move(handler)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on a loopback port");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~LoopbackHttpServer() {
    stopping_ = true;
    thread_.join();
    ::close(fd_);
  }
  LoopbackHttpServer(const LoopbackHttpServer &) = delete;
  LoopbackHttpServer &operator=(const LoopbackHttpServer &) = delete;

  int port() const { return port_; }
  std::string url(const std::string &path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<SeenRequest> requests() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  // The bytes the handlers wrote, over all connections.
  uint64_t written() const { return written_; }

private:
  void serve() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0)
        continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0)
        continue;
      SeenRequest req;
      if (read_request(c, req)) {
        {
          std::lock_guard lock(mutex_);
          seen_.push_back(req);
        }
        HttpConnection conn(c, stopping_);
        handler_(req, conn);
        written_ += conn.written();
      }
      ::close(c);
    }
  }

  // The request line, the headers and a body of its Content-Length.
  bool read_request(int c, SeenRequest &req) {
    std::string data;
    size_t end = std::string::npos;
    char buf[4096];
    auto more = [&] {
      for (int waited = 0; waited < 5000 && !stopping_; waited += 20) {
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 20) > 0) {
          ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0)
            return false;
          data.append(buf, static_cast<size_t>(n));
          return true;
        }
      }
      return false;
    };
    while ((end = data.find("\r\n\r\n")) == std::string::npos)
      if (!more())
        return false;
    std::string head = data.substr(0, end);
    size_t line_end = head.find("\r\n");
    std::string line = head.substr(0, line_end);
    size_t sp1 = line.find(' ');
    size_t sp2 = line.find(' ', sp1 + 1);
    req.method = line.substr(0, sp1);
    req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    for (size_t pos = line_end; pos != std::string::npos && pos < head.size();) {
      size_t next = head.find("\r\n", pos + 2);
      std::string h =
          head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      size_t colon = h.find(':');
      if (colon != std::string::npos) {
        std::string name = h.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
        size_t v = h.find_first_not_of(' ', colon + 1);
        req.headers[name] = v == std::string::npos ? "" : h.substr(v);
      }
      pos = next;
    }
    size_t length =
        req.headers.count("content-length") ? std::stoul(req.headers["content-length"]) : 0;
    req.body = data.substr(end + 4);
    while (req.body.size() < length) {
      data.clear();
      if (!more())
        return false;
      req.body += data;
    }
    return true;
  }

  Handler handler_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> written_{0};
  mutable std::mutex mutex_;
  std::vector<SeenRequest> seen_;
};
