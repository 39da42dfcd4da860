// The CUDA driver behind cudaq_rt::Gpu.
//
// libcuda.so.1 is opened with dlopen, not linked: a tool linked against it would not start on a
// machine without a driver (the loader's "cannot open shared object file" before main), where
// cudaq-rt-run must say "no CUDA driver" in one line and pack and link must work regardless. Every
// entry point is then taken from cuGetProcAddress at the CUDA version these headers describe, so
// that the _v2 variants the headers' macros name are the ones called.
//
// Modules, not libraries: cuModuleLoadData loads a cubin into the current context only, where
// cuLibraryLoadData (under CUDA_MODULE_LOADING=EAGER, which cudaq-rt-run sets) loads it into every
// context of the process. Loading code into a context waits for a kernel running there (measured
// on the H200, bench/probe/load_while_serving.cu: cuModuleLoadData, a library's first use in a
// context, an unload and cuMemFree all wait; an allocation and a copy on another non-blocking
// stream do not), so a library would wait for every GPU's persistent kernel, while a module waits
// only for its own GPU's: a reload swaps one GPU's code while the others serve. Under CUDA's lazy
// loading (the default since 12.2) a module's function reaches the context on first use, which
// would wait behind a kernel already running there: kernel() loads the kernel's function at once
// (cuFuncLoad) and global() resolves in the current context, and the launcher calls both for
// everything it needs before it launches.
#include "load/gpu.h"

#include <cuda.h>

#include <algorithm>
#include <dlfcn.h>
#include <map>
#include <mutex>

namespace cudaq_rt {
namespace {

struct DriverApi {
  decltype(&cuGetErrorName) getErrorName = nullptr;
  decltype(&cuGetErrorString) getErrorString = nullptr;
  decltype(&cuInit) init = nullptr;
  decltype(&cuDriverGetVersion) driverGetVersion = nullptr;
  decltype(&cuDeviceGetCount) deviceGetCount = nullptr;
  decltype(&cuDeviceGet) deviceGet = nullptr;
  decltype(&cuDeviceGetName) deviceGetName = nullptr;
  decltype(&cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&cuStreamGetCtx) streamGetCtx = nullptr;
  decltype(&cuModuleLoadData) moduleLoadData = nullptr;
  decltype(&cuModuleUnload) moduleUnload = nullptr;
  decltype(&cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&cuModuleGetGlobal) moduleGetGlobal = nullptr;
  decltype(&cuFuncLoad) funcLoad = nullptr;
  decltype(&cuMemAlloc) memAlloc = nullptr;
  decltype(&cuMemFree) memFree = nullptr;
  decltype(&cuMemHostAlloc) memHostAlloc = nullptr;
  decltype(&cuMemHostGetDevicePointer) memHostGetDevicePointer = nullptr;
  decltype(&cuMemFreeHost) memFreeHost = nullptr;
  decltype(&cuMemcpyHtoD) memcpyHtoD = nullptr;
  decltype(&cuMemcpyDtoH) memcpyDtoH = nullptr;
  decltype(&cuStreamCreate) streamCreate = nullptr;
  decltype(&cuStreamDestroy) streamDestroy = nullptr;
  decltype(&cuStreamQuery) streamQuery = nullptr;
  decltype(&cuLaunchKernel) launchKernel = nullptr;
  decltype(&cuLaunchKernelEx) launchKernelEx = nullptr;
  decltype(&cuFuncSetAttribute) funcSetAttribute = nullptr;
};

// Loads libcuda and resolves the entry points once; nullopt-like failure is kept as an Error.
const Expected<DriverApi> &driver_api() {
  static const Expected<DriverApi> api = []() -> Expected<DriverApi> {
    void *lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = ::dlerror();
      return make_error("",
                        "no CUDA driver on this machine: ", why ? why : "libcuda.so.1 not found");
    }
    auto get_proc =
        reinterpret_cast<decltype(&cuGetProcAddress)>(::dlsym(lib, "cuGetProcAddress_v2"));
    if (!get_proc)
      return make_error("", "the CUDA driver is too old: libcuda.so.1 has no cuGetProcAddress_v2 "
                            "(CUDA 12.0 or newer is needed)");
    DriverApi a;
    std::string missing;
    bool stub = false;
    auto resolve = [&](auto &fn, const char *name) {
      void *p = nullptr;
      CUdriverProcAddressQueryResult found{};
      const CUresult rc = get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
      stub = stub || rc == CUDA_ERROR_STUB_LIBRARY;
      if (rc != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || !p)
        missing += cat(missing.empty() ? "" : ", ", name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    resolve(a.getErrorName, "cuGetErrorName");
    resolve(a.getErrorString, "cuGetErrorString");
    resolve(a.init, "cuInit");
    resolve(a.driverGetVersion, "cuDriverGetVersion");
    resolve(a.deviceGetCount, "cuDeviceGetCount");
    resolve(a.deviceGet, "cuDeviceGet");
    resolve(a.deviceGetName, "cuDeviceGetName");
    resolve(a.deviceGetAttribute, "cuDeviceGetAttribute");
    resolve(a.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
    resolve(a.ctxSetCurrent, "cuCtxSetCurrent");
    resolve(a.streamGetCtx, "cuStreamGetCtx");
    resolve(a.moduleLoadData, "cuModuleLoadData");
    resolve(a.moduleUnload, "cuModuleUnload");
    resolve(a.moduleGetFunction, "cuModuleGetFunction");
    resolve(a.moduleGetGlobal, "cuModuleGetGlobal");
    resolve(a.funcLoad, "cuFuncLoad");
    resolve(a.memAlloc, "cuMemAlloc");
    resolve(a.memFree, "cuMemFree");
    resolve(a.memHostAlloc, "cuMemHostAlloc");
    resolve(a.memHostGetDevicePointer, "cuMemHostGetDevicePointer");
    resolve(a.memFreeHost, "cuMemFreeHost");
    resolve(a.memcpyHtoD, "cuMemcpyHtoD");
    resolve(a.memcpyDtoH, "cuMemcpyDtoH");
    resolve(a.streamCreate, "cuStreamCreate");
    resolve(a.streamDestroy, "cuStreamDestroy");
    resolve(a.streamQuery, "cuStreamQuery");
    resolve(a.launchKernel, "cuLaunchKernel");
    resolve(a.launchKernelEx, "cuLaunchKernelEx");
    resolve(a.funcSetAttribute, "cuFuncSetAttribute");
    if (stub) {
      // The CUDA Toolkit's stubs/libcuda.so (for linking, not a driver) on the loader's path:
      // every call answers CUDA_ERROR_STUB_LIBRARY. Not "too old": no driver at all.
      Dl_info where{};
      const char *file = ::dladdr(reinterpret_cast<void *>(get_proc), &where) && where.dli_fname
                             ? where.dli_fname
                             : "libcuda.so.1";
      return make_error("", "no CUDA driver on this machine: ", quote(file),
                        " is the CUDA Toolkit's stub library (for linking only), not a driver");
    }
    if (!missing.empty()) {
      int version = 0;
      if (a.driverGetVersion)
        a.driverGetVersion(&version);
      return make_error("", "the CUDA driver (", version / 1000, ".", version % 1000 / 10,
                        ") is too old for this build (CUDA ", CUDA_VERSION / 1000, ".",
                        CUDA_VERSION % 1000 / 10, "): it lacks ", missing);
    }
    return a;
  }();
  return api;
}

class DriverGpu final : public Gpu {
public:
  Expected<int> device_count() override {
    if (!driver_api())
      return driver_api().error();
    const DriverApi &cu = *driver_api();
    CUresult rc = cu.init(0);
    if (rc == CUDA_ERROR_NO_DEVICE)
      return make_error("", "no CUDA GPU on this machine (", name_of(rc), ")");
    if (rc != CUDA_SUCCESS)
      return failure("cuInit", rc);
    int count = 0;
    if ((rc = cu.deviceGetCount(&count)) != CUDA_SUCCESS)
      return failure("cuDeviceGetCount", rc);
    return count;
  }

  std::optional<std::string> absent() override { return no_gpu_reason(); }

  Expected<GpuDevice> describe(int ordinal) override {
    auto devices = device_count(); // the driver is loaded and initialized after this
    if (!devices)
      return std::move(devices).take_error();
    const DriverApi &cu = *driver_api();
    const int count = *devices;
    CUresult rc = CUDA_SUCCESS;
    if (ordinal < 0 || ordinal >= count)
      return make_error("", "no GPU ", ordinal, ": this machine has ", count,
                        count == 1 ? " GPU (0)" : cat(" GPUs (0 to ", count - 1, ")"));
    CUdevice dev = 0;
    if ((rc = cu.deviceGet(&dev, ordinal)) != CUDA_SUCCESS)
      return failure("cuDeviceGet", rc);
    GpuDevice d;
    d.ordinal = ordinal;
    char name[256] = {};
    if ((rc = cu.deviceGetName(name, sizeof name - 1, dev)) != CUDA_SUCCESS)
      return failure("cuDeviceGetName", rc);
    d.name = name;
    int major = 0, minor = 0;
    if ((rc = cu.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) !=
            CUDA_SUCCESS ||
        (rc = cu.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) !=
            CUDA_SUCCESS)
      return failure("cuDeviceGetAttribute", rc);
    d.sm = major * 10 + minor;
    cu.driverGetVersion(&d.driver_version);
    return d;
  }

  Expected<GpuDevice> open(int ordinal) override {
    auto d = describe(ordinal);
    if (!d)
      return d;
    const DriverApi &cu = *driver_api();
    CUresult rc = CUDA_SUCCESS;
    CUdevice dev = 0;
    if ((rc = cu.deviceGet(&dev, ordinal)) != CUDA_SUCCESS)
      return failure("cuDeviceGet", rc);
    CUcontext ctx = nullptr;
    if ((rc = cu.primaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS)
      return failure(cat("creating GPU ", ordinal, "'s context (cuDevicePrimaryCtxRetain)"), rc);
    if ((rc = cu.ctxSetCurrent(ctx)) != CUDA_SUCCESS)
      return failure("cuCtxSetCurrent", rc);
    int clusters = 0;
    if ((rc = cu.deviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev)) !=
        CUDA_SUCCESS)
      return failure("cuDeviceGetAttribute", rc);
    {
      std::lock_guard<std::mutex> hold(contexts_mutex_);
      cluster_contexts_[ctx] = clusters != 0;
    }
    return d;
  }

  Expected<GpuLibrary> load(std::span<const uint8_t> image) override {
    CUmodule module = nullptr;
    if (CUresult rc = api().moduleLoadData(&module, image.data()); rc != CUDA_SUCCESS)
      return failure("loading the cubin (cuModuleLoadData)", rc);
    return static_cast<GpuLibrary>(module);
  }

  void unload(GpuLibrary library) override { api().moduleUnload(static_cast<CUmodule>(library)); }

  Expected<GpuFunction> kernel(GpuLibrary library, const std::string &name) override {
    CUfunction f = nullptr;
    CUresult rc = api().moduleGetFunction(&f, static_cast<CUmodule>(library), name.c_str());
    if (rc == CUDA_ERROR_NOT_FOUND)
      return make_error("", "the module has no kernel ", name);
    if (rc != CUDA_SUCCESS)
      return failure(cat("kernel ", name, " (cuModuleGetFunction)"), rc);
    if ((rc = api().funcLoad(f)) != CUDA_SUCCESS)
      return failure(cat("kernel ", name, " (cuFuncLoad)"), rc);
    return static_cast<GpuFunction>(f);
  }

  Expected<std::optional<GpuGlobal>> global(GpuLibrary library, const std::string &name) override {
    CUdeviceptr p = 0;
    size_t size = 0;
    CUresult rc = api().moduleGetGlobal(&p, &size, static_cast<CUmodule>(library), name.c_str());
    if (rc == CUDA_ERROR_NOT_FOUND)
      return std::optional<GpuGlobal>();
    if (rc != CUDA_SUCCESS)
      return failure(cat("global ", name, " (cuModuleGetGlobal)"), rc);
    return std::optional<GpuGlobal>(GpuGlobal{static_cast<GpuPointer>(p), size});
  }

  Expected<GpuPointer> allocate(size_t bytes) override {
    CUdeviceptr p = 0;
    if (CUresult rc = api().memAlloc(&p, bytes); rc != CUDA_SUCCESS)
      return failure(cat("allocating ", bytes, " bytes of GPU memory (cuMemAlloc)"), rc);
    return static_cast<GpuPointer>(p);
  }

  void release(GpuPointer p) override { api().memFree(static_cast<CUdeviceptr>(p)); }

  Expected<MappedMemory> allocate_mapped(size_t bytes) override {
    MappedMemory m;
    if (CUresult rc = api().memHostAlloc(&m.host, bytes, CU_MEMHOSTALLOC_DEVICEMAP);
        rc != CUDA_SUCCESS)
      return failure(cat("allocating ", bytes, " bytes of mapped host memory (cuMemHostAlloc)"),
                     rc);
    CUdeviceptr p = 0;
    if (CUresult rc = api().memHostGetDevicePointer(&p, m.host, 0); rc != CUDA_SUCCESS) {
      api().memFreeHost(m.host);
      return failure("cuMemHostGetDevicePointer", rc);
    }
    m.device = static_cast<GpuPointer>(p);
    return m;
  }

  void release_mapped(MappedMemory m) override { api().memFreeHost(m.host); }

  Status copy_to_device(GpuPointer dst, std::span<const uint8_t> src) override {
    if (CUresult rc = api().memcpyHtoD(static_cast<CUdeviceptr>(dst), src.data(), src.size());
        rc != CUDA_SUCCESS)
      return failure("copying to the GPU (cuMemcpyHtoD)", rc);
    return Status::ok();
  }

  Status copy_from_device(std::span<uint8_t> dst, GpuPointer src) override {
    if (CUresult rc = api().memcpyDtoH(dst.data(), static_cast<CUdeviceptr>(src), dst.size());
        rc != CUDA_SUCCESS)
      return failure("copying from the GPU (cuMemcpyDtoH)", rc);
    return Status::ok();
  }

  Expected<GpuStream> create_stream() override {
    CUstream s = nullptr;
    if (CUresult rc = api().streamCreate(&s, CU_STREAM_NON_BLOCKING); rc != CUDA_SUCCESS)
      return failure("cuStreamCreate", rc);
    return static_cast<GpuStream>(s);
  }

  void destroy_stream(GpuStream stream) override {
    api().streamDestroy(static_cast<CUstream>(stream));
  }

  // Where the GPU has clusters (sm_90 on), as clusters of one block (Gpu::launch). The GPU is the
  // stream's: one DriverGpu serves every GPU of a process (--device all opens each on a thread of
  // its own), so what each GPU can do is kept by its context (open).
  Status launch(GpuFunction kernel, LaunchShape shape, void **args, GpuStream stream) override {
    CUcontext ctx = nullptr;
    CUresult rc = api().streamGetCtx(static_cast<CUstream>(stream), &ctx);
    if (rc != CUDA_SUCCESS)
      return failure("the stream's GPU (cuStreamGetCtx)", rc);
    bool clusters = false;
    {
      std::lock_guard<std::mutex> hold(contexts_mutex_);
      auto it = cluster_contexts_.find(ctx);
      clusters = it != cluster_contexts_.end() && it->second;
    }
    if (clusters) {
      CUlaunchAttribute cluster{};
      cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      cluster.value.clusterDim.x = cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
      CUlaunchConfig config{};
      config.gridDimX = shape.blocks, config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = shape.threads, config.blockDimY = config.blockDimZ = 1;
      config.sharedMemBytes = shape.shared_bytes;
      config.hStream = static_cast<CUstream>(stream);
      config.attrs = &cluster, config.numAttrs = 1;
      if ((rc = api().launchKernelEx(&config, static_cast<CUfunction>(kernel), args, nullptr)) !=
          CUDA_SUCCESS)
        return failure(cat("launching ", shape.blocks, "x", shape.threads,
                           " in clusters of one block (cuLaunchKernelEx)"),
                       rc);
      return Status::ok();
    }
    if ((rc = api().launchKernel(static_cast<CUfunction>(kernel), shape.blocks, 1, 1, shape.threads,
                                 1, 1, shape.shared_bytes, static_cast<CUstream>(stream), args,
                                 nullptr)) != CUDA_SUCCESS)
      return failure(cat("launching ", shape.blocks, "x", shape.threads, " (cuLaunchKernel)"), rc);
    return Status::ok();
  }

  bool allow_dynamic_shared(GpuFunction kernel, unsigned bytes) override {
    // The driver refuses (CUDA_ERROR_INVALID_VALUE) more than the GPU has beside the kernel's
    // static shared memory.
    return api().funcSetAttribute(static_cast<CUfunction>(kernel),
                                  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(bytes)) == CUDA_SUCCESS;
  }

  StreamState query(GpuStream stream) override {
    CUresult rc = api().streamQuery(static_cast<CUstream>(stream));
    if (rc == CUDA_ERROR_NOT_READY)
      return {};
    if (rc == CUDA_SUCCESS)
      return {.done = true, .fault = std::nullopt};
    return {.done = true, .fault = failure("", rc)};
  }

private:
  static const DriverApi &api() { return *driver_api(); }

  // Per GPU opened (its primary context): whether it launches clusters.
  std::mutex contexts_mutex_;
  std::map<CUcontext, bool> cluster_contexts_;

  static std::string name_of(CUresult rc) {
    const char *name = nullptr;
    api().getErrorName(rc, &name);
    return name ? name : cat("CUDA error ", static_cast<int>(rc));
  }

  // "what: CUDA_ERROR_X (the driver's words)"; with no `what`, the error alone.
  static Error failure(const std::string &what, CUresult rc) {
    const char *text = nullptr;
    api().getErrorString(rc, &text);
    std::string error = cat(name_of(rc), text ? cat(" (", text, ")") : "");
    return make_error("", what.empty() ? error : cat(what, ": ", error));
  }
};

} // namespace

Gpu &driver_gpu() {
  static DriverGpu gpu;
  return gpu;
}

Expected<std::vector<TargetArch>> gpu_archs(Gpu &gpu) {
  auto count = gpu.device_count();
  if (!count)
    return std::move(count).take_error();
  std::vector<TargetArch> archs;
  for (int i = 0; i < *count; ++i) {
    auto device = gpu.describe(i);
    if (!device)
      return std::move(device).take_error();
    auto arch = parse_arch(device->arch());
    if (!arch)
      return make_error("", "GPU ", i, " (", device->name, ") reports ", device->arch(),
                        ", which no link can target");
    if (std::find(archs.begin(), archs.end(), *arch) == archs.end())
      archs.push_back(*arch);
  }
  if (archs.empty())
    return make_error("", "no CUDA GPU on this machine");
  return archs;
}

std::optional<std::string> no_gpu_reason() {
  if (!driver_api())
    return driver_api().error().str();
  const DriverApi &cu = *driver_api();
  int count = 0;
  if (cu.init(0) == CUDA_ERROR_NO_DEVICE ||
      (cu.deviceGetCount(&count) == CUDA_SUCCESS && count == 0))
    return std::string("no CUDA GPU on this machine");
  return std::nullopt;
}

} // namespace cudaq_rt
