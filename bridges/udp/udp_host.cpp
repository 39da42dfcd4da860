// The UDP bridge's socket and threads (udp_host.h explains the design).
#include "udp_host.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cudaq_rt::udp {
namespace {

constexpr unsigned kBatch = 64;       // datagrams per recvmmsg / sendmmsg
constexpr size_t kMinAnswerable = 16; // magic, function_id, arg_len, request_id
constexpr int kSocketBuffer = 4 << 20;
constexpr int kBlockTimeoutUs = 20000; // how often a sleeping RX thread looks at its flags

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

uint32_t read_u32(const uint8_t *data, size_t size, size_t offset) {
  uint32_t v = 0;
  if (offset < size)
    std::memcpy(&v, data + offset, std::min<size_t>(4, size - offset));
  return v;
}

// Sends `n` prepared messages; a message the kernel refuses is counted and skipped.
uint64_t send_all(int fd, mmsghdr *msgs, unsigned n) {
  uint64_t failed = 0;
  unsigned done = 0;
  while (done < n) {
    int rc = ::sendmmsg(fd, msgs + done, n - done, 0);
    if (rc > 0) {
      done += unsigned(rc);
    } else if (rc < 0 && errno == EINTR) {
      continue;
    } else {
      ++failed; // the first of the rest could not go: skip it
      ++done;
    }
  }
  return failed;
}

// The CPUs of `set` as a list of ranges: "0-15", "0,2-3".
std::string cpu_list(const cpu_set_t &set) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set))
      continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set))
      ++last;
    out +=
        (out.empty() ? "" : ",") + std::to_string(c) + (last > c ? "-" + std::to_string(last) : "");
    c = last;
  }
  return out;
}

// Why the bridge's threads cannot run on CPUs first .. first + threads - 1, or empty.
std::string check_cpus(uint32_t first, uint32_t threads) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
    return "cpu=" + std::to_string(first) +
           ": cannot read the CPUs this process may run on: " + std::strerror(errno);
  for (uint64_t c = first; c < uint64_t(first) + threads; ++c)
    if (c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed))
      return "cpu=" + std::to_string(first) + ": this process may not run on CPU " +
             std::to_string(c) + (threads > 1 ? " (threads=2 takes CPUs N and N+1)" : "") +
             "; it may on " + cpu_list(allowed);
  return {};
}

} // namespace

std::string parse_config(std::string_view text, Config &out) {
  BridgeOptions options;
  if (std::string why = options.parse(text); !why.empty())
    return why;
  for (const auto &[key, value] : options.items()) {
    if (key == "bind") {
      if (value.empty())
        return "option 'bind' needs an address";
      out.bind = value;
    } else if (key == "wait") {
      if (value != "spin" && value != "block")
        return "option 'wait' is 'spin' or 'block', got '" + value + "'";
      out.spin = value == "spin";
    } else if (key == "threads") {
      if (value != "1" && value != "2")
        return "option 'threads' is 1 or 2, got '" + value + "'";
      out.threads = value == "1" ? 1 : 2;
    } else if (key == "cpu") {
      uint32_t cpu = 0;
      if (!loopback::parse_u32(value, cpu))
        return "option 'cpu' needs a CPU number, got '" + value + "'";
      if (cpu >= CPU_SETSIZE)
        return check_cpus(cpu, 1); // no CPU of this process: says which ones are
      out.cpu = int(cpu);
    } else if (key == "spare_frame") {
      if (!loopback::parse_flag(value, out.spare_frame))
        return "option 'spare_frame' is 0 or 1, got '" + value + "'";
    } else if (key == "layout") {
      if (!loopback::parse_layout(value, out.layout))
        return "option 'layout' is slots or lanes, got '" + value + "'";
    } else if (key == "port" || key == "slots" || key == "slot_size" || key == "bulk" ||
               key == "response_bulk" || key == "warps") {
      uint32_t *target = key == "port"        ? &out.port
                         : key == "slots"     ? &out.slots
                         : key == "slot_size" ? &out.slot_size
                         : key == "bulk"      ? &out.bulk_min
                         : key == "warps"     ? &out.warps
                                              : &out.response_bulk_min;
      if (!loopback::parse_u32(value, *target))
        return "option '" + key + "' needs a number, got '" + value + "'";
      if (key == "port" && out.port > 65535)
        return "port=" + std::to_string(out.port) + " is out of range 0..65535";
    } else {
      return "unknown option '" + key +
             "' (known: bind=ADDR, port=N, slots=N, slot_size=BYTES, wait=spin|block, threads=1|2, "
             "cpu=N, layout=slots|lanes, bulk=BYTES, response_bulk=BYTES, spare_frame=0|1, "
             "warps=N)";
    }
  }
  return out.cpu >= 0 ? check_cpus(uint32_t(out.cpu), out.threads) : std::string();
}

std::string instance_config(const cudaq_rt_bridge_launch &launch, std::string_view config,
                            bool engine, std::string &out) {
  BridgeOptions options;
  if (std::string why = options.parse(config); !why.empty())
    return why;
  if (std::string why = loopback::check_warps_for(launch, options); !why.empty())
    return why;
  loopback::lay_out_for(launch, options, engine);
  const std::string *port = options.find("port");
  uint32_t first = 0;
  // A port that is no number is left for create to refuse; port=0 gives each a free port.
  if (launch.instance > 0 && port && loopback::parse_u32(*port, first) && first > 0) {
    const uint64_t mine = uint64_t(first) + launch.instance;
    if (mine > 65535)
      return "--bridge-arg port=" + std::to_string(first) + ": GPU number " +
             std::to_string(uint64_t(launch.instance) + 1) + " would need port " +
             std::to_string(mine) + ", beyond 65535";
    options.set("port", std::to_string(mine));
  }
  // A CPU for each thread of each GPU's bridge: GPU i's from N + i * threads.
  const std::string *cpu = options.find("cpu");
  const std::string *threads = options.find("threads");
  uint32_t first_cpu = 0;
  if (launch.instance > 0 && cpu && loopback::parse_u32(*cpu, first_cpu))
    options.set("cpu",
                std::to_string(uint64_t(first_cpu) +
                               uint64_t(launch.instance) * (threads && *threads == "2" ? 2 : 1)));
  out = options.text();
  return {};
}

Kind classify(const uint8_t *data, size_t size, uint32_t slot_size) {
  if (size < kMinAnswerable)
    return Kind::runt;
  const uint32_t magic = read_u32(data, size, 0);
  if (magic == CUDAQ_RT_TRUNCATED_MAGIC)
    return Kind::truncated; // wire.h: a client that sends the marker is answered as truncated
  if (magic != CUDAQ_RT_REQUEST_MAGIC)
    return Kind::bad_magic;
  if (size < CUDAQ_RT_HEADER_SIZE)
    return Kind::truncated;
  if (size > slot_size)
    return Kind::oversize;
  const uint64_t arg_len = read_u32(data, size, 8);
  if (arg_len > size - CUDAQ_RT_HEADER_SIZE)
    return Kind::truncated;
  if (arg_len < size - CUDAQ_RT_HEADER_SIZE)
    return Kind::bad_length;
  return Kind::request;
}

int32_t answer_status(Kind kind) {
  switch (kind) {
  case Kind::bad_magic:
    return CUDAQ_RT_STATUS_BAD_MAGIC;
  case Kind::truncated:
    return CUDAQ_RT_STATUS_TRUNCATED;
  case Kind::oversize:
    return CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE;
  case Kind::bad_length:
    return CUDAQ_RT_STATUS_BAD_LENGTH;
  default:
    return CUDAQ_RT_STATUS_OK;
  }
}

std::array<uint8_t, CUDAQ_RT_HEADER_SIZE> error_response(const uint8_t *data, size_t size,
                                                         int32_t status) {
  cudaq_rt_request_header in{};
  std::memcpy(&in, data, std::min<size_t>(size, sizeof in));
  cudaq_rt_response_header out{CUDAQ_RT_RESPONSE_MAGIC, status, 0, in.request_id, in.ptp_timestamp};
  std::array<uint8_t, CUDAQ_RT_HEADER_SIZE> bytes;
  std::memcpy(bytes.data(), &out, sizeof out);
  return bytes;
}

bool open_socket(const Config &config, Socket &out, std::string &error) {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  auto *v4 = reinterpret_cast<sockaddr_in *>(&addr);
  auto *v6 = reinterpret_cast<sockaddr_in6 *>(&addr);
  if (::inet_pton(AF_INET, config.bind.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(uint16_t(config.port));
    addr_len = sizeof *v4;
  } else if (::inet_pton(AF_INET6, config.bind.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(uint16_t(config.port));
    addr_len = sizeof *v6;
  } else {
    error = "bind=" + config.bind + ": not a numeric IPv4 or IPv6 address";
    return false;
  }
  const bool is_v6 = addr.ss_family == AF_INET6;
  auto where = [&](uint32_t port) {
    return (is_v6 ? "[" + config.bind + "]" : config.bind) + ":" + std::to_string(port);
  };
  int fd = ::socket(addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  // Best effort: the kernel caps the buffers at net.core.[rw]mem_max.
  const int buffer = kSocketBuffer, on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof buffer);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  ::setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on);
  const timeval timeout{0, kBlockTimeoutUs};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), addr_len) != 0) {
    error = "cannot bind " + where(config.port) + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&bound), &bound_len) != 0) {
    error = std::string("getsockname: ") + std::strerror(errno);
    ::close(fd);
    return false;
  }
  const uint16_t port = is_v6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
                              : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  out.fd = fd;
  out.address = where(port);
  return true;
}

const char *counter_name(uint32_t counter) {
  static const char *const names[counter_count] = {
      "datagrams_received",   "requests_forwarded", "responses_sent",   "answered_ok",
      "handler_errors",       "unknown_function",   "result_too_large", "handler_fault",
      "other_protocol_error", "bad_magic",          "truncated",        "oversize",
      "bad_length",           "dropped_runt",       "dropped_socket",   "send_errors",
      "ring_errors",          "intake_ns",          "to_answer_ns",     "send_ns"};
  return counter < counter_count ? names[counter] : "";
}

Pump::Pump(const cudaq_rt_bridge &ring, int fd, bool spin, uint32_t threads, int cpu)
    : fd_(fd), spin_(spin), one_thread_(threads == 1), cpu_(cpu), slots_(ring.num_slots),
      slot_size_(ring.slot_size), rx_ring_(ring), tx_ring_(ring), senders_(ring.num_slots),
      sender_lengths_(ring.num_slots), arrivals_ns_(ring.num_slots),
      latency_(CUDAQ_RT_LATENCY_BUCKETS) {
  sent_ = ring.sent;
  received_ = ring.received;
  answered_ = ring.received;
}

Pump::~Pump() {
  stop();
}

bool Pump::start(std::string &error) {
  if (rx_.joinable() || tx_.joinable()) {
    error = "start: the bridge is already serving";
    return false;
  }
  stopping_ = false;
  holding_ = false;
  intake_open_ = true;
  rx_done_ = false;
  try {
    if (one_thread_) {
      rx_ = std::thread([this] { serve_loop(); });
    } else {
      tx_ = std::thread([this] { tx_loop(); });
      rx_ = std::thread([this] { rx_loop(); });
    }
  } catch (const std::system_error &e) {
    error = std::string("start: cannot start a thread: ") + e.what();
    stop();
    return false;
  }
  // Named for top -H and the like, and pinned where cpu= says (once running: where their first
  // loops ran does not matter).
  std::thread *const threads[2] = {&rx_, &tx_};
  for (int i = 0; i < 2; ++i) {
    if (!threads[i]->joinable())
      continue;
    pthread_setname_np(threads[i]->native_handle(), one_thread_ ? "cudaq-rt-udp"
                                                    : i == 0    ? "cudaq-rt-udp-rx"
                                                                : "cudaq-rt-udp-tx");
    if (cpu_ < 0)
      continue;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_ + i, &set);
    if (int rc = pthread_setaffinity_np(threads[i]->native_handle(), sizeof set, &set); rc != 0) {
      error = "start: cannot run the " +
              std::string(one_thread_ ? "bridge's"
                          : i == 0    ? "receiving"
                                      : "sending") +
              " thread on CPU " + std::to_string(cpu_ + i) + ": " + std::strerror(rc);
      stop();
      return false;
    }
  }
  return true;
}

bool Pump::hold(double timeout_s) {
  holding_.store(true, std::memory_order_release);
  return drain(timeout_s);
}

bool Pump::drain(double timeout_s) {
  intake_open_.store(false, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s > 0 ? timeout_s : 0));
  for (;;) {
    if ((rx_done_.load(std::memory_order_acquire) || !rx_.joinable()) &&
        answered_.load(std::memory_order_acquire) == sent_.load(std::memory_order_acquire))
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Pump::stop() {
  intake_open_.store(false, std::memory_order_release);
  stopping_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  if (rx_.joinable())
    rx_.join();
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  if (tx_.joinable())
    tx_.join();
}

uint32_t Pump::counters(cudaq_rt_bridge_counter *out, uint32_t capacity) const {
  for (uint32_t i = 0; i < counter_count && i < capacity && out; ++i)
    out[i] = {counter_name(i), counters_[i].load(std::memory_order_relaxed)};
  return counter_count;
}

void Pump::add_latency(uint64_t *buckets) const {
  for (uint32_t i = 0; i < CUDAQ_RT_LATENCY_BUCKETS; ++i)
    buckets[i] += latency_[i].load(std::memory_order_relaxed);
}

// What one receive needs between calls: the batch's messages, addresses and control data, and
// the answers the bridge gives itself.
struct Pump::Intake {
  std::array<mmsghdr, kBatch> msgs{};
  std::array<iovec, kBatch> iov{};
  std::array<sockaddr_storage, kBatch> from{};
  alignas(cmsghdr) std::array<std::array<char, CMSG_SPACE(sizeof(uint32_t))>, kBatch> control{};
  std::array<std::array<uint8_t, CUDAQ_RT_HEADER_SIZE>, kBatch> answers{};
  std::array<mmsghdr, kBatch> answer_msgs{};
  std::array<iovec, kBatch> answer_iov{};
  bool woken = false; // a sleeping TX thread was woken while every slot was in flight
  // The messages are set up for `prepared` free slots from request `prepared_at` on. recvmmsg
  // changes them only when it takes a datagram, so a receive that finds none leaves them ready
  // for the next: a spinning loop does not write 64 headers before every empty recvmmsg.
  uint64_t prepared_at = 0;
  unsigned prepared = 0;
};

// What one send needs between calls: a buffer per message for answers of cells, and the batch.
struct Pump::Outlet {
  explicit Outlet(uint32_t slot_size) : buffers(size_t(kBatch) * slot_size) {}
  std::vector<uint8_t> buffers;
  std::array<mmsghdr, kBatch> msgs{};
  std::array<iovec, kBatch> iov{};
  std::array<sockaddr_storage, kBatch> to{};
  std::array<uint64_t, kBatch> arrivals{};
};

int Pump::receive(Intake &in, bool wait) {
  if (holding_.load(std::memory_order_acquire))
    return -1; // held: what arrives waits in the socket for the next start
  const bool open = intake_open_.load(std::memory_order_acquire);
  // Datagrams are received straight into the bulk areas of the free slots, in ring order
  // (loopback::request_area), so that a request in bulk is not copied again on its way to the
  // GPU. With every slot in flight, further datagrams wait in the socket's receive buffer until
  // the GPU frees one (within microseconds); a sleeping TX thread is woken first: it frees them.
  rx_ring_.received = received_.load(std::memory_order_acquire);
  const uint32_t free = slots_ - uint32_t(rx_ring_.sent - rx_ring_.received);
  if (free == 0) {
    if (!in.woken && !spin_ && !one_thread_)
      wake_tx();
    in.woken = true;
    if (!one_thread_)
      relax();
    return 0;
  }
  in.woken = false;
  const unsigned want = std::min<unsigned>(kBatch, free);
  const auto after = [this](uint32_t slot) { return slot + 1 == slots_ ? 0u : slot + 1; };
  if (in.prepared_at != rx_ring_.sent || in.prepared < want) {
    // The slot of request sent: one division a batch, the others advanced from it.
    for (unsigned i = 0, slot = uint32_t(rx_ring_.sent % slots_); i < want;
         ++i, slot = after(slot)) {
      in.iov[i] = {loopback::request_area(&rx_ring_, slot), slot_size_};
      mmsghdr &m = in.msgs[i];
      m.msg_hdr = {};
      m.msg_hdr.msg_name = &in.from[i];
      m.msg_hdr.msg_namelen = sizeof in.from[i];
      m.msg_hdr.msg_iov = &in.iov[i];
      m.msg_hdr.msg_iovlen = 1;
      m.msg_hdr.msg_control = in.control[i].data();
      m.msg_hdr.msg_controllen = in.control[i].size();
      m.msg_len = 0;
    }
    in.prepared_at = rx_ring_.sent;
    in.prepared = want;
  }
  // MSG_TRUNC: msg_len is a datagram's real length even when it did not fit the slot.
  const int flags = MSG_TRUNC | ((wait && open) ? MSG_WAITFORONE : MSG_DONTWAIT);
  const int n = ::recvmmsg(fd_, in.msgs.data(), want, flags, nullptr);
  if (n <= 0) {
    if (!open && (n == 0 || errno == EAGAIN || errno == EWOULDBLOCK))
      return -1; // drained: everything that arrived before the drain was taken
    if (spin_ && !one_thread_)
      relax();
    return 0;
  }
  in.prepared = 0; // the taken messages' lengths changed: set up again next time
  // The slot of the first datagram's area; the batch's next request goes there (write_request
  // moves it down where one before it was answered or dropped).
  uint32_t next = uint32_t(rx_ring_.sent % slots_);
  const uint64_t arrival = now_ns();
  count(datagrams_received, uint64_t(n));
  unsigned answers_n = 0, forwarded = 0;
  for (int i = 0; i < n; ++i) {
    const msghdr &h = in.msgs[i].msg_hdr;
    for (cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(const_cast<msghdr *>(&h), c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        uint32_t dropped = 0;
        std::memcpy(&dropped, CMSG_DATA(c), sizeof dropped);
        counters_[dropped_socket].store(dropped, std::memory_order_relaxed);
      }
    const uint8_t *data = static_cast<const uint8_t *>(in.iov[i].iov_base);
    const size_t size = in.msgs[i].msg_len;
    const Kind kind = classify(data, size, slot_size_);
    if (kind == Kind::runt) {
      count(dropped_runt);
      continue;
    }
    if (kind != Kind::request) {
      count(kind == Kind::bad_magic   ? bad_magic
            : kind == Kind::truncated ? truncated
            : kind == Kind::oversize  ? oversize
                                      : bad_length);
      in.answers[answers_n] =
          error_response(data, std::min<size_t>(size, slot_size_), answer_status(kind));
      in.answer_iov[answers_n] = {in.answers[answers_n].data(), CUDAQ_RT_HEADER_SIZE};
      mmsghdr &m = in.answer_msgs[answers_n];
      m.msg_hdr = {};
      m.msg_hdr.msg_name = &in.from[i];
      m.msg_hdr.msg_namelen = h.msg_namelen;
      m.msg_hdr.msg_iov = &in.answer_iov[answers_n];
      m.msg_hdr.msg_iovlen = 1;
      ++answers_n;
      continue;
    }
    // A whole request, received into the area of slot sent + i; it goes to slot sent (the next
    // free one), and where a datagram before it in this batch was answered or dropped,
    // write_request copies it down there (the areas between are of datagrams already taken).
    const uint32_t slot = next;
    next = after(next);
    std::memcpy(&senders_[slot], &in.from[i], h.msg_namelen);
    sender_lengths_[slot] = h.msg_namelen;
    arrivals_ns_[slot] = arrival;
    loopback::write_request(&rx_ring_, data, size);
    sent_.store(rx_ring_.sent, std::memory_order_release);
    ++forwarded;
  }
  if (forwarded) {
    count(requests_forwarded, forwarded);
    count(intake_ns, (now_ns() - arrival) * forwarded);
  }
  if (!spin_ && !one_thread_)
    wake_tx();
  if (answers_n)
    count(send_errors, send_all(fd_, in.answer_msgs.data(), answers_n));
  return n;
}

int Pump::send(Outlet &out) {
  tx_ring_.sent = sent_.load(std::memory_order_acquire);
  unsigned k = 0;
  bool in_place = false; // a response of the batch is sent from the ring's bulk area
  uint64_t seen = 0;     // when the batch's first answer was taken
  while (k < kBatch) {
    size_t len = 0;
    uint8_t *buffer = out.buffers.data() + size_t(k) * slot_size_;
    const void *bytes = nullptr;
    const cudaq_rt_bridge_result rc =
        loopback::receive_response_in_place(&tx_ring_, buffer, slot_size_, &bytes, &len);
    if (rc == CUDAQ_RT_BRIDGE_AGAIN)
      break;
    if (rc != CUDAQ_RT_BRIDGE_OK) {
      count(ring_errors);
      return -1;
    }
    if (k == 0)
      seen = now_ns();
    in_place |= bytes != buffer;
    const uint32_t slot = tx_ring_.receive_at.slot; // the answer's (the ring kept it: no division)
    std::memcpy(&out.to[k], &senders_[slot], sender_lengths_[slot]);
    out.arrivals[k] = arrivals_ns_[slot];
    out.iov[k] = {const_cast<void *>(bytes), len};
    mmsghdr &m = out.msgs[k];
    m.msg_hdr = {};
    m.msg_hdr.msg_name = &out.to[k];
    m.msg_hdr.msg_namelen = sender_lengths_[slot];
    m.msg_hdr.msg_iov = &out.iov[k];
    m.msg_hdr.msg_iovlen = 1;
    int32_t status = 0;
    std::memcpy(&status, static_cast<const uint8_t *>(bytes) + 4, sizeof status);
    count(status == CUDAQ_RT_STATUS_OK                 ? answered_ok
          : status > 0                                 ? handler_errors
          : status == CUDAQ_RT_STATUS_UNKNOWN_FUNCTION ? unknown_function
          : status == CUDAQ_RT_STATUS_RESULT_TOO_LARGE ? result_too_large
          : status == CUDAQ_RT_STATUS_HANDLER_FAULT    ? handler_fault
                                                       : other_protocol_error);
    ++k;
  }
  if (k == 0)
    return 0;
  // The slots are free once their senders are copied out, and their responses, where some are
  // sent from the ring's bulk areas, once they are sent: the RX side then writes the next
  // requests there.
  if (!in_place)
    received_.store(tx_ring_.received, std::memory_order_release);
  const uint64_t failed = send_all(fd_, out.msgs.data(), k);
  if (in_place)
    received_.store(tx_ring_.received, std::memory_order_release);
  const uint64_t departure = now_ns();
  uint64_t to_answer = 0;
  for (unsigned i = 0; i < k; ++i) {
    latency_[cudaq_rt_latency_bucket(departure - out.arrivals[i])].fetch_add(
        1, std::memory_order_relaxed);
    to_answer += seen - out.arrivals[i];
  }
  count(to_answer_ns, to_answer);
  count(send_ns, (departure - seen) * k);
  count(responses_sent, k - failed);
  count(send_errors, failed);
  answered_.fetch_add(k, std::memory_order_release);
  return int(k);
}

bool Pump::finished_after_stop(std::chrono::steady_clock::time_point &stop_seen) {
  if (rx_done_.load(std::memory_order_acquire) &&
      tx_ring_.received == sent_.load(std::memory_order_acquire))
    return true; // everything taken was answered
  const auto now = std::chrono::steady_clock::now();
  if (stop_seen == std::chrono::steady_clock::time_point{})
    stop_seen = now;
  return now - stop_seen > std::chrono::seconds(1); // the kernel is gone with requests in flight
}

void Pump::idle_until_woken() {
  const uint32_t seen = wake_.load(std::memory_order_acquire);
  if (sent_.load(std::memory_order_acquire) == tx_ring_.sent &&
      !stopping_.load(std::memory_order_acquire))
    wake_.wait(seen, std::memory_order_acquire);
}

void Pump::rx_loop() {
  Intake in;
  // Stopped, maybe with every slot in flight: the kernel is gone.
  while (!stopping_.load(std::memory_order_acquire) && receive(in, !spin_) >= 0) {
  }
  rx_done_.store(true, std::memory_order_release);
}

void Pump::tx_loop() {
  Outlet out(slot_size_);
  std::chrono::steady_clock::time_point stop_seen{};
  for (;;) {
    const int k = send(out);
    if (k < 0)
      return;
    if (k > 0)
      continue;
    if (stopping_.load(std::memory_order_acquire) && finished_after_stop(stop_seen))
      return;
    if (spin_ || tx_ring_.received != tx_ring_.sent) {
      relax(); // a response is on its way: poll for it
      continue;
    }
    idle_until_woken(); // nothing in flight: until the RX thread writes a request, or stop()
  }
}

void Pump::serve_loop() {
  Intake in;
  Outlet out(slot_size_);
  std::chrono::steady_clock::time_point stop_seen{};
  bool intake = true;
  for (;;) {
    if (intake) {
      // With wait=block the receive sleeps only while nothing is in flight: a response on its
      // way is polled for between receives that do not wait.
      const bool idle = tx_ring_.received == rx_ring_.sent;
      if (stopping_.load(std::memory_order_acquire) || receive(in, !spin_ && idle) < 0) {
        intake = false;
        rx_done_.store(true, std::memory_order_release);
      }
    }
    const int k = send(out);
    if (k < 0) {
      rx_done_.store(true, std::memory_order_release);
      return;
    }
    if (intake || k > 0)
      continue;
    if (stopping_.load(std::memory_order_acquire) && finished_after_stop(stop_seen))
      return;
    if (spin_ || tx_ring_.received != tx_ring_.sent)
      relax();
    else
      idle_until_woken(); // drained, nothing in flight: until stop()
  }
}

} // namespace cudaq_rt::udp
