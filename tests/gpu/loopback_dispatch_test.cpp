// End-to-end test of the device side: the unified dispatch kernel (embedded in the runtime), the
// loopback bridge's hooks and the example application's handlers, linked into one module,
// loaded, launched as a persistent kernel and driven through the loopback ring. Checks every
// example handler, the protocol errors (and that the server keeps serving after them), the
// counters, then measures round-trip latency and throughput; then that requests sent just before
// shutdown are all answered, and that a second kernel launched on the same bridge instance goes
// on where the first stopped (answers and counters).
//
//   loopback_dispatch_test [--bridge NAME|PATH] (--package DIR | --cubin FILE)
//                          [--latency-requests N]
//
// --package takes the cubin cudaq-rt-link stored for this GPU's arch (read through the package
// reader, so its digest is verified); --cubin loads a cubin file as it is. Without a GPU the
// test exits 77 (ctest: skipped).
//
// With the loopback bridge, the test also writes frames that send() refuses straight into the
// ring (loopback_host.h's write_request(): send() without its checks), to see what the device
// side answers to them.
#include "cudaq_rt/bridge.h"
#include "cudaq_rt/builtin_dispatcher.h"
#include "cudaq_rt/dispatch.h"
#include "cudaq_rt/package.h"
#include "cudaq_rt/wire.h"
#include "loopback_host.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<uint8_t>;

const char *const kHandlers[] = {"sum_i32", "axpy_f32", "parity", "echo"};

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "loopback_dispatch_test: error: %s\n", message.c_str());
  std::exit(1);
}

Bytes read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    fail("'" + path + "': cannot open");
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// The driver API through cudart's entry-point lookup, so that the test links no libcuda and can
// start (and skip) on a machine without a driver.
struct Driver {
  decltype(&cuGetErrorString) getErrorString;
  decltype(&cuLibraryLoadData) libraryLoadData;
  decltype(&cuLibraryUnload) libraryUnload;
  decltype(&cuLibraryGetKernel) libraryGetKernel;
  decltype(&cuLibraryGetGlobal) libraryGetGlobal;
  decltype(&cuKernelGetFunction) kernelGetFunction;
  decltype(&cuMemcpyDtoH) memcpyDtoH;
  decltype(&cuLaunchKernel) launchKernel;
} cu;

template <class F> void resolve(F &fn, const char *name) {
  void *p = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p)
    fail(std::string("the driver has no ") + name);
  fn = reinterpret_cast<F>(p);
}

void resolve_driver() {
  resolve(cu.getErrorString, "cuGetErrorString");
  resolve(cu.libraryLoadData, "cuLibraryLoadData");
  resolve(cu.libraryUnload, "cuLibraryUnload");
  resolve(cu.libraryGetKernel, "cuLibraryGetKernel");
  resolve(cu.libraryGetGlobal, "cuLibraryGetGlobal");
  resolve(cu.kernelGetFunction, "cuKernelGetFunction");
  resolve(cu.memcpyDtoH, "cuMemcpyDtoH");
  resolve(cu.launchKernel, "cuLaunchKernel");
}

void check_cu(CUresult rc, const char *what) {
  if (rc != CUDA_SUCCESS) {
    const char *s = nullptr;
    cu.getErrorString(rc, &s);
    fail(std::string(what) + ": " + (s ? s : "unknown driver error"));
  }
}

void check_cuda(cudaError_t rc, const char *what) {
  if (rc != cudaSuccess)
    fail(std::string(what) + ": " + cudaGetErrorString(rc));
}

Bytes request(uint32_t function_id, const void *payload, uint32_t len, uint32_t request_id,
              uint32_t magic = CUDAQ_RT_REQUEST_MAGIC, uint32_t claimed_len = UINT32_MAX) {
  cudaq_rt_request_header h{magic, function_id, claimed_len == UINT32_MAX ? len : claimed_len,
                            request_id, 0x1122334455667788ull + request_id};
  Bytes frame(sizeof h + len);
  std::memcpy(frame.data(), &h, sizeof h);
  if (len)
    std::memcpy(frame.data() + sizeof h, payload, len);
  return frame;
}

struct Server {
  cudaq_rt::Bridge &bridge;
  cudaStream_t stream;
  Bytes buffer;

  void send(const Bytes &frame) {
    for (;;) {
      auto sent = bridge.send(frame);
      if (!sent)
        fail(sent.error().str());
      if (*sent)
        return;
    }
  }

  // The next response; fails if the kernel died or nothing came for 10 s.
  Bytes receive() {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (uint64_t polls = 0;; ++polls) {
      auto got = bridge.receive(buffer);
      if (!got)
        fail(got.error().str());
      if (*got)
        return Bytes(buffer.begin(), buffer.begin() + long(**got));
      if ((polls & 0xfff) == 0) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q != cudaErrorNotReady)
          fail(std::string("the dispatch kernel stopped: ") + cudaGetErrorString(q));
        if (Clock::now() > deadline)
          fail("no response within 10 s");
      }
    }
  }

  Bytes call(const Bytes &frame) {
    send(frame);
    return receive();
  }
};

int failures = 0;

void expect(bool ok, const std::string &what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

cudaq_rt_response_header header_of(const Bytes &r) {
  cudaq_rt_response_header h{};
  if (r.size() >= sizeof h)
    std::memcpy(&h, r.data(), sizeof h);
  return h;
}

void expect_response(const Bytes &r, int32_t status, uint32_t request_id, const Bytes &result,
                     const std::string &what) {
  auto h = header_of(r);
  expect(r.size() == sizeof h + h.result_len, what + ": frame size matches result_len");
  expect(h.magic == CUDAQ_RT_RESPONSE_MAGIC, what + ": response magic");
  expect(h.status == status,
         what + ": status " + std::to_string(h.status) + ", expected " + std::to_string(status));
  expect(h.request_id == request_id, what + ": request_id echoed");
  expect(h.ptp_timestamp == 0x1122334455667788ull + request_id, what + ": timestamp echoed");
  expect(Bytes(r.begin() + sizeof h, r.end()) == result, what + ": result bytes");
}

template <class T> Bytes bytes_of(const std::vector<T> &v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[size_t(p * double(v.size() - 1))];
}

} // namespace

int main(int argc, char **argv) {
  // BRIEF §4: a module load while the persistent kernel runs can deadlock. Load everything
  // before launch, eagerly.
  setenv("CUDA_MODULE_LOADING", "EAGER", 1);

  std::string bridge_name = "loopback", cubin_path, package_path;
  int latency_requests = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "loopback_dispatch_test: error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--bridge")
      bridge_name = value();
    else if (a == "--cubin")
      cubin_path = value();
    else if (a == "--package")
      package_path = value();
    else if (a == "--latency-requests")
      latency_requests = std::stoi(value());
    else {
      std::fprintf(stderr, "loopback_dispatch_test: error: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (cubin_path.empty() == package_path.empty()) {
    std::fprintf(stderr, "loopback_dispatch_test: error: give one of --package or --cubin\n");
    return 2;
  }

  auto library = cudaq_rt::BridgeLibrary::open(bridge_name);
  if (!library)
    fail(library.error().str());

  // Skipped only where there is no GPU: no device, or no driver installed at all (cudart then
  // reports an "insufficient" driver, and cudaDriverGetVersion gives 0: the CPU-only CI
  // machines). Any other error, a driver too old for this runtime included, is on a machine that
  // may well have a GPU: a failure worth seeing.
  int devices = 0, driver = 0;
  cudaError_t rc = cudaGetDeviceCount(&devices);
  const bool no_driver = rc == cudaErrorInsufficientDriver &&
                         cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
  if (rc == cudaErrorNoDevice || no_driver || (rc == cudaSuccess && devices == 0)) {
    std::printf("skipped: no CUDA device (%s)\n", no_driver           ? "no CUDA driver installed"
                                                  : rc != cudaSuccess ? cudaGetErrorString(rc)
                                                                      : "device count is 0");
    return 77;
  }
  check_cuda(rc, "cudaGetDeviceCount");
  check_cuda(cudaSetDevice(0), "cudaSetDevice");
  check_cuda(cudaFree(nullptr), "initialising the primary context");
  resolve_driver();
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const unsigned arch = unsigned(prop.major * 10 + prop.minor);
  std::printf("device: %s (sm_%u)\n", prop.name, arch);

  Bytes cubin;
  if (!package_path.empty()) {
    auto pkg = cudaq_rt::Package::open(package_path);
    if (!pkg)
      fail(pkg.error().str());
    const std::string want = "sm_" + std::to_string(arch);
    auto rec = std::find_if(pkg->manifest().links.begin(), pkg->manifest().links.end(),
                            [&](const cudaq_rt::LinkRecord &l) { return l.arch == want; });
    if (rec == pkg->manifest().links.end())
      fail("'" + package_path + "': no cubin linked for " + want + " (cudaq-rt-link --arch " +
           want + ")");
    auto bytes = pkg->read_blob(rec->cubin);
    if (!bytes)
      fail(bytes.error().str());
    cubin.assign(bytes->begin(), bytes->end());
    std::printf("cubin: %s from %s (%zu B, %s)\n", want.c_str(), package_path.c_str(), cubin.size(),
                rec->cubin.str().c_str());
  } else {
    cubin = read_file(cubin_path);
  }

  // Load and resolve everything before the persistent kernel starts.
  CUlibrary lib;
  check_cu(cu.libraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
           "cuLibraryLoadData");
  CUkernel kernel;
  check_cu(cu.libraryGetKernel(&kernel, lib, cudaq_rt::builtin_dispatcher_kernel),
           "cuLibraryGetKernel(cudaq_rt_unified_dispatch)");
  CUfunction function;
  check_cu(cu.kernelGetFunction(&function, kernel), "cuKernelGetFunction");
  std::vector<cudaq_rt_function_entry> table;
  for (const char *name : kHandlers) {
    CUdeviceptr global;
    size_t size = 0;
    const std::string symbol = std::string(CUDAQ_RT_HANDLER_SYMBOL_PREFIX) + name;
    check_cu(cu.libraryGetGlobal(&global, &size, lib, symbol.c_str()), symbol.c_str());
    if (size != sizeof(cudaq_rt_handler_fn))
      fail(symbol + " is " + std::to_string(size) + " bytes, not a function pointer");
    cudaq_rt_function_entry e{cudaq_rt_function_id(name), 0, nullptr};
    check_cu(cu.memcpyDtoH(&e.handler, global, sizeof e.handler), "reading a handler pointer");
    table.push_back(e);
  }
  std::sort(table.begin(), table.end(),
            [](const auto &a, const auto &b) { return a.function_id < b.function_id; });
  cudaq_rt_function_entry *device_table = nullptr;
  check_cuda(cudaMalloc(&device_table, table.size() * sizeof table[0]), "cudaMalloc(table)");
  check_cuda(cudaMemcpy(device_table, table.data(), table.size() * sizeof table[0],
                        cudaMemcpyHostToDevice),
             "copying the function table");

  auto bridge = library->create("slots=64,slot_size=1024");
  if (!bridge)
    fail(bridge.error().str());
  const uint32_t slot_size = bridge->slot_size();

  void *mapped = nullptr;
  check_cuda(cudaHostAlloc(&mapped, 4096, cudaHostAllocMapped), "cudaHostAlloc(control)");
  std::memset(mapped, 0, 4096);
  auto *shutdown = static_cast<int *>(mapped);
  auto *stats = reinterpret_cast<cudaq_rt_dispatch_stats *>(static_cast<char *>(mapped) + 64);
  void *device_mapped = nullptr;
  check_cuda(cudaHostGetDevicePointer(&device_mapped, mapped, 0), "cudaHostGetDevicePointer");

  cudaq_rt_dispatch_params params{};
  params.transport_ctx = bridge->device_context();
  params.slot_size = slot_size;
  params.num_functions = uint32_t(table.size());
  params.function_table = device_table;
  params.shutdown_flag = static_cast<volatile int *>(device_mapped);
  params.stats =
      reinterpret_cast<cudaq_rt_dispatch_stats *>(static_cast<char *>(device_mapped) + 64);

  cudaStream_t stream;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void *args[] = {&params};
  auto launch = [&] {
    check_cu(cu.launchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr),
             "launching the dispatch kernel");
  };
  // Stops the kernel through mapped memory (never a copy that could queue behind it) and waits.
  auto stop = [&] {
    std::atomic_ref<int>(*shutdown).store(1, std::memory_order_release);
    check_cuda(cudaStreamSynchronize(stream), "waiting for the dispatch kernel to stop");
  };
  launch();

  Server server{*bridge, stream, Bytes(slot_size)};
  uint32_t id = 1;
  uint64_t expected_requests = 0, expected_ok = 0, expected_handler_errors = 0,
           expected_protocol_errors = 0;
  auto call = [&](const Bytes &frame) {
    ++expected_requests;
    return server.call(frame);
  };

  { // sum_i32
    std::vector<int32_t> v = {1, 2, 3, -10, 1000000};
    uint32_t rid = id++;
    auto r = call(request(cudaq_rt_function_id("sum_i32"), v.data(), 20, rid));
    expect_response(r, 0, rid, bytes_of(std::vector<int64_t>{999996}), "sum_i32");
    ++expected_ok;
  }
  { // axpy_f32: 2 * x + y
    std::vector<float> in = {2.0f, 1.0f, 2.0f, 3.0f, 10.0f, 20.0f, 30.0f};
    uint32_t rid = id++;
    auto r = call(request(cudaq_rt_function_id("axpy_f32"), in.data(), 28, rid));
    expect_response(r, 0, rid, bytes_of(std::vector<float>{12.0f, 24.0f, 36.0f}), "axpy_f32");
    ++expected_ok;
  }
  { // parity, with a payload long enough to need several fetch batches
    Bytes in(300);
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = uint8_t(i * 37 + 11);
    Bytes want(in.size() + 4);
    uint32_t total = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      want[i] = uint8_t(__builtin_popcount(in[i]) & 1);
      total += uint32_t(__builtin_popcount(in[i]));
    }
    std::memcpy(want.data() + in.size(), &total, 4);
    uint32_t rid = id++;
    auto r = call(request(cudaq_rt_function_id("parity"), in.data(), uint32_t(in.size()), rid));
    expect_response(r, 0, rid, want, "parity");
    ++expected_ok;
  }
  { // echo, at every payload size up to the slot's limit in a few steps
    for (uint32_t len : {0u, 1u, 7u, 8u, 9u, 100u, slot_size - 24}) {
      Bytes in(len);
      for (uint32_t i = 0; i < len; ++i)
        in[i] = uint8_t(i ^ 0x5a);
      uint32_t rid = id++;
      auto r = call(request(cudaq_rt_function_id("echo"), in.data(), len, rid));
      expect_response(r, 0, rid, in, "echo " + std::to_string(len) + " bytes");
      ++expected_ok;
    }
  }
  { // a handler-defined error: sum_i32 wants a multiple of 4 bytes
    uint32_t rid = id++;
    uint8_t three[3] = {1, 2, 3};
    auto r = call(request(cudaq_rt_function_id("sum_i32"), three, 3, rid));
    expect_response(r, 1, rid, {}, "sum_i32 with 3 bytes");
    ++expected_handler_errors;
  }
  { // protocol errors, each followed by a good request
    uint32_t rid = id++;
    auto r = call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, 0xdeadbeefu));
    expect_response(r, CUDAQ_RT_STATUS_BAD_MAGIC, rid, {}, "bad magic");
    rid = id++;
    r = call(request(cudaq_rt_function_id("no_such_handler"), "ab", 2, rid));
    expect_response(r, CUDAQ_RT_STATUS_UNKNOWN_FUNCTION, rid, {}, "unknown function");
    expected_protocol_errors += 2;
    rid = id++;
    r = call(request(cudaq_rt_function_id("echo"), "still here", 10, rid));
    expect_response(r, 0, rid, Bytes{'s', 't', 'i', 'l', 'l', ' ', 'h', 'e', 'r', 'e'},
                    "echo after protocol errors");
    ++expected_ok;
  }
  { // A frame that is not whole (arg_len != size - 24): send() refuses it, whichever way it is off
    // (bridge.h), and queues nothing.
    for (uint32_t claimed : {100u, 1u, slot_size - 23}) {
      auto sent = bridge->send(
          request(cudaq_rt_function_id("echo"), "ab", 2, id, CUDAQ_RT_REQUEST_MAGIC, claimed));
      expect(!sent && sent.error().str().find("arg_len") != std::string::npos,
             "send refuses a 26-byte frame claiming arg_len " + std::to_string(claimed) + ": " +
                 (sent ? std::string("it was sent") : sent.error().str()));
      if (sent && *sent) { // take the answer it got, so that the checks below stay in step
        ++expected_requests;
        server.receive();
      }
    }
  }
  if (library->name() == "loopback") {
    // The device side of the same rule, with frames written to the ring raw. Before the fix, the
    // handler ran on the staging slot's stale bytes: echo answered with an earlier request's
    // payload. First fill the staging slot the short frame will land in with something to leak.
    cudaq_rt_bridge *raw = bridge->get();
    const uint32_t n = bridge->num_slots();
    auto raw_call = [&](const Bytes &frame) {
      ++expected_requests;
      while (cudaq_rt::loopback::write_request(raw, frame.data(), frame.size()) ==
             CUDAQ_RT_BRIDGE_AGAIN) {
      }
      return server.receive();
    };
    // Go round the ring once with long echoes, so that every staging frame holds payload.
    Bytes secret(400, 0xA5);
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t rid = id++;
      auto r = call(request(cudaq_rt_function_id("echo"), secret.data(), 400, rid));
      expect_response(r, 0, rid, secret, "echo 400 bytes (filling the staging frames)");
      ++expected_ok;
    }
    uint32_t rid = id++;
    auto r =
        raw_call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, CUDAQ_RT_REQUEST_MAGIC, 100));
    expect_response(r, CUDAQ_RT_STATUS_TRUNCATED, rid, {}, "26-byte frame claiming 100 bytes");
    rid = id++;
    r = raw_call(request(cudaq_rt_function_id("echo"), "ab", 2, rid, CUDAQ_RT_REQUEST_MAGIC,
                         slot_size - 23));
    expect_response(r, CUDAQ_RT_STATUS_TRUNCATED, rid, {},
                    "26-byte frame claiming more than a slot");
    rid = id++;
    Bytes headless = request(cudaq_rt_function_id("echo"), nullptr, 0, rid);
    headless.resize(16); // up to request_id: no ptp_timestamp
    r = raw_call(headless);
    auto h = header_of(r);
    expect(r.size() == 24 && h.magic == CUDAQ_RT_RESPONSE_MAGIC &&
               h.status == CUDAQ_RT_STATUS_TRUNCATED && h.result_len == 0 && h.request_id == rid &&
               h.ptp_timestamp == 0,
           "16-byte frame: truncated, its own request_id, a zero timestamp (status " +
               std::to_string(h.status) + ", timestamp " + std::to_string(h.ptp_timestamp) + ")");
    expected_protocol_errors += 3;
    rid = id++;
    r = call(request(cudaq_rt_function_id("echo"), "still here", 10, rid));
    expect_response(r, 0, rid, Bytes{'s', 't', 'i', 'l', 'l', ' ', 'h', 'e', 'r', 'e'},
                    "echo after truncated frames");
    ++expected_ok;
  } else {
    std::printf("not the loopback bridge: truncated frames on the device side not checked\n");
  }

  auto read_stats = [&] {
    cudaq_rt_dispatch_stats s;
    s.requests = std::atomic_ref<unsigned long long>(stats->requests).load();
    s.ok = std::atomic_ref<unsigned long long>(stats->ok).load();
    s.handler_errors = std::atomic_ref<unsigned long long>(stats->handler_errors).load();
    s.protocol_errors = std::atomic_ref<unsigned long long>(stats->protocol_errors).load();
    return s;
  };
  { // The counters are posted stores that may trail the last response by a moment.
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    cudaq_rt_dispatch_stats s = read_stats();
    while (s.requests != expected_requests && Clock::now() < deadline)
      s = read_stats();
    expect(s.requests == expected_requests, "stats.requests " + std::to_string(s.requests));
    expect(s.ok == expected_ok, "stats.ok " + std::to_string(s.ok));
    expect(s.handler_errors == expected_handler_errors,
           "stats.handler_errors " + std::to_string(s.handler_errors));
    expect(s.protocol_errors == expected_protocol_errors,
           "stats.protocol_errors " + std::to_string(s.protocol_errors));
  }

  { // Latency: one echo of 8 bytes at a time.
    const uint64_t payload = 0x0123456789abcdefull;
    std::vector<double> us;
    us.reserve(size_t(latency_requests));
    bool all_right = true;
    for (int i = -1000; i < latency_requests; ++i) {
      uint32_t rid = id++;
      Bytes frame = request(cudaq_rt_function_id("echo"), &payload, 8, rid);
      const auto t0 = Clock::now();
      Bytes r = call(frame);
      const auto t1 = Clock::now();
      auto h = header_of(r);
      all_right &= h.status == 0 && h.request_id == rid && r.size() == 32 &&
                   std::memcmp(r.data() + 24, &payload, 8) == 0;
      if (i >= 0)
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    expect(all_right, "every latency-run echo came back right");
    expected_ok += uint64_t(latency_requests + 1000);
    std::printf("latency: echo 8 B, %d sequential requests: median %.2f us, p99 %.2f us, "
                "min %.2f us\n",
                latency_requests, percentile(us, 0.5), percentile(us, 0.99), percentile(us, 0.0));
  }

  { // Throughput: keep the ring full.
    const uint32_t total = 400000, slots = bridge->num_slots();
    uint32_t sent = 0, received = 0, first_id = id;
    bool in_order = true;
    const uint64_t payload = 42;
    const auto t0 = Clock::now();
    while (received < total) {
      while (sent < total && sent - received < slots) {
        auto ok = bridge->send(request(cudaq_rt_function_id("echo"), &payload, 8, id));
        if (!ok)
          fail(ok.error().str());
        if (!*ok)
          break;
        ++sent;
        ++id;
        ++expected_requests;
        ++expected_ok;
      }
      Bytes r = server.receive();
      in_order &= header_of(r).request_id == first_id + received && header_of(r).status == 0;
      ++received;
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    expect(in_order, "throughput responses in order and ok");
    std::printf("throughput: %u echoes of 8 B with up to %u in flight: %.2f M requests/s\n", total,
                slots, total / s / 1e6);
  }

  // Echo `count` distinct payloads, all sent before anything is received; returns the frames.
  auto send_batch = [&](uint32_t count, const char *what) {
    std::vector<std::pair<uint32_t, Bytes>> batch;
    for (uint32_t i = 0; i < count; ++i) {
      Bytes in(1 + (i * 37) % 200);
      for (size_t j = 0; j < in.size(); ++j)
        in[j] = uint8_t(i * 7 + j);
      const uint32_t rid = id++;
      auto ok =
          bridge->send(request(cudaq_rt_function_id("echo"), in.data(), uint32_t(in.size()), rid));
      if (!ok || !*ok)
        fail(std::string(what) + ": send " + std::to_string(i) + " " +
             (ok ? "found the ring full" : ok.error().str()));
      batch.emplace_back(rid, std::move(in));
      ++expected_requests;
      ++expected_ok;
    }
    return batch;
  };

  { // Shutdown drains: a full ring of requests sent just before the flag is set is answered in
    // full (loopback_ring.h: every request sent before the flag gets its response). The kernel
    // has stopped by the time they are taken, so a missing one would never come.
    auto batch = send_batch(bridge->num_slots(), "before shutdown");
    stop();
    uint32_t answered = 0;
    for (auto &[rid, in] : batch) {
      auto got = bridge->receive(server.buffer);
      if (!got)
        fail(got.error().str());
      if (!*got)
        break;
      Bytes r(server.buffer.begin(), server.buffer.begin() + long(**got));
      expect_response(r, 0, rid, in, "request sent just before shutdown");
      ++answered;
    }
    std::printf("shutdown: %u of %zu requests sent just before the flag answered\n", answered,
                batch.size());
    // Fatal: the relaunched kernel would answer the rest, and every later check would be off.
    if (answered != batch.size())
      fail("requests sent just before shutdown went unanswered");
  }

  { // Relaunch on the same bridge instance: the kernel resumes at the ring position the last one
    // stopped at (wherever the host's counters are: not a multiple of the ring), and the counters
    // go on from the values in stats.
    std::atomic_ref<int>(*shutdown).store(0, std::memory_order_release);
    launch();
    for (int round = 0; round < 3; ++round) {
      auto batch = send_batch(bridge->num_slots() - 1, "after relaunch");
      for (auto &[rid, in] : batch)
        expect_response(server.receive(), 0, rid, in, "echo after relaunch");
    }
    std::vector<int32_t> v = {5, 6, 7};
    const uint32_t rid = id++;
    auto r = call(request(cudaq_rt_function_id("sum_i32"), v.data(), 12, rid));
    expect_response(r, 0, rid, bytes_of(std::vector<int64_t>{18}), "sum_i32 after relaunch");
    ++expected_ok;
  }

  stop();
  cudaq_rt_dispatch_stats s = read_stats(); // the kernel has ended: its stores have all landed
  std::printf("stats: requests %llu, ok %llu, handler errors %llu, protocol errors %llu\n",
              s.requests, s.ok, s.handler_errors, s.protocol_errors);
  expect(s.requests == expected_requests && s.ok == expected_ok &&
             s.handler_errors == expected_handler_errors &&
             s.protocol_errors == expected_protocol_errors,
         "final stats, across both launches: expected requests " +
             std::to_string(expected_requests) + ", ok " + std::to_string(expected_ok) +
             ", handler errors " + std::to_string(expected_handler_errors) + ", protocol errors " +
             std::to_string(expected_protocol_errors));
  check_cuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  check_cuda(cudaFreeHost(mapped), "cudaFreeHost");
  check_cuda(cudaFree(device_table), "cudaFree");
  check_cu(cu.libraryUnload(lib), "cuLibraryUnload");

  if (failures) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
