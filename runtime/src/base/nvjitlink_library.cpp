#include "base/nvjitlink_library.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <memory>
#include <mutex>

#ifndef CUDAQ_RT_CUDA_LIBDIR
#define CUDAQ_RT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif
#ifndef CUDAQ_RT_CUDA_MAJOR
#define CUDAQ_RT_CUDA_MAJOR 13
#endif
#ifndef CUDAQ_RT_CUDA_MINOR
#define CUDAQ_RT_CUDA_MINOR 0
#endif
#define CUDAQ_RT_STR2(x) #x
#define CUDAQ_RT_STR(x) CUDAQ_RT_STR2(x)

namespace cudaq_rt {

std::string NvJitLinkFunctions::find_all(const std::function<void *(const char *)> &lookup) {
  std::string missing;
  auto find = [&](auto &f, const char *name) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(lookup(name));
    if (!f && missing.empty())
      missing = name;
  };
  find(create, "nvJitLinkCreate");
  find(destroy, "nvJitLinkDestroy");
  find(add_data, "nvJitLinkAddData");
  find(add_file, "nvJitLinkAddFile");
  find(complete, "nvJitLinkComplete");
  find(cubin_size, "nvJitLinkGetLinkedCubinSize");
  find(cubin, "nvJitLinkGetLinkedCubin");
  find(ptx_size, "nvJitLinkGetLinkedPtxSize");
  find(ptx, "nvJitLinkGetLinkedPtx");
  find(error_log_size, "nvJitLinkGetErrorLogSize");
  find(error_log, "nvJitLinkGetErrorLog");
  find(info_log_size, "nvJitLinkGetInfoLogSize");
  find(info_log, "nvJitLinkGetInfoLog");
  find(version, "nvJitLinkVersion");
  return missing;
}

std::string NvJitLinkLibrary::version() const {
  return cat(major, ".", minor);
}

std::string NvJitLinkLibrary::describe() const {
  return cat("nvJitLink ", version(), " (", resolved.empty() ? path : resolved, ")");
}

std::string runtime_device_code_cuda() {
  return cat(CUDAQ_RT_CUDA_MAJOR, ".", CUDAQ_RT_CUDA_MINOR);
}

std::string nvjitlink_refuses_runtime_code(const NvJitLinkLibrary &lib) {
  static const unsigned runtime_major = CUDAQ_RT_CUDA_MAJOR, runtime_minor = CUDAQ_RT_CUDA_MINOR;
  const bool other_major = lib.major != runtime_major;
  if (!other_major && !(lib.minor < runtime_minor))
    return {};
  return cat(lib.describe(),
             " cannot link cudaq-rt's device code (the dispatch kernels and the "
             "bridges' hooks, LTO-IR of CUDA ",
             runtime_device_code_cuda(), "): ",
             other_major ? "nvJitLink reads no LTO-IR of another CUDA major"
                         : "nvJitLink reads no LTO-IR of a newer CUDA release than its own",
             "; use an nvJitLink ", CUDAQ_RT_CUDA_MAJOR, ".x from ", runtime_device_code_cuda(),
             " on");
}

namespace {

Expected<NvJitLinkLibrary> load_library(const std::string &path) {
  NvJitLinkLibrary lib;
  lib.path = path;
  ::dlerror();
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = ::dlerror();
    return make_error(path, "cannot load nvJitLink: ", why ? why : "dlopen failed");
  }
  std::string missing =
      lib.api.find_all([handle](const char *name) { return ::dlsym(handle, name); });
  if (!missing.empty()) {
    ::dlclose(handle);
    return make_error(path, "is not an nvJitLink library: it defines no ", missing);
  }
  if (lib.api.version(&lib.major, &lib.minor) != NVJITLINK_SUCCESS) {
    ::dlclose(handle);
    return make_error(path, "nvJitLinkVersion failed");
  }
  lib.bypass = reinterpret_cast<void (*)(int)>(::dlsym(handle, "cudaq_rt_nvjitlink_bypass"));
  if (auto hook = reinterpret_cast<void *(*)(const char *)>(
          ::dlsym(handle, "cudaq_rt_nvjitlink_real_symbol")))
    lib.real_version = hook("nvJitLinkVersion");
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void *>(lib.api.version), &info) && info.dli_fname)
    if (char *real = ::realpath(info.dli_fname, nullptr)) {
      lib.resolved = real;
      std::free(real);
    }
  // Never closed: the process links with it until it exits.
  return lib;
}

std::string default_path() {
  if (const char *env = std::getenv(nvjitlink_env); env && *env)
    return env;
  return "libnvJitLink.so." CUDAQ_RT_STR(CUDAQ_RT_CUDA_MAJOR);
}

struct ProcessLibrary {
  std::mutex mutex;
  std::unique_ptr<NvJitLinkLibrary> loaded;
};

ProcessLibrary &process_library() {
  static ProcessLibrary *p = new ProcessLibrary; // never destroyed: links may run at exit
  return *p;
}

Expected<const NvJitLinkLibrary *> load_locked(ProcessLibrary &p, const std::string &path,
                                               bool fallback) {
  auto lib = load_library(path);
  if (!lib && fallback) {
    // The toolkit's, where the loader's search does not reach it.
    auto in_toolkit = load_library(CUDAQ_RT_CUDA_LIBDIR "/" + path);
    if (in_toolkit)
      lib = std::move(in_toolkit);
  }
  if (!lib)
    return lib.error();
  p.loaded = std::make_unique<NvJitLinkLibrary>(std::move(*lib));
  return p.loaded.get();
}

} // namespace

Expected<const NvJitLinkLibrary *> choose_nvjitlink(const std::string &path) {
  ProcessLibrary &p = process_library();
  std::lock_guard lock(p.mutex);
  if (p.loaded) {
    if (p.loaded->path == path)
      return p.loaded.get();
    char *real = ::realpath(path.c_str(), nullptr);
    const bool same = real && p.loaded->resolved == real;
    std::free(real);
    if (same)
      return p.loaded.get();
    return make_error(path, "this process already links with ", p.loaded->describe(),
                      ": one nvJitLink a process");
  }
  return load_locked(p, path, false);
}

const NvJitLinkLibrary *loaded_nvjitlink() {
  ProcessLibrary &p = process_library();
  std::lock_guard lock(p.mutex);
  return p.loaded.get();
}

nlohmann::json loaded_nvjitlink_json() {
  const NvJitLinkLibrary *lib = loaded_nvjitlink();
  if (!lib)
    return nullptr;
  return {{"version", lib->version()}, {"path", lib->resolved.empty() ? lib->path : lib->resolved}};
}

Expected<const NvJitLinkLibrary *> process_nvjitlink() {
  ProcessLibrary &p = process_library();
  std::lock_guard lock(p.mutex);
  if (p.loaded)
    return p.loaded.get();
  const char *env = std::getenv(nvjitlink_env);
  const bool chosen = env && *env;
  auto lib = load_locked(p, default_path(), !chosen);
  if (!lib && chosen)
    return make_error(lib.error().subject, lib.error().message, " (from $", nvjitlink_env, ")");
  return lib;
}

} // namespace cudaq_rt
