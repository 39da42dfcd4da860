// The UDP bridge's host side, as far as it needs no CUDA: the configuration, what a datagram is
// (classify: a request for the GPU, or something the bridge answers or drops itself), the
// socket, and the thread or threads that move datagrams between the socket and a loopback ring
// (loopback_host.h). udp.cpp allocates the ring with CUDA and exports the plugin; the unit test
// (tests/unit/bridges/test_udp_bridge.cpp) runs this code on a ring in ordinary memory against a
// CPU model of the device side.
//
// How a request travels
// ---------------------
//   RX thread: recvmmsg takes up to kBatch datagrams at once, at most one per free slot, each
//     straight into the bulk area of one of the free slots in ring order (loopback::request_area),
//     so that a request in bulk is not copied on its way to the GPU. Each is classified; a whole
//     request frame is written into the next ring slot (write_request: its cells, or its control
//     cell where its bytes are already in the slot's area; moved down first where a datagram
//     before it in the batch was answered or dropped), and the slot remembers the sender's
//     address and the arrival time. The ring's order is the sequence the RX thread wrote, so slot
//     k % N holds request k, and its response comes back in that slot: the sender is found by
//     slot, never by request_id (two clients may use the same ids). With every slot in flight, the
//     RX thread waits for a credit, and further datagrams wait in the socket's receive buffer.
//   TX thread: takes every response that is ready, in ring order (receive_response_in_place: a
//     response in bulk stays where the GPU wrote it, in the slot's bulk area), copies the slot's
//     sender, and sends the batch with sendmmsg; it returns the slots (the credits) once it has
//     copied the senders out, or, where a response of the batch was sent from the ring, once
//     sendmmsg has taken the bytes.
//   The ring's host side (cudaq_rt_bridge) is not thread-safe: each side works on its own copy
//   of it (rx_ring_, tx_ring_: same memory, own counters), and they exchange only the two sequence
//   numbers, as atomics: RX publishes `sent` after the slot's sender is stored, TX publishes
//   `received` as above.
//   threads=1 (the default) runs both sides on one thread, in turn (serve_loop): a receive that
//   does not wait, then a sweep of the answers. An answer then leaves from the CPU that received
//   its request, and sendmmsg on a socket the CPU just received on costs less: on the H200 host,
//   one client's 8-byte round trip was 9.2 us against 10.0 with a thread each (means of 9
//   alternating pairs), the send part of it 2.6 to 3.5 us against 3.0 to 4.2. threads=2 runs the
//   sides on two threads, which serve more requests a second from many clients at once (8 clients:
//   290 to 340 thousand a second against 250 to 260); bench/udp_rtt.md has the runs.
//
// What the bridge answers itself (the GPU never sees these; wire.h has the statuses):
//   under 16 bytes                dropped, counted (no request_id to answer with: a client could
//                                 not match the answer, and answering stray bytes would make
//                                 the server a reflector)
//   magic neither CUQR nor CUQT   CUDAQ_RT_STATUS_BAD_MAGIC
//   16..23 bytes, or arg_len      CUDAQ_RT_STATUS_TRUNCATED, the header bytes that did not arrive
//   above what arrived, or CUQT   as zeroes (the echoed request_id and timestamp are the sender's)
//   larger than a slot            CUDAQ_RT_STATUS_PAYLOAD_TOO_LARGE
//   arg_len below what arrived    CUDAQ_RT_STATUS_BAD_LENGTH
// The GPU answers the rest, including an unknown function_id (CUDAQ_RT_STATUS_UNKNOWN_FUNCTION).
#ifndef CUDAQ_RT_UDP_HOST_H
#define CUDAQ_RT_UDP_HOST_H

#include "cudaq_rt/bridge_plugin.h"
#include "loopback_host.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace cudaq_rt::udp {

struct Config {
  std::string bind = "127.0.0.1";
  uint32_t port = 0; // 0: the system picks a free one
  uint32_t slots = CUDAQ_RT_LOOPBACK_DEFAULT_SLOTS;
  uint32_t layout = CUDAQ_RT_LOOPBACK_LAYOUT_SLOTS; // of the ring's heads (loopback_ring.h)
  uint32_t slot_size = CUDAQ_RT_LOOPBACK_DEFAULT_SLOT_SIZE;
  uint32_t bulk_min = CUDAQ_RT_LOOPBACK_DEFAULT_BULK_MIN; // frames this long go in bulk (0: never)
  uint32_t response_bulk_min = CUDAQ_RT_LOOPBACK_RESPONSE_BULK_AS_REQUESTS; // the same, responses
  uint32_t spare_frame = 0; // the chain's spare frame in dynamic shared memory (loopback_ring.h)
  uint32_t warps = 1;       // warps of the warp form serving the ring (loopback_ring.h, "Warps")
  bool spin = true; // wait=spin: threads poll without sleeping; wait=block: they sleep when idle
  uint32_t threads = 1; // threads=1: one thread receives and sends; threads=2: a thread each
  int cpu = -1; // cpu=N: the threads run on CPUs N (and N+1 for the sending one); -1: anywhere
};

// Parses "bind=ADDR,port=N,slots=N,slot_size=BYTES,wait=spin|block,threads=1|2,cpu=N,
// layout=slots|lanes,bulk=BYTES,response_bulk=BYTES,spare_frame=0|1,warps=N" into `out`; returns
// why it cannot, or empty. cpu=N is checked against the CPUs this process may run on.
std::string parse_config(std::string_view text, Config &out);

// The options instance `launch` is created with (cudaq_rt_bridge_ops::instance_config), from the
// user's `config`, into `out`: the ring laid out for the kernel as the loopback bridge's is
// (loopback::lay_out_for; `engine`: the GPU has the bulk copy engine), and on several GPUs a
// socket each on consecutive ports, port=N becoming port=N+i for instance i (N = 0, a free port,
// stays), and threads on CPUs of their own, cpu=N becoming cpu=N+i*T (T: the threads=
// given, 1 by default). Returns why it cannot, or empty.
std::string instance_config(const cudaq_rt_bridge_launch &launch, std::string_view config,
                            bool engine, std::string &out);

enum class Kind : uint8_t {
  request,    // whole: for the GPU
  runt,       // under 16 bytes: dropped
  bad_magic,  // answered by the bridge
  truncated,  // answered by the bridge
  oversize,   // answered by the bridge
  bad_length, // answered by the bridge
};

// What a datagram of `size` bytes is (`data` holds min(size, slot_size) of them: a larger one was
// cut by the receive buffer, so `size` is the length the kernel reported with MSG_TRUNC).
Kind classify(const uint8_t *data, size_t size, uint32_t slot_size);
// The status the bridge answers a datagram of `kind` with (kind is neither request nor runt).
int32_t answer_status(Kind kind);
// The 24-byte response the bridge sends for such a datagram: request_id and ptp_timestamp echoed
// from the bytes that arrived (zeroes for bytes that did not), result_len 0.
std::array<uint8_t, CUDAQ_RT_HEADER_SIZE> error_response(const uint8_t *data, size_t size,
                                                         int32_t status);

// A bound UDP socket (IPv4 or IPv6, numeric address).
struct Socket {
  int fd = -1;
  std::string address; // "127.0.0.1:40123", "[::1]:40123"
};
// Opens and binds; the error says which address could not be bound and why.
bool open_socket(const Config &config, Socket &out, std::string &error);

// The counters, in the order counters() reports them.
enum Counter : uint32_t {
  datagrams_received,
  requests_forwarded, // written into the ring for the GPU
  responses_sent,     // the GPU's answers, sent
  answered_ok,
  handler_errors,       // status > 0
  unknown_function,     // status -1 from the GPU
  result_too_large,     // -3
  handler_fault,        // -5
  other_protocol_error, // any other negative status from the GPU
  bad_magic,            // answered by the bridge
  truncated,
  oversize,
  bad_length,
  dropped_runt,   // under 16 bytes
  dropped_socket, // the socket's receive buffer overflowed (SO_RXQ_OVFL): never received
  send_errors,    // responses sendmmsg could not send
  ring_errors,    // a response the ring could not give back (the TX thread then stops)
  // Where a request's time in the server goes, summed over requests, in nanoseconds: from its
  // arrival (recvmmsg returned) to its frame written into the ring; from its arrival to its
  // answer seen in the ring; from its answer seen to sendmmsg returned.
  intake_ns,
  to_answer_ns,
  send_ns,
  counter_count
};
const char *counter_name(uint32_t counter);

// The two threads between a socket and a ring. The ring (cudaq_rt_bridge) and the socket belong
// to the caller and must outlive the pump.
class Pump {
public:
  // threads: 1, one thread that receives and sends in turn; 2, a receiving and a sending thread.
  // cpu >= 0: the threads run on CPU cpu (the receiving or only one) and cpu + 1 (the sending).
  Pump(const cudaq_rt_bridge &ring, int fd, bool spin, uint32_t threads = 1, int cpu = -1);
  ~Pump();
  Pump(const Pump &) = delete;
  Pump &operator=(const Pump &) = delete;

  // Starts both threads, on their CPUs where the Pump has them. Also after drain/stop: the ring
  // positions carry on.
  bool start(std::string &error);
  // Takes no more datagrams (those already in the socket's buffer are still taken), then waits up
  // to timeout_s until every request taken was answered. False: time ran out.
  bool drain(double timeout_s);
  // As drain, but receives nothing more at all: datagrams wait in the socket until start().
  bool hold(double timeout_s);
  // Ends both threads; responses already in the ring are still sent (a second at most).
  void stop();

  uint32_t counters(cudaq_rt_bridge_counter *out, uint32_t capacity) const;
  void add_latency(uint64_t *buckets) const;

private:
  struct Intake;
  struct Outlet;
  // Takes the datagrams waiting, at most one per free slot (sleeping in recvmmsg for the first
  // where `wait`), writes the requests into the ring and answers the rest: how many datagrams
  // it took, or -1 once the intake is closed and the socket has nothing more.
  int receive(Intake &in, bool wait);
  // Sends every response that is ready: how many, or -1 where the ring could not give one back.
  int send(Outlet &out);
  // After stop(): whether the sending side is done (everything taken was answered, or a second
  // has gone by since `stop_seen`, which the first call sets).
  bool finished_after_stop(std::chrono::steady_clock::time_point &stop_seen);
  void idle_until_woken();
  void rx_loop();
  void tx_loop();
  void serve_loop(); // threads=1
  void wake_tx() {
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_one();
  }
  void count(Counter c, uint64_t n = 1) { counters_[c].fetch_add(n, std::memory_order_relaxed); }

  int fd_;
  bool spin_, one_thread_;
  int cpu_;
  uint32_t slots_, slot_size_;
  cudaq_rt_bridge rx_ring_, tx_ring_;
  std::atomic<uint64_t> sent_{0}, received_{0}; // rx_ring_.sent and tx_ring_.received, published
  std::atomic<uint64_t> answered_{0};           // responses sent (or failed) for the GPU's answers
  std::atomic<bool> intake_open_{false}, rx_done_{true}, stopping_{false}, holding_{false};
  std::atomic<uint32_t> wake_{0};         // bumped to wake a sleeping TX thread (wait=block)
  std::vector<sockaddr_storage> senders_; // per slot
  std::vector<socklen_t> sender_lengths_;
  std::vector<uint64_t> arrivals_ns_; // per slot
  std::array<std::atomic<uint64_t>, counter_count> counters_{};
  std::vector<std::atomic<uint64_t>> latency_;
  std::thread rx_, tx_;
};

} // namespace cudaq_rt::udp

#endif // CUDAQ_RT_UDP_HOST_H
