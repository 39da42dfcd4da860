// The UDP bridge's host side on the CPU: its configuration, how it classifies datagrams and what it
// answers itself, and its two threads (udp_host.h, the code the bridge runs) between real UDP
// sockets and a ring in ordinary memory, served by a CPU model of the loopback device hooks. Then
// the plugin itself (dlopened), for what comes before any CUDA call: the refusals of an unknown
// option and a port in use, and each instance's configuration. The GPU test (tests/gpu/test_udp.py) runs the real device code.
#include "memory_ring.h"
#include "udp_host.h"

#include "cudaq_rt/bridge.h"
#include "cudaq_rt/dispatch.h"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

using namespace cudaq_rt;
using namespace cudaq_rt::loopback;
using Bytes = std::vector<uint8_t>;

namespace {

constexpr uint32_t kEcho = cudaq_rt::function_id("echo");

Bytes frame(uint32_t function_id, const Bytes &payload, uint32_t request_id,
            uint32_t arg_len = UINT32_MAX, uint32_t magic = CUDAQ_RT_REQUEST_MAGIC) {
  cudaq_rt_request_header h{magic, function_id,
                            arg_len == UINT32_MAX ? uint32_t(payload.size()) : arg_len, request_id,
                            0x0102030405060708ull + request_id};
  Bytes f(sizeof h);
  std::memcpy(f.data(), &h, sizeof h);
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

cudaq_rt_response_header header_of(const Bytes &r) {
  cudaq_rt_response_header h{};
  REQUIRE(r.size() >= sizeof h);
  std::memcpy(&h, r.data(), sizeof h);
  return h;
}

using Ring = MemoryRing;

// The loopback device hooks and the unified kernel, modelled on the CPU: take request after
// request in ring order, answer echo with its payload and anything else with an unknown function.
class DeviceModel {
public:
  explicit DeviceModel(Ring &ring) : ring_(ring), thread_([this] { serve(); }) {}
  ~DeviceModel() {
    stop_ = true;
    thread_.join();
  }
  uint64_t served() const { return served_; }

private:
  uint64_t half(uint64_t *heads, uint64_t *tails, uint32_t slot, uint32_t c, bool second) {
    return load_half(cell_half(heads, tails, ring_.b.tail_cells, ring_.b.layout, slot, c) + second);
  }
  bool wait_stamped(uint64_t *heads, uint64_t *tails, uint32_t slot, uint32_t c, uint32_t lap,
                    uint64_t &h0, uint64_t &h1) {
    for (;;) {
      h0 = half(heads, tails, slot, c, false);
      h1 = half(heads, tails, slot, c, true);
      if (cudaq_rt_loopback_stamped(stamp_of(h0), stamp_of(h1), lap))
        return true;
      if (stop_)
        return false;
      std::this_thread::yield();
    }
  }
  void serve() {
    cudaq_rt_bridge &b = ring_.b;
    uint32_t slot = 0, lap = 1;
    while (!stop_) {
      uint64_t c0, c1;
      if (!wait_stamped(b.request_heads, b.request_tails, slot, 0, lap, c0, c1))
        return;
      const uint32_t len = data_of(c0);
      const bool bulk_in = data_of(c1) == CUDAQ_RT_LOOPBACK_KIND_BULK;
      Bytes in(size_t(cudaq_rt_loopback_frame_cells(len) - 1) * 8);
      if (bulk_in) // a bulk frame's bytes (loopback_ring.h): in the slot's bulk area, plain
        std::memcpy(in.data(), b.request_bulk + cudaq_rt_loopback_bulk_offset(slot, b.slot_size),
                    len);
      for (uint32_t c = 1; !bulk_in && c < cudaq_rt_loopback_frame_cells(len); ++c) {
        uint64_t h0, h1;
        if (!wait_stamped(b.request_heads, b.request_tails, slot, c, lap, h0, h1))
          return;
        const uint32_t d[2] = {data_of(h0), data_of(h1)};
        std::memcpy(in.data() + 8 * (c - 1), d, 8);
      }
      cudaq_rt_request_header rq;
      std::memcpy(&rq, in.data(), sizeof rq);
      const bool echo = rq.magic == CUDAQ_RT_REQUEST_MAGIC && rq.function_id == kEcho;
      cudaq_rt_response_header rs{CUDAQ_RT_RESPONSE_MAGIC,
                                  echo ? 0 : CUDAQ_RT_STATUS_UNKNOWN_FUNCTION,
                                  echo ? rq.arg_len : 0u, rq.request_id, rq.ptp_timestamp};
      Bytes out(sizeof rs);
      std::memcpy(out.data(), &rs, sizeof rs);
      if (echo)
        out.insert(out.end(), in.begin() + 24, in.begin() + 24 + rq.arg_len);
      const uint32_t out_len = uint32_t(out.size());
      const bool bulk_out = cudaq_rt_loopback_is_bulk(out_len, b.bulk_min);
      if (bulk_out)
        std::memcpy(b.response_bulk + cudaq_rt_loopback_bulk_offset(slot, b.slot_size), out.data(),
                    out_len);
      out.resize((out.size() + 7) / 8 * 8, 0);
      for (uint32_t c = 1; !bulk_out && c < cudaq_rt_loopback_frame_cells(out_len); ++c) {
        uint32_t d[2];
        std::memcpy(d, out.data() + 8 * (c - 1), 8);
        uint64_t *p =
            cell_half(b.response_heads, b.response_tails, b.tail_cells, b.layout, slot, c);
        store_half(p, lap, d[0]);
        store_half(p + 1, lap, d[1]);
      }
      uint64_t *control =
          cell_half(b.response_heads, b.response_tails, b.tail_cells, b.layout, slot, 0);
      store_half(control + 1, lap,
                 bulk_out ? CUDAQ_RT_LOOPBACK_KIND_BULK : CUDAQ_RT_LOOPBACK_KIND_CELLS);
      store_half(control, lap, out_len);
      ++served_;
      if (++slot == b.num_slots) {
        slot = 0;
        lap = cudaq_rt_loopback_next_lap(lap);
      }
    }
  }

  Ring &ring_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> served_{0};
  std::thread thread_;
};

// A client socket connected to the bridge's address.
struct ClientSocket {
  int fd = -1;
  explicit ClientSocket(const std::string &address) {
    const size_t colon = address.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(std::stoi(address.substr(colon + 1))));
    REQUIRE(inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr) == 1);
    fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    REQUIRE(fd >= 0);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0);
  }
  ~ClientSocket() { ::close(fd); }
  void send(const Bytes &b) const {
    REQUIRE(::send(fd, b.data(), b.size(), 0) == ssize_t(b.size()));
  }
  // The next datagram, or nothing within `ms`.
  std::optional<Bytes> receive(int ms = 5000) const {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1)
      return std::nullopt;
    Bytes b(65536);
    ssize_t n = ::recv(fd, b.data(), b.size(), 0);
    if (n < 0)
      return std::nullopt;
    b.resize(size_t(n));
    return b;
  }
};

std::map<std::string, uint64_t> counters_of(const udp::Pump &pump) {
  std::vector<cudaq_rt_bridge_counter> c(udp::counter_count);
  REQUIRE(pump.counters(c.data(), uint32_t(c.size())) == udp::counter_count);
  std::map<std::string, uint64_t> out;
  for (auto &x : c)
    out[x.name] = x.value;
  return out;
}

} // namespace

TEST_CASE("configuration: defaults, every key, and exact refusals") {
  udp::Config c;
  CHECK(udp::parse_config("", c).empty());
  CHECK(c.bind == "127.0.0.1");
  CHECK(c.port == 0);
  CHECK(c.spin);
  CHECK(udp::parse_config("bind=::1,port=5000,slots=8,slot_size=256,wait=block", c).empty());
  CHECK(c.bind == "::1");
  CHECK(c.port == 5000);
  CHECK(c.slots == 8);
  CHECK(c.slot_size == 256);
  CHECK(!c.spin);
  CHECK(c.layout == CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS);
  CHECK(c.bulk_min == CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN);
  CHECK(udp::parse_config("bulk=0", c).empty());
  CHECK(c.bulk_min == 0);
  CHECK(udp::parse_config("bulk=x", c) == "option 'bulk' needs a number, got 'x'");
  CHECK(c.response_bulk_min == CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS); // as bulk= says
  CHECK(udp::parse_config("response_bulk=129", c).empty());
  CHECK(c.response_bulk_min == 129);
  CHECK(udp::parse_config("response_bulk=-1", c) ==
        "option 'response_bulk' needs a number, got '-1'");
  CHECK(udp::parse_config("layout=lanes", c).empty());
  CHECK(c.layout == CUDAQ_RT_LOOPBACK_LAYOUT_LANES);
  CHECK(udp::parse_config("spare_frame=1", c).empty());
  CHECK(c.spare_frame == 1);
  CHECK(udp::parse_config("spare_frame=2", c) == "option 'spare_frame' is 0 or 1, got '2'");
  CHECK(udp::parse_config("layout=diagonal", c) ==
        "option 'layout' is slots or lanes, got 'diagonal'");
  CHECK(udp::parse_config("bogus=1", c) ==
        "unknown option 'bogus' (known: bind=ADDR, port=N, slots=N, slot_size=BYTES, "
        "wait=spin|block, threads=1|2, cpu=N, layout=slots|lanes, bulk=BYTES, "
        "response_bulk=BYTES, spare_frame=0|1, warps=N)");
  CHECK(udp::parse_config("port=65536", c) == "port=65536 is out of range 0..65535");
  CHECK(udp::parse_config("port=x", c) == "option 'port' needs a number, got 'x'");
  CHECK(udp::parse_config("wait=sometimes", c) ==
        "option 'wait' is 'spin' or 'block', got 'sometimes'");
  CHECK(udp::parse_config("bind=", c) == "option 'bind' needs an address");
  CHECK(c.threads == 1);
  CHECK(udp::parse_config("threads=2", c).empty());
  CHECK(c.threads == 2);
  CHECK(udp::parse_config("threads=3", c) == "option 'threads' is 1 or 2, got '3'");
}

namespace {

// The CPUs this process may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set))
      cpus.push_back(c);
  return cpus;
}

// The Cpus_allowed_list of a /proc status file: "0-1", "3".
std::string cpus_allowed(const std::filesystem::path &status_file) {
  std::string line;
  for (std::ifstream status(status_file); std::getline(status, line);)
    if (line.rfind("Cpus_allowed_list:", 0) == 0)
      return line.substr(line.find_first_not_of(" \t", 18));
  return {};
}

// This process's threads by name (/proc/self/task/TID/comm), each with the CPUs it may run on.
std::multimap<std::string, std::string> threads_by_name() {
  std::multimap<std::string, std::string> out;
  for (const auto &task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string name;
    std::ifstream(task.path() / "comm") >> name;
    out.emplace(name, cpus_allowed(task.path() / "status"));
  }
  return out;
}

} // namespace

TEST_CASE("cpu=N: checked against the CPUs this process may run on, then the threads run there") {
  const std::vector<int> cpus = allowed_cpus();
  REQUIRE(!cpus.empty());
  udp::Config c;
  CHECK(c.cpu == -1);
  CHECK(udp::parse_config("cpu=x", c) == "option 'cpu' needs a CPU number, got 'x'");
  CHECK(udp::parse_config("cpu=-1", c) == "option 'cpu' needs a CPU number, got '-1'");
  for (const char *beyond : {"1023", "100000", "4294967295"})
    CHECK(udp::parse_config(std::string("cpu=") + beyond, c)
              .rfind(std::string("cpu=") + beyond + ": this process may not run on CPU " + beyond +
                         "; it may on " + std::to_string(cpus.front()),
                     0) == 0);
  REQUIRE(udp::parse_config("cpu=" + std::to_string(cpus.back()), c).empty());
  CHECK(c.cpu == cpus.back());
  // threads=2 takes N and N+1: checked once every option is read (here threads= comes last).
  const std::string last = std::to_string(cpus.back());
  CHECK(udp::parse_config("cpu=" + last + ",threads=2", c)
            .rfind("cpu=" + last + ": this process may not run on CPU " +
                       std::to_string(cpus.back() + 1) +
                       " (threads=2 takes CPUs N and N+1); it may on ",
                   0) == 0);

  udp::Config config;
  udp::Socket socket;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, socket, error), error);
  ClientSocket s(socket.address);
  for (uint32_t threads : {1u, 2u}) {
    // Two CPUs side by side for two threads, if this process has them.
    int first = -1;
    for (size_t i = 0; i < cpus.size(); ++i)
      if (threads == 1 || (i + 1 < cpus.size() && cpus[i + 1] == cpus[i] + 1))
        first = cpus[i];
    if (first < 0)
      continue;
    Ring ring(4, 64); // a ring of its own for each pump: its positions start at the ring's
    DeviceModel device(ring);
    CAPTURE(threads);
    udp::Pump pump(ring.b, socket.fd, false, threads, first);
    REQUIRE_MESSAGE(pump.start(error), error);
    const auto named = threads_by_name();
    if (threads == 1) {
      REQUIRE(named.count("cudaq-rt-udp") == 1);
      CHECK(named.find("cudaq-rt-udp")->second == std::to_string(first));
    } else {
      REQUIRE(named.count("cudaq-rt-udp-rx") == 1);
      REQUIRE(named.count("cudaq-rt-udp-tx") == 1);
      CHECK(named.find("cudaq-rt-udp-rx")->second == std::to_string(first));
      CHECK(named.find("cudaq-rt-udp-tx")->second == std::to_string(first + 1));
    }
    s.send(frame(kEcho, Bytes{7, uint8_t(threads)}, threads));
    auto r = s.receive();
    REQUIRE(r);
    CHECK(header_of(*r).request_id == threads);
    CHECK(pump.drain(5));
    pump.stop();
    CHECK(threads_by_name().count("cudaq-rt-udp") == 0); // joined
  }
  // Unpinned, the thread may run wherever the process may.
  Ring ring(4, 64);
  udp::Pump pump(ring.b, socket.fd, false, 1);
  REQUIRE_MESSAGE(pump.start(error), error);
  const auto named = threads_by_name();
  REQUIRE(named.count("cudaq-rt-udp") == 1);
  CHECK(named.find("cudaq-rt-udp")->second == cpus_allowed("/proc/self/status"));
  pump.stop();
  ::close(socket.fd);
}

TEST_CASE("each instance's configuration: port=N becomes N+i, the warp form gets lanes, no bulk") {
  auto config = [](uint32_t polling_lanes, uint32_t instance, const char *given,
                   bool engine = false) {
    std::string out = "(unset)";
    const std::string why = udp::instance_config(
        {sizeof(cudaq_rt_bridge_launch), polling_lanes, instance}, given, engine, out);
    return why.empty() ? out : "error: " + why;
  };
  CHECK(config(1, 0, "port=5000,slots=8") == "port=5000,slots=8");
  CHECK(config(1, 2, "port=5000,slots=8") == "port=5002,slots=8");
  CHECK(config(1, 3, "bind=::1,port=0") == "bind=::1,port=0"); // each a free port
  CHECK(config(1, 1, "slots=8") == "slots=8");
  CHECK(config(1, 1, "") == "");
  CHECK(config(1, 1, "port=x") == "port=x"); // for create to refuse, as on GPU 0
  CHECK(config(1, 1, "port=65535") ==
        "error: --bridge-arg port=65535: GPU number 2 would need port 65536, beyond 65535");
  CHECK(config(1, 0, "port=65535") == "port=65535");
  CHECK(config(32, 1, "port=5000,slots=64") == "port=5001,slots=64,layout=lanes,bulk=0");
  CHECK(config(32, 0, "layout=slots") == "layout=slots,bulk=0");
  CHECK(config(0, 0, "") == ""); // a custom kernel: the default layout
  // The unified kernel on a GPU with the bulk copy engine: small frames as cells
  // (loopback_ring.h, "Tails by the engine"), unless bulk is given; a custom kernel, never.
  CHECK(config(1, 1, "port=5000", true) == "port=5001,spare_frame=1,bulk=537,response_bulk=281");
  CHECK(config(1, 0, "bulk=33", true) == "bulk=33,spare_frame=1");
  CHECK(config(0, 0, "", true) == "");
  CHECK(config(32, 0, "", true) == "layout=lanes,bulk=0");
  CHECK(config(32, 1, "port=5000,port=5001") == "error: option 'port' is given twice");
  // Each GPU's threads on CPUs of their own: GPU i's from N + i * threads.
  CHECK(config(1, 0, "cpu=4") == "cpu=4");
  CHECK(config(1, 3, "cpu=4") == "cpu=7");
  CHECK(config(1, 3, "threads=2,cpu=4") == "threads=2,cpu=10");
  CHECK(config(1, 2, "cpu=x") == "cpu=x"); // for create to refuse, as on GPU 0
}

TEST_CASE("every malformed datagram kind is classified, and answered with its status") {
  using udp::Kind;
  const uint32_t slot = 64;
  auto kind = [&](const Bytes &b, size_t size = SIZE_MAX) {
    return udp::classify(b.data(), size == SIZE_MAX ? b.size() : size, slot);
  };
  const Bytes whole = frame(kEcho, Bytes(8, 7), 5);
  CHECK(kind(Bytes{}) == Kind::runt);                                  // empty
  CHECK(kind(Bytes{0x52}) == Kind::runt);                              // 1 byte
  CHECK(kind(Bytes(whole.begin(), whole.begin() + 15)) == Kind::runt); // no request_id
  CHECK(kind(Bytes(whole.begin(), whole.begin() + 16)) == Kind::truncated);
  CHECK(kind(Bytes(whole.begin(), whole.begin() + 23)) == Kind::truncated); // 23 bytes
  CHECK(kind(frame(kEcho, {}, 1, 8)) == Kind::truncated);        // header only, arg_len 8
  CHECK(kind(frame(kEcho, Bytes(4), 1, 9)) == Kind::truncated);  // arg_len > what arrived
  CHECK(kind(frame(kEcho, Bytes(9), 1, 4)) == Kind::bad_length); // arg_len < what arrived
  CHECK(kind(frame(kEcho, Bytes(8), 1, UINT32_MAX, 0xdeadbeef)) == Kind::bad_magic);
  CHECK(kind(frame(kEcho, Bytes(8), 1, UINT32_MAX, CUDAQ_RT_TRUNCATED_MAGIC)) == Kind::truncated);
  CHECK(kind(frame(kEcho, Bytes(slot - 24), 1)) == Kind::request); // exactly a slot
  // A datagram larger than a slot: the buffer holds a slot of it, the size is the real one.
  CHECK(kind(frame(kEcho, Bytes(slot - 24), 1, 2000), 2024) == Kind::oversize);
  CHECK(kind(whole) == Kind::request);
  CHECK(kind(frame(0x1234, Bytes(8), 1)) == Kind::request); // unknown function: the GPU's call

  CHECK(udp::answer_status(Kind::bad_magic) == CUDAQ_RT_STATUS_BAD_MAGIC);
  CHECK(udp::answer_status(Kind::truncated) == CUDAQ_RT_STATUS_TRUNCATED);
  CHECK(udp::answer_status(Kind::oversize) == CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE);
  CHECK(udp::answer_status(Kind::bad_length) == CUDAQ_RT_STATUS_BAD_LENGTH);

  // The answer echoes what arrived of request_id and timestamp, and zeroes the rest.
  const Bytes part(whole.begin(), whole.begin() + 20);
  auto r = udp::error_response(part.data(), part.size(), CUDAQ_RT_STATUS_TRUNCATED);
  cudaq_rt_response_header h;
  std::memcpy(&h, r.data(), sizeof h);
  CHECK(h.magic == CUDAQ_RT_RESPONSE_MAGIC);
  CHECK(h.status == CUDAQ_RT_STATUS_TRUNCATED);
  CHECK(h.result_len == 0);
  CHECK(h.request_id == 5);
  CHECK(h.ptp_timestamp == ((0x0102030405060708ull + 5) & 0xFFFFFFFFull));
}

TEST_CASE("many clients at once, same request_ids: each gets exactly its own answers") {
  // Fewer slots than requests in flight: slots are reused, the RX thread waits. Frames as cells,
  // and frames over 32 bytes in bulk (the bridge's default).
  uint32_t bulk_min = 0, threads = 2;
  SUBCASE("as cells, two threads") {}
  SUBCASE("as cells, one thread") {
    threads = 1;
  }
  SUBCASE("in bulk, two threads") {
    bulk_min = CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN;
  }
  SUBCASE("in bulk, one thread") {
    bulk_min = CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN;
    threads = 1;
  }
  CAPTURE(bulk_min);
  CAPTURE(threads);
  Ring ring(8, 128, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, bulk_min);
  DeviceModel device(ring);
  udp::Config config;
  config.spin = false;
  udp::Socket socket;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, socket, error), error);
  CHECK(socket.address.starts_with("127.0.0.1:"));
  CHECK(socket.address != "127.0.0.1:0");
  {
    udp::Pump pump(ring.b, socket.fd, false, threads);
    REQUIRE_MESSAGE(pump.start(error), error);
    constexpr int kClients = 4, kRequests = 3000, kWindow = 6;
    std::vector<std::thread> clients;
    std::vector<int> good(kClients, 0), bad(kClients, 0);
    for (int c = 0; c < kClients; ++c)
      clients.emplace_back([&, c] {
        ClientSocket s(socket.address);
        std::map<uint32_t, Bytes> pending;
        int next = 0;
        while (next < kRequests || !pending.empty()) {
          while (next < kRequests && pending.size() < kWindow) {
            Bytes payload(8 + next % 40);
            payload[0] = uint8_t(c);
            std::memcpy(payload.data() + 1, &next, 4);
            const uint32_t id = uint32_t(next); // every client uses the same ids
            pending[id] = payload;
            s.send(frame(kEcho, payload, id));
            ++next;
          }
          auto r = s.receive();
          if (!r)
            break; // lost: counted as bad below
          auto h = header_of(*r);
          auto it = pending.find(h.request_id);
          if (it == pending.end() || h.status != 0 ||
              Bytes(r->begin() + 24, r->end()) != it->second) {
            ++bad[c];
            continue;
          }
          pending.erase(it);
          ++good[c];
        }
        bad[c] += int(pending.size());
      });
    for (auto &t : clients)
      t.join();
    for (int c = 0; c < kClients; ++c) {
      CAPTURE(c);
      CHECK(good[c] == kRequests);
      CHECK(bad[c] == 0);
    }
    CHECK(pump.drain(5));
    auto n = counters_of(pump);
    CHECK(n["datagrams_received"] == kClients * kRequests);
    CHECK(n["requests_forwarded"] == kClients * kRequests);
    CHECK(n["responses_sent"] == kClients * kRequests);
    CHECK(n["answered_ok"] == kClients * kRequests);
    CHECK(n["send_errors"] == 0);
    // The split of the server's time: each part was timed, and a request's answer is seen after
    // its frame was written (summed over 12,000 requests, each waiting on the device model).
    CHECK(n["intake_ns"] > 0);
    CHECK(n["to_answer_ns"] > n["intake_ns"]);
    CHECK(n["send_ns"] > 0);
    std::vector<uint64_t> latency(CUDAQ_RT_LATENCY_BUCKETS, 0);
    pump.add_latency(latency.data());
    uint64_t measured = 0;
    for (uint64_t v : latency)
      measured += v;
    CHECK(measured == kClients * kRequests);
    pump.stop();
  }
  ::close(socket.fd);
}

TEST_CASE("malformed datagrams among valid ones: answered or dropped, counted, serving goes on") {
  uint32_t threads = 2;
  SUBCASE("two threads") {}
  SUBCASE("one thread") {
    threads = 1;
  }
  CAPTURE(threads);
  Ring ring(4, 64);
  DeviceModel device(ring);
  udp::Config config;
  udp::Socket socket;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, socket, error), error);
  udp::Pump pump(ring.b, socket.fd, false, threads);
  REQUIRE_MESSAGE(pump.start(error), error);
  ClientSocket s(socket.address);
  const Bytes good = frame(kEcho, Bytes{1, 2, 3}, 77);
  // What is dropped gets no answer: the valid request sent after it is the next datagram back.
  for (const Bytes &runt : {Bytes{}, Bytes{0x52}, Bytes(good.begin(), good.begin() + 15)}) {
    CAPTURE(runt.size());
    s.send(runt);
    s.send(good);
    auto r = s.receive();
    REQUIRE(r);
    CHECK(header_of(*r).status == 0);
    CHECK(header_of(*r).request_id == 77);
  }
  struct Case {
    const char *what;
    Bytes datagram;
    int32_t status;
  };
  const std::vector<Case> cases = {
      {"23 bytes", Bytes(good.begin(), good.begin() + 23), CUDAQ_RT_STATUS_TRUNCATED},
      {"header only, arg_len 8", frame(kEcho, {}, 11, 8), CUDAQ_RT_STATUS_TRUNCATED},
      {"arg_len beyond the datagram", frame(kEcho, Bytes(4), 12, 30), CUDAQ_RT_STATUS_TRUNCATED},
      {"arg_len short of the datagram", frame(kEcho, Bytes(8), 13, 2), CUDAQ_RT_STATUS_BAD_LENGTH},
      {"oversize", frame(kEcho, Bytes(200), 14), CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE},
      {"bad magic", frame(kEcho, Bytes(4), 15, UINT32_MAX, 0x11223344), CUDAQ_RT_STATUS_BAD_MAGIC},
      {"unknown function (the device's answer)", frame(0xabcdef, Bytes(4), 16),
       CUDAQ_RT_STATUS_UNKNOWN_FUNCTION},
  };
  for (const Case &c : cases) {
    CAPTURE(c.what);
    s.send(c.datagram);
    auto r = s.receive();
    REQUIRE(r);
    CHECK(r->size() == 24);
    cudaq_rt_request_header rq{};
    std::memcpy(&rq, c.datagram.data(), std::min(c.datagram.size(), sizeof rq));
    CHECK(header_of(*r).status == c.status);
    CHECK(header_of(*r).request_id == rq.request_id);
    s.send(good);
    r = s.receive();
    REQUIRE(r);
    CHECK(header_of(*r).status == 0);
  }
  CHECK(pump.drain(5));
  auto n = counters_of(pump);
  CHECK(n["datagrams_received"] == 3 * 2 + cases.size() * 2);
  CHECK(n["dropped_runt"] == 3);
  CHECK(n["truncated"] == 3);
  CHECK(n["bad_length"] == 1);
  CHECK(n["oversize"] == 1);
  CHECK(n["bad_magic"] == 1);
  CHECK(n["unknown_function"] == 1);
  CHECK(n["answered_ok"] == 3 + cases.size());
  CHECK(n["requests_forwarded"] == 3 + cases.size() + 1);
  // After the drain, nothing more is taken.
  s.send(good);
  CHECK(!s.receive(200));
  pump.stop();
  ::close(socket.fd);
}

TEST_CASE("a hold takes nothing more: what arrives waits in the socket for the next start") {
  Ring ring(4, 64);
  DeviceModel device(ring);
  udp::Config config;
  udp::Socket socket;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, socket, error), error);
  udp::Pump pump(ring.b, socket.fd, false, 2);
  REQUIRE_MESSAGE(pump.start(error), error);
  ClientSocket s(socket.address);
  s.send(frame(kEcho, Bytes{1}, 1));
  REQUIRE(s.receive());
  CHECK(pump.hold(5));
  for (uint32_t id = 2; id <= 4; ++id)
    s.send(frame(kEcho, Bytes{uint8_t(id)}, id));
  CHECK(!s.receive(200)); // held: not taken, not answered, not dropped
  CHECK(counters_of(pump)["datagrams_received"] == 1);
  pump.stop();
  // The next start (a new kernel, after a swap) serves what waited, in order.
  REQUIRE_MESSAGE(pump.start(error), error);
  for (uint32_t id = 2; id <= 4; ++id) {
    auto r = s.receive();
    REQUIRE(r);
    CHECK(header_of(*r).request_id == id);
  }
  CHECK(pump.drain(5));
  CHECK(counters_of(pump)["datagrams_received"] == 4);
  pump.stop();
  ::close(socket.fd);
}

TEST_CASE("a burst taken in one receive: requests move past the datagrams answered between them") {
  // Datagrams are received straight into the free slots' bulk areas, one slot each; a request
  // after a datagram the bridge answers or drops moves down to the next slot of the ring. All
  // of them wait in the socket before the pump starts, so that its first recvmmsg takes them
  // together, and the ring's 8 slots have been used once (the second lap's slots start at 3).
  uint32_t threads = 2;
  SUBCASE("two threads") {}
  SUBCASE("one thread") {
    threads = 1;
  }
  CAPTURE(threads);
  Ring ring(8, 256, CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS, CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN);
  DeviceModel device(ring);
  udp::Config config;
  udp::Socket socket;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, socket, error), error);
  udp::Pump pump(ring.b, socket.fd, true, threads);
  ClientSocket s(socket.address);
  auto payload = [](uint32_t id, size_t n) {
    Bytes p(n);
    for (size_t i = 0; i < n; ++i)
      p[i] = uint8_t(id * 7 + i);
    return p;
  };
  // Warm-up: 11 echoes one at a time, so that the burst starts in the middle of the second lap.
  REQUIRE_MESSAGE(pump.start(error), error);
  for (uint32_t id = 1; id <= 11; ++id) {
    s.send(frame(kEcho, payload(id, 100), id));
    auto r = s.receive();
    REQUIRE(r);
    REQUIRE(header_of(*r).request_id == id);
  }
  REQUIRE(pump.drain(5));
  pump.stop();
  struct Sent {
    Bytes datagram;
    int32_t status; // what comes back; 1: nothing (dropped)
    Bytes result;
  };
  const std::vector<Sent> burst = {
      {frame(kEcho, payload(21, 200), 21), 0, payload(21, 200)}, // bulk
      {Bytes{0x52, 0x51}, 1, {}},                                // runt: dropped
      {frame(kEcho, payload(22, 4), 22, UINT32_MAX, 0x11223344), CUDAQ_RT_STATUS_BAD_MAGIC, {}},
      {frame(kEcho, payload(23, 4), 23), 0, payload(23, 4)}, // cells
      {frame(kEcho, payload(24, 300), 24), CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE, {}},
      {frame(kEcho, payload(25, 150), 25), 0, payload(25, 150)},
      {frame(kEcho, payload(26, 4), 26, 30), CUDAQ_RT_STATUS_TRUNCATED, {}},
      {frame(kEcho, payload(27, 232), 27), 0, payload(27, 232)}, // a whole slot
      {frame(kEcho, payload(28, 60), 28), 0, payload(28, 60)},
      {frame(kEcho, payload(29, 9), 29), 0, payload(29, 9)},
  };
  for (const Sent &d : burst)
    s.send(d.datagram);
  REQUIRE_MESSAGE(pump.start(error), error);
  const size_t answered = size_t(
      std::count_if(burst.begin(), burst.end(), [](const Sent &d) { return d.status != 1; }));
  std::map<uint32_t, Bytes> answers;
  while (answers.size() < answered) {
    auto r = s.receive();
    REQUIRE(r);
    answers[header_of(*r).request_id] = *r;
  }
  for (const Sent &d : burst) {
    cudaq_rt_request_header rq{};
    std::memcpy(&rq, d.datagram.data(), std::min(d.datagram.size(), sizeof rq));
    if (d.status == 1)
      continue;
    CAPTURE(rq.request_id);
    REQUIRE(answers.count(rq.request_id) == 1);
    const Bytes &r = answers[rq.request_id];
    CHECK(header_of(r).status == d.status);
    CHECK(Bytes(r.begin() + 24, r.end()) == d.result);
  }
  CHECK(pump.drain(5));
  auto n = counters_of(pump);
  CHECK(n["datagrams_received"] == 11 + burst.size());
  CHECK(n["requests_forwarded"] == 11 + 6);
  CHECK(n["answered_ok"] == 11 + 6);
  CHECK(n["dropped_runt"] == 1);
  pump.stop();
  ::close(socket.fd);
}

#ifdef CUDAQ_RT_TEST_UDP_BRIDGE
TEST_CASE("the plugin refuses an unknown option and a port in use before touching CUDA") {
  auto lib = BridgeLibrary::open(CUDAQ_RT_TEST_UDP_BRIDGE);
  REQUIRE_MESSAGE(lib, lib.error().str());
  CHECK(lib->name() == "udp");
  CHECK((lib->ops().capabilities & CUDAQ_RT_BRIDGE_CAP_SELF_FED) != 0);
  CHECK((lib->ops().capabilities & CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES) == 0);
  auto bogus = lib->create("bogus=1");
  REQUIRE(!bogus);
  CHECK(bogus.error().str() ==
        "'" + std::string(CUDAQ_RT_TEST_UDP_BRIDGE) +
            "': bridge 'udp': unknown option 'bogus' (known: bind=ADDR, port=N, slots=N, "
            "slot_size=BYTES, wait=spin|block, threads=1|2, cpu=N, layout=slots|lanes, "
            "bulk=BYTES, response_bulk=BYTES, spare_frame=0|1, warps=N)");
  // A port some other socket holds.
  udp::Config config;
  udp::Socket taken;
  std::string error;
  REQUIRE_MESSAGE(udp::open_socket(config, taken, error), error);
  const std::string port = taken.address.substr(taken.address.rfind(':') + 1);
  auto in_use = lib->create("port=" + port);
  REQUIRE(!in_use);
  CHECK(in_use.error().str() == "'" + std::string(CUDAQ_RT_TEST_UDP_BRIDGE) +
                                    "': bridge 'udp': cannot bind 127.0.0.1:" + port +
                                    ": Address already in use");
  auto bad_bind = lib->create("bind=localhost");
  REQUIRE(!bad_bind);
  CHECK(bad_bind.error().str() == "'" + std::string(CUDAQ_RT_TEST_UDP_BRIDGE) +
                                      "': bridge 'udp': bind=localhost: not a numeric IPv4 or "
                                      "IPv6 address");
  ::close(taken.fd);
}

TEST_CASE("the plugin configures each instance for its kernel and GPU, through the loader") {
  auto lib = BridgeLibrary::open(CUDAQ_RT_TEST_UDP_BRIDGE);
  REQUIRE_MESSAGE(lib, lib.error().str());
  auto warp = lib->instance_config({CUDAQ_RT_WARP_LANES, 1}, "port=5000,slots=64");
  REQUIRE_MESSAGE(warp, warp.error().str());
  CHECK(*warp == "port=5001,slots=64,layout=lanes,bulk=0");
  auto unified = lib->instance_config({1, 0}, "port=5000");
  REQUIRE(unified);
  CHECK(*unified == "port=5000");
  auto beyond = lib->instance_config({1, 1}, "port=65535");
  REQUIRE(!beyond);
  CHECK(beyond.error().str() == "'" + std::string(CUDAQ_RT_TEST_UDP_BRIDGE) +
                                    "': bridge 'udp': --bridge-arg port=65535: GPU number 2 would "
                                    "need port 65536, beyond 65535");
}
#endif
