// jit_start_app: what a CUDA-Q realtime application does at process start, written with its own
// code only (the CUDA driver API and nvJitLink, nothing of cudaq-rt), so that
// bench/jit_start/jit_start.sh can time it with and without an nvJitLink interposer in LD_PRELOAD
// (bench/jit_start.md).
//
//   jit_start_app [--request I] [--input fatbin|any] [--no-check-all] FATBIN...
//   jit_start_app --link-only sm_XX [--input fatbin|any] FATBIN...
//
// The steps, each timed from t0 (CLOCK_MONOTONIC at main's entry):
//   1. a CUDA context: cuInit, the device's primary context (context_ms);
//   2. the device code: each FATBIN (a persistent kernel's unit, a function table's and the
//      handlers', relocatable LTO-IR) read from its file (read_ms);
//   3. the link, as CUDA-Q does it: nvJitLinkCreate(-arch=sm_<this GPU>, -lto), one
//      nvJitLinkAddData(NVJITLINK_INPUT_FATBIN) per file, nvJitLinkComplete, the linked cubin
//      (link_ms);
//   4. the load: cuLibraryLoadData, the kernel and its function in this context (load_ms: both,
//      since lazy loading may put the module's load in either);
//   5. the persistent kernel launched (one thread) on a non-blocking stream of its own;
//   6. one request through mapped pinned memory (jit_start_mailbox.h): handler I (default 0)
//      called through the table, its answer checked (first_response_ms = its arrival - t0).
// Then every handler is called once and checked (unless --no-check-all), the kernel is told to
// stop, and one JSON line is printed. Exit status 1 on any error or wrong answer, 2 on usage.
//
// --link-only sm_XX does steps 2 and 3 only, for that arch, and calls nothing of the CUDA driver:
// the link can be checked on a machine without a GPU (integration.jit_start_link).
//
// Where the environment has JIT_START_EXEC_REALTIME (bash's $EPOCHREALTIME just before exec),
// exec_to_main_ms is the time from then to main: the dynamic loader's share of the start, which
// grows with what LD_PRELOAD brings in.
#include "jit_start_mailbox.h"

#include <cuda.h>
#include <nvJitLink.h>

#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace {

constexpr double first_response_timeout_ms = 60'000;
constexpr double response_timeout_ms = 5'000;
constexpr double stop_timeout_ms = 5'000;

[[noreturn]] void fail(const char *format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("jit_start_app: error: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::exit(1);
}

double ms_since(const timespec &t0, clockid_t clock = CLOCK_MONOTONIC) {
  timespec t;
  clock_gettime(clock, &t);
  return (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
}

void check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS)
    return;
  const char *name = nullptr;
  cuGetErrorName(result, &name);
  fail("%s: %s (%d)", call, name ? name : "unknown error", static_cast<int>(result));
}
#define CU(call) check(call, #call)

struct Options {
  std::vector<std::string> inputs;
  std::string link_only_arch; // empty: the whole start on the GPU
  std::optional<uint32_t> request;
  nvJitLinkInputType input_type = NVJITLINK_INPUT_FATBIN;
  bool check_all = true;
};

[[noreturn]] void usage(const char *message) {
  std::fprintf(
      stderr,
      "jit_start_app: error: %s\n"
      "usage: jit_start_app [--request I] [--input fatbin|any] [--no-check-all] FATBIN...\n"
      "       jit_start_app --link-only sm_XX [--input fatbin|any] FATBIN...\n",
      message);
  std::exit(2);
}

Options parse_options(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--link-only") {
      options.link_only_arch = value();
      if (options.link_only_arch.rfind("sm_", 0) != 0)
        usage("--link-only takes an arch such as sm_90");
    } else if (arg == "--request") {
      std::string text = value();
      char *end = nullptr;
      unsigned long index = std::strtoul(text.c_str(), &end, 10);
      if (text.empty() || *end || index > UINT32_MAX)
        usage("--request takes a handler index");
      options.request = static_cast<uint32_t>(index);
    } else if (arg == "--input") {
      std::string type = value();
      if (type == "fatbin")
        options.input_type = NVJITLINK_INPUT_FATBIN;
      else if (type == "any")
        options.input_type = NVJITLINK_INPUT_ANY;
      else
        usage("--input takes fatbin or any");
    } else if (arg == "--no-check-all") {
      options.check_all = false;
    } else if (arg.rfind("--", 0) == 0) {
      usage(("unknown option " + arg).c_str());
    } else {
      options.inputs.push_back(arg);
    }
  }
  if (options.inputs.empty())
    usage("no device code given");
  return options;
}

struct Input {
  std::string name;
  std::vector<char> bytes;
};

std::vector<Input> read_inputs(const std::vector<std::string> &paths) {
  std::vector<Input> inputs;
  for (const std::string &path : paths) {
    std::ifstream file(path, std::ios::binary);
    if (!file)
      fail("cannot open '%s'", path.c_str());
    Input input{path.substr(path.find_last_of('/') + 1),
                std::vector<char>(std::istreambuf_iterator<char>(file), {})};
    if (input.bytes.empty())
      fail("'%s' is empty", path.c_str());
    inputs.push_back(std::move(input));
  }
  return inputs;
}

std::string nvjitlink_log(nvJitLinkHandle handle) {
  size_t size = 0;
  if (nvJitLinkGetErrorLogSize(handle, &size) != NVJITLINK_SUCCESS || size <= 1)
    return "";
  std::string log(size, '\0');
  nvJitLinkGetErrorLog(handle, log.data());
  log.resize(std::strlen(log.c_str()));
  return log;
}

void check_link(nvJitLinkResult result, nvJitLinkHandle handle, const char *step) {
  if (result == NVJITLINK_SUCCESS)
    return;
  std::string log = handle ? nvjitlink_log(handle) : "";
  fail("%s: nvJitLink error %d%s%s", step, static_cast<int>(result), log.empty() ? "" : "\n",
       log.c_str());
}

// CUDA-Q realtime's link: the arch of the GPU, LTO, every input a fatbin of its own.
std::vector<char> link(const std::vector<Input> &inputs, const std::string &arch,
                       nvJitLinkInputType type) {
  std::string arch_option = "-arch=" + arch;
  const char *options[] = {arch_option.c_str(), "-lto"};
  nvJitLinkHandle handle = nullptr;
  check_link(nvJitLinkCreate(&handle, 2, options), nullptr, "nvJitLinkCreate");
  for (const Input &input : inputs)
    check_link(
        nvJitLinkAddData(handle, type, input.bytes.data(), input.bytes.size(), input.name.c_str()),
        handle, ("nvJitLinkAddData('" + input.name + "')").c_str());
  check_link(nvJitLinkComplete(handle), handle, "nvJitLinkComplete");
  size_t size = 0;
  check_link(nvJitLinkGetLinkedCubinSize(handle, &size), handle, "nvJitLinkGetLinkedCubinSize");
  std::vector<char> cubin(size);
  check_link(nvJitLinkGetLinkedCubin(handle, cubin.data()), handle, "nvJitLinkGetLinkedCubin");
  nvJitLinkDestroy(&handle);
  static const char elf_magic[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || std::memcmp(cubin.data(), elf_magic, 4) != 0)
    fail("the linked cubin (%zu bytes) is not an ELF file", size);
  return cubin;
}

// FNV-1a, 64 bits: enough to see that two runs got the same cubin.
uint64_t fnv1a64(const std::vector<char> &bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (char c : bytes)
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash;
}

// What handler i answers to x (bench/jit_start/gen_handlers.py).
uint32_t expected_result(uint32_t i, uint32_t x) {
  return x * (2 * i + 1) + i;
}

struct Response {
  int32_t status;
  uint32_t result_len;
  uint32_t result;
  uint32_t handler_count;
};

// One request through the mailbox: payload, then request_seq (release); the kernel's
// response_seq (acquire), then its payload. nullopt when no answer came within timeout_ms.
std::optional<Response> call(JitStartMailbox *mb, CUstream stream, uint32_t index, uint32_t x,
                             double timeout_ms) {
  mb->function_index = index;
  mb->arg_len = 4;
  mb->arg[0] = x;
  uint32_t seq = mb->request_seq + 1;
  std::atomic_ref<uint32_t>(mb->request_seq).store(seq, std::memory_order_release);
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (uint64_t spin = 0;; ++spin) {
    if (std::atomic_ref<uint32_t>(mb->response_seq).load(std::memory_order_acquire) == seq)
      return Response{mb->status, mb->result_len, mb->result[0], mb->handler_count};
    if (spin % 4096 == 0) {
      CUresult state = cuStreamQuery(stream);
      if (state == CUDA_SUCCESS)
        fail("the kernel returned before it answered request %u", seq);
      if (state != CUDA_ERROR_NOT_READY)
        check(state, "cuStreamQuery (the persistent kernel)");
      if (ms_since(start) > timeout_ms)
        return std::nullopt;
    }
  }
}

// Handler `index` called with an x of its own and its answer checked; false on a wrong one.
bool call_and_check(JitStartMailbox *mb, CUstream stream, uint32_t index, double timeout_ms,
                    uint32_t *handler_count) {
  uint32_t x = 0x9e3779b9u ^ (index * 2654435761u);
  std::optional<Response> r = call(mb, stream, index, x, timeout_ms);
  if (!r)
    fail("no answer from handler %u in %.0f ms", index, timeout_ms);
  *handler_count = r->handler_count;
  if (r->status != 0 || r->result_len != 4 || r->result != expected_result(index, x)) {
    std::fprintf(stderr,
                 "jit_start_app: error: handler %u of %u answered status %d, %u bytes, %u "
                 "(expected status 0, 4 bytes, %u)\n",
                 index, r->handler_count, r->status, r->result_len, r->result,
                 expected_result(index, x));
    return false;
  }
  return true;
}

void print_link_only(const std::string &arch, const std::vector<Input> &inputs, double link_ms,
                     const std::vector<char> &cubin) {
  std::printf("{\"arch\":\"%s\",\"inputs\":%zu,\"link_ms\":%.3f,\"cubin_size\":%zu,"
              "\"cubin_fnv1a64\":\"%016" PRIx64 "\"}\n",
              arch.c_str(), inputs.size(), link_ms, cubin.size(), fnv1a64(cubin));
}

} // namespace

int main(int argc, char **argv) {
  timespec t0, t0_real;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_REALTIME, &t0_real);
  std::string exec_to_main_ms = "null";
  if (const char *exec = std::getenv("JIT_START_EXEC_REALTIME")) {
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f",
                  (t0_real.tv_sec - std::strtod(exec, nullptr)) * 1e3 + t0_real.tv_nsec / 1e6);
    exec_to_main_ms = ms;
  }
  Options options = parse_options(argc, argv);

  if (!options.link_only_arch.empty()) {
    std::vector<Input> inputs = read_inputs(options.inputs);
    double start = ms_since(t0);
    std::vector<char> cubin = link(inputs, options.link_only_arch, options.input_type);
    print_link_only(options.link_only_arch, inputs, ms_since(t0) - start, cubin);
    return 0;
  }

  // 1. The context.
  double context_start = ms_since(t0);
  CU(cuInit(0));
  CUdevice device;
  CU(cuDeviceGet(&device, 0));
  CUcontext context;
  CU(cuDevicePrimaryCtxRetain(&context, device));
  CU(cuCtxSetCurrent(context));
  double process_to_context_ms = ms_since(t0);
  double context_ms = process_to_context_ms - context_start;
  int major = 0, minor = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
  CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
  std::string arch = "sm_" + std::to_string(major) + std::to_string(minor);

  // 2. The device code.
  double read_start = ms_since(t0);
  std::vector<Input> inputs = read_inputs(options.inputs);
  double read_ms = ms_since(t0) - read_start;

  // 3. The link.
  double link_start = ms_since(t0);
  std::vector<char> cubin = link(inputs, arch, options.input_type);
  double link_ms = ms_since(t0) - link_start;

  // 4. The load.
  double load_start = ms_since(t0);
  CUlibrary library;
  CU(cuLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kernel;
  CU(cuLibraryGetKernel(&kernel, library, "jit_start_dispatch"));
  CUfunction function;
  CU(cuKernelGetFunction(&function, kernel));
  double load_ms = ms_since(t0) - load_start;

  // 5. The persistent kernel, polling a mailbox in mapped pinned memory.
  double launch_start = ms_since(t0);
  void *host = nullptr;
  CU(cuMemHostAlloc(&host, sizeof(JitStartMailbox), CU_MEMHOSTALLOC_DEVICEMAP));
  std::memset(host, 0, sizeof(JitStartMailbox));
  auto *mb = static_cast<JitStartMailbox *>(host);
  CUdeviceptr mailbox_device;
  CU(cuMemHostGetDevicePointer(&mailbox_device, host, 0));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  void *params[] = {&mailbox_device};
  CU(cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
  double launch_ms = ms_since(t0) - launch_start;

  // 6. The first request (handler 0 unless --request names another); the answer says how many
  // handlers the table holds.
  uint32_t handler_count = 0;
  uint32_t first = options.request.value_or(0);
  bool ok = call_and_check(mb, stream, first, first_response_timeout_ms, &handler_count);
  double first_response_ms = ms_since(t0);

  uint32_t checked = 1, wrong = ok ? 0 : 1;
  if (options.check_all) {
    for (uint32_t i = 0; i < handler_count; ++i) {
      if (i == first)
        continue;
      ++checked;
      wrong += call_and_check(mb, stream, i, response_timeout_ms, &handler_count) ? 0 : 1;
    }
    std::optional<Response> past = call(mb, stream, handler_count, 0, response_timeout_ms);
    if (!past || past->status != JIT_START_STATUS_NO_HANDLER) {
      std::fprintf(stderr, "jit_start_app: error: index %u past the table: status %d\n",
                   handler_count, past ? past->status : 0);
      ++wrong;
    }
  }

  std::atomic_ref<uint32_t>(mb->shutdown).store(1, std::memory_order_release);
  timespec stop_start;
  clock_gettime(CLOCK_MONOTONIC, &stop_start);
  CUresult state;
  while ((state = cuStreamQuery(stream)) == CUDA_ERROR_NOT_READY)
    if (ms_since(stop_start) > stop_timeout_ms)
      fail("the kernel did not stop within %.0f ms of shutdown", stop_timeout_ms);
  check(state, "cuStreamQuery (the persistent kernel's exit)");
  CU(cuStreamDestroy(stream));
  CU(cuLibraryUnload(library));
  CU(cuMemFreeHost(host));
  CU(cuDevicePrimaryCtxRelease(device));

  std::printf("{\"handlers\":%u,\"arch\":\"%s\",\"inputs\":%zu,\"first_request\":%u,"
              "\"exec_to_main_ms\":%s,\"context_ms\":%.3f,\"process_to_context_ms\":%.3f,"
              "\"read_ms\":%.3f,\"link_ms\":%.3f,\"load_ms\":%.3f,\"launch_ms\":%.3f,"
              "\"first_response_ms\":%.3f,\"cubin_size\":%zu,\"cubin_fnv1a64\":\"%016" PRIx64
              "\",\"checked\":%u,\"wrong\":%u}\n",
              handler_count, arch.c_str(), inputs.size(), first, exec_to_main_ms.c_str(),
              context_ms, process_to_context_ms, read_ms, link_ms, load_ms, launch_ms,
              first_response_ms, cubin.size(), fnv1a64(cubin), checked, wrong);
  return wrong == 0 ? 0 : 1;
}
