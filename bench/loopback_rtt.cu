// Where a loopback round trip spends its time: the real loopback bridge (host side: loopback.cpp
// linked in; device side: loopback_device.cu included here) driven by the unified dispatch
// kernel's loop with clock64() stamps between the stages of every request (serve_frame spelled
// out), plus a bare "floor" kernel (one 16-byte cell each way, K loads per poll on distinct
// lines) that shows what the transport alone costs. Build-time switches (loopback_ring.h's
// knobs) make the variants; bench/loopback_rtt.sh builds them and prints a table; results and
// what they showed: bench/loopback_rtt.md.
//
//   loopback_rtt [--mode trace|floor] --label NAME [--config BRIDGE_CONFIG] [--wc 0|1]
//                [--loads K] [--latency N] [--throughput N]
//
// Prints one line starting with "ROW" (and, for trace, one "STAGES" line). Asserts only that
// every response is right; exit 1 otherwise.
#include "cudaq_rt/bridge.h"
#include "cudaq_rt/dispatch_framing.cuh"
#include "cudaq_rt/wire.h"

#include "loopback_device.cu"

#include <cuda_runtime.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" const cudaq_rt_bridge_ops *cudaq_rt_bridge_entry(void);

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t rc, const char *what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "loopback_rtt: error: %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

double pct(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(p * double(v.size() - 1))];
}

// The example application's echo handler, byte by byte as it is written there.
__device__ int echo(const void *input, void *output, uint32_t arg_len, uint32_t max_result_len,
                    uint32_t *result_len) {
  if (max_result_len < arg_len)
    return 2;
  for (uint32_t i = 0; i < arg_len; ++i)
    static_cast<uint8_t *>(output)[i] = static_cast<const uint8_t *>(input)[i];
  *result_len = arg_len;
  return 0;
}
__device__ cudaq_rt_handler_fn echo_ptr = echo;

struct Stamps {
  unsigned long long t[6]; // poll entered, request in hand, handler found, handler done, served,
                           // published
};

// The unified kernel's loop, with a stamp between stages (serve_frame spelled out).
__global__ void trace_dispatch(cudaq_rt_dispatch_params p, Stamps *trace, uint32_t cap,
                               unsigned long long *clocks) {
  __align__(16) unsigned char storage[CUDAQ_RT_SESSION_STORAGE_SIZE];
  void *session = cudaq_dev_enter_kernel(storage, p.transport_ctx, p.shutdown_flag);
  if (!session)
    return;
  unsigned long long gt;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
  clocks[0] = clock64();
  clocks[1] = gt;
  cudaq_rt_dispatch_counters counters = cudaq_rt_counters_load(p.stats);
  void *request = 0, *response = 0;
  for (uint32_t i = 0;; ++i) {
    Stamps st;
    st.t[0] = clock64();
    if (cudaq_dev_rx_poll(session, &request, &response) != CUDAQ_DEV_RX_READY)
      break;
    st.t[1] = clock64();
    const cudaq_rt_request_header *req = (const cudaq_rt_request_header *)request;
    const uint32_t request_id = req->request_id;
    const uint64_t ptp = req->ptp_timestamp;
    uint32_t result_len = 0;
    int status = cudaq_rt_validate_request(req, p.slot_size);
    cudaq_rt_handler_fn handler = 0;
    if (status == 0) {
      handler = cudaq_rt_find_handler(p.function_table, p.num_functions, req->function_id);
      if (!handler)
        status = CUDAQ_RT_STATUS_UNKNOWN_FUNCTION;
    }
    st.t[2] = clock64();
    if (handler)
      status = cudaq_rt_call_handler(handler, request, response, p.slot_size, &result_len);
    st.t[3] = clock64();
    cudaq_rt_write_response_header((cudaq_rt_response_header *)response, status, result_len,
                                   request_id, ptp);
    cudaq_rt_counters_record(&counters, status);
    st.t[4] = clock64();
    cudaq_dev_tx_publish(session, response);
    cudaq_rt_counters_store(p.stats, &counters);
    st.t[5] = clock64();
    if (i < cap)
      trace[i] = st;
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(gt));
  clocks[2] = clock64();
  clocks[3] = gt;
}

// The transport alone: one 16-byte cell each way; `loads` cells read per poll (the first is the
// request, the others sit on other 128-byte lines), plus the shutdown flag.
__global__ void floor_kernel(const volatile uint4 *req, volatile uint4 *resp, int loads,
                             volatile int *shutdown, unsigned *sink) {
  uint32_t seq = 1, acc = 0;
  for (;;) {
    uint4 d[40];
    const uint4 v = load_cell(req);
#pragma unroll
    for (int i = 0; i < 40; ++i)
      if (i + 1 < loads)
        d[i] = load_cell(req + 8 * (i + 1));
    const int sd = *shutdown;
#pragma unroll
    for (int i = 0; i < 40; ++i)
      if (i + 1 < loads)
        acc ^= d[i].x;
    if (sd)
      break;
    if (v.x == seq && v.z == seq) {
      store_cell(resp, make_uint4(seq, v.y, seq, v.w));
      ++seq;
    }
  }
  *sink = acc;
}

void store_half(volatile uint64_t *p, uint32_t stamp, uint32_t data) {
  std::atomic_ref<uint64_t>(*const_cast<uint64_t *>(p))
      .store(uint64_t(stamp) | (uint64_t(data) << 32), std::memory_order_release);
}
uint64_t load_half(const volatile uint64_t *p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t *>(p)).load(std::memory_order_acquire);
}

int run_floor(const std::string &label, bool wc, int loads, int n) {
  void *reqh = nullptr, *resph = nullptr, *ctl = nullptr;
  check(cudaHostAlloc(&reqh, 1 << 16, cudaHostAllocMapped | (wc ? cudaHostAllocWriteCombined : 0)),
        "cudaHostAlloc");
  check(cudaHostAlloc(&resph, 4096, cudaHostAllocMapped), "cudaHostAlloc");
  check(cudaHostAlloc(&ctl, 4096, cudaHostAllocMapped), "cudaHostAlloc");
  std::memset(reqh, 0, 1 << 16);
  std::memset(resph, 0, 4096);
  std::memset(ctl, 0, 4096);
  _mm_sfence();
  void *reqd, *respd, *ctld;
  check(cudaHostGetDevicePointer(&reqd, reqh, 0), "ptr");
  check(cudaHostGetDevicePointer(&respd, resph, 0), "ptr");
  check(cudaHostGetDevicePointer(&ctld, ctl, 0), "ptr");
  unsigned *sink;
  check(cudaMalloc(&sink, 4), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  floor_kernel<<<1, 1, 0, stream>>>((const volatile uint4 *)reqd, (volatile uint4 *)respd, loads,
                                    (volatile int *)ctld, sink);
  check(cudaGetLastError(), "launch");
  auto *rq = static_cast<volatile uint64_t *>(reqh);
  auto *rs = static_cast<volatile uint64_t *>(resph);
  std::vector<double> us;
  bool ok = true;
  for (int i = 0; i < n + 1000; ++i) {
    const uint32_t seq = uint32_t(i + 1);
    const auto t0 = Clock::now();
    store_half(rq + 1, seq, uint32_t(i));
    store_half(rq, seq, uint32_t(i));
    _mm_sfence();
    const auto limit = t0 + std::chrono::seconds(5);
    for (uint64_t polls = 0;; ++polls) {
      const uint64_t a = load_half(rs), b = load_half(rs + 1);
      if (uint32_t(a) == seq && uint32_t(b) == seq) {
        ok &= (a >> 32) == uint32_t(i) && (b >> 32) == uint32_t(i);
        break;
      }
      if ((polls & 0xffff) == 0 && Clock::now() > limit) {
        std::fprintf(stderr, "loopback_rtt: floor: no answer\n");
        std::exit(1);
      }
    }
    const auto t1 = Clock::now();
    if (i >= 1000)
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::atomic_ref<int>(*static_cast<int *>(ctl)).store(1);
  check(cudaStreamSynchronize(stream), "floor kernel");
  std::printf("ROW %-28s lat med %6.2f p99 %6.2f min %6.2f us | tput      - | %s\n", label.c_str(),
              pct(us, 0.5), pct(us, 0.99), pct(us, 0), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

std::vector<uint8_t> echo_request(uint32_t id, uint64_t payload) {
  std::vector<uint8_t> f(32);
  cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, cudaq_rt_function_id("echo"), 8, id,
                            0x1122334455667788ull + id};
  std::memcpy(f.data(), &h, 24);
  std::memcpy(f.data() + 24, &payload, 8);
  return f;
}

int run_dispatch(const std::string &label, const std::string &config, int latency_n,
                 int throughput_n) {
  const bool trace = true;
  const cudaq_rt_bridge_ops *ops = cudaq_rt_bridge_entry();
  cudaq_rt_bridge *bridge = nullptr;
  if (ops->create(config.c_str(), &bridge) != CUDAQ_RT_BRIDGE_OK) {
    std::fprintf(stderr, "loopback_rtt: error: create: %s\n", ops->last_error(nullptr));
    return 1;
  }
  const uint32_t slot_size = ops->slot_size(bridge), slots = ops->num_slots(bridge);
  cudaq_rt_handler_fn h;
  check(cudaMemcpyFromSymbol(&h, echo_ptr, sizeof h), "reading echo_ptr");
  cudaq_rt_function_entry table_host[1] = {{cudaq_rt_function_id("echo"), 0, h}};
  cudaq_rt_function_entry *table;
  check(cudaMalloc(&table, sizeof table_host), "cudaMalloc");
  check(cudaMemcpy(table, table_host, sizeof table_host, cudaMemcpyHostToDevice), "table");
  void *mapped, *mapped_d;
  check(cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped), "cudaHostAlloc");
  std::memset(mapped, 0, 4096);
  check(cudaHostGetDevicePointer(&mapped_d, mapped, 0), "ptr");
  cudaq_rt_dispatch_params p{};
  p.transport_ctx = ops->device_context(bridge);
  p.slot_size = slot_size;
  p.num_functions = 1;
  p.function_table = table;
  p.shutdown_flag = static_cast<volatile int *>(mapped_d);
  p.stats = reinterpret_cast<cudaq_rt_dispatch_stats *>(static_cast<char *>(mapped_d) + 64);
  const uint32_t cap = uint32_t(latency_n + 1000 + throughput_n);
  Stamps *stamps = nullptr;
  unsigned long long *clocks = nullptr;
  check(cudaMalloc(&stamps, sizeof(Stamps) * cap), "cudaMalloc");
  check(cudaMalloc(&clocks, 4 * sizeof(unsigned long long)), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  trace_dispatch<<<1, 1, 0, stream>>>(p, stamps, cap, clocks);
  check(cudaGetLastError(), "launch");

  std::vector<uint8_t> buffer(slot_size);
  auto receive = [&]() -> size_t {
    const auto limit = Clock::now() + std::chrono::seconds(5);
    for (uint64_t polls = 0;; ++polls) {
      size_t size = 0;
      const auto rc = ops->receive(bridge, buffer.data(), buffer.size(), &size);
      if (rc == CUDAQ_RT_BRIDGE_OK)
        return size;
      if (rc != CUDAQ_RT_BRIDGE_AGAIN) {
        std::fprintf(stderr, "loopback_rtt: error: %s\n", ops->last_error(bridge));
        std::exit(1);
      }
      if ((polls & 0xffff) == 0 && Clock::now() > limit) {
        std::fprintf(stderr, "loopback_rtt: error: no response within 5 s\n");
        std::exit(1);
      }
    }
  };
  auto send = [&](const std::vector<uint8_t> &f) {
    for (;;) {
      const auto rc = ops->send(bridge, f.data(), f.size());
      if (rc == CUDAQ_RT_BRIDGE_OK)
        return true;
      if (rc != CUDAQ_RT_BRIDGE_AGAIN) {
        std::fprintf(stderr, "loopback_rtt: error: %s\n", ops->last_error(bridge));
        std::exit(1);
      }
      return false;
    }
  };

  bool ok = true;
  uint32_t id = 1;
  std::vector<double> us, send_us;
  for (int i = -1000; i < latency_n; ++i) {
    const uint64_t payload = 0x0123456789abcdefull ^ uint64_t(i);
    auto f = echo_request(id, payload);
    const auto t0 = Clock::now();
    while (!send(f)) {
    }
    const auto ts = Clock::now();
    const size_t n = receive();
    const auto t1 = Clock::now();
    cudaq_rt_response_header r;
    std::memcpy(&r, buffer.data(), 24);
    ok &= n == 32 && r.status == 0 && r.request_id == id && r.result_len == 8 &&
          std::memcmp(buffer.data() + 24, &payload, 8) == 0;
    ++id;
    if (i >= 0) {
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      send_us.push_back(std::chrono::duration<double, std::micro>(ts - t0).count());
    }
  }
  // Throughput: keep the ring full, as the GPU test does.
  uint32_t sent = 0, received = 0;
  const uint32_t first = id;
  const auto t0 = Clock::now();
  while (received < uint32_t(throughput_n)) {
    while (sent < uint32_t(throughput_n) && sent - received < slots) {
      if (!send(echo_request(id, 42)))
        break;
      ++sent;
      ++id;
    }
    receive();
    cudaq_rt_response_header r;
    std::memcpy(&r, buffer.data(), 24);
    ok &= r.request_id == first + received && r.status == 0;
    ++received;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::atomic_ref<int>(*static_cast<int *>(mapped)).store(1);
  check(cudaStreamSynchronize(stream), "dispatch kernel");
  const auto *stats =
      reinterpret_cast<const cudaq_rt_dispatch_stats *>(static_cast<char *>(mapped) + 64);
  ok &= stats->requests == uint64_t(latency_n + 1000 + throughput_n);

  std::printf(
      "ROW %-28s lat med %6.2f p99 %6.2f min %6.2f us | tput %5.2f M/s | send %.2f us | %s\n",
      label.c_str(), pct(us, 0.5), pct(us, 0.99), pct(us, 0), throughput_n / secs / 1e6,
      pct(send_us, 0.5), ok ? "ok" : "WRONG");
  if (trace) {
    std::vector<Stamps> st(cap);
    unsigned long long c[4];
    check(cudaMemcpy(st.data(), stamps, sizeof(Stamps) * cap, cudaMemcpyDeviceToHost), "trace");
    check(cudaMemcpy(c, clocks, sizeof c, cudaMemcpyDeviceToHost), "clocks");
    const double ghz = double(c[2] - c[0]) / double(c[3] - c[1]); // cycles per ns
    auto stage = [&](size_t from, size_t to, int a, int b) {
      std::vector<double> v;
      for (size_t i = from; i < to; ++i)
        v.push_back(double(st[i].t[b] - st[i].t[a]) / ghz);
      return v;
    };
    const size_t l0 = 1000, l1 = size_t(latency_n) + 1000, t1 = cap;
    // Per request in the throughput phase: from one poll's entry to the next.
    std::vector<double> per, fetches;
    for (size_t i = l1 + 100; i + 1 < t1; ++i) {
      per.push_back(double(st[i + 1].t[0] - st[i].t[0]) / ghz);
      const double w = double(st[i].t[1] - st[i].t[0]) / ghz;
      if (w > 300)
        fetches.push_back(w);
    }
    std::printf(
        "STAGES %-25s SM %.2f GHz | latency run, ns median: lookup %.0f, handler %.0f, "
        "header %.0f, publish+counters %.0f, after-ready total %.0f | throughput run: "
        "%.0f ns per request, probe (when one was needed) %.0f ns, %.2f requests per probe\n",
        label.c_str(), ghz, pct(stage(l0, l1, 1, 2), 0.5), pct(stage(l0, l1, 2, 3), 0.5),
        pct(stage(l0, l1, 3, 4), 0.5), pct(stage(l0, l1, 4, 5), 0.5), pct(stage(l0, l1, 1, 5), 0.5),
        pct(per, 0.5), pct(fetches, 0.5),
        fetches.empty() ? 0.0 : double(per.size()) / double(fetches.size()));
  }
  ops->destroy(bridge);
  return ok ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);
  std::string mode = "trace", label = "?", config = "slots=64,slot_size=1024";
  int wc = 1, loads = 1, latency_n = 20000, throughput_n = 400000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--mode")
      mode = v;
    else if (a == "--config")
      config = v;
    else if (a == "--label")
      label = v;
    else if (a == "--wc")
      wc = std::atoi(v.c_str());
    else if (a == "--loads")
      loads = std::atoi(v.c_str());
    else if (a == "--latency")
      latency_n = std::atoi(v.c_str());
    else if (a == "--throughput")
      throughput_n = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "loopback_rtt: error: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "context");
  if (mode == "floor")
    return run_floor(label, wc != 0, loads, latency_n);
  return run_dispatch(label, config, latency_n, throughput_n);
}
