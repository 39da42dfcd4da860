#include "interpose/real_nvjitlink.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

#ifndef CUDAQ_RT_CUDA_LIBDIR
#define CUDAQ_RT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace cudaq_rt {
namespace {

// Whether `p` lies in this library (the interposer) rather than in the real one.
bool is_ours(void *p) {
  static int anchor;
  Dl_info mine{}, theirs{};
  return ::dladdr(&anchor, &mine) && ::dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
}

// `name` in `from`, under the real library's version node or unversioned; never this library's.
void *lookup(void *from, const char *name) {
  void *p = ::dlvsym(from, name, nvjitlink_version_node);
  if (!p)
    p = ::dlsym(from, name);
  return p && !is_ours(p) ? p : nullptr;
}

template <class F> bool find(void *from, F &f, const char *name) {
  void *p = lookup(from, name);
  f = reinterpret_cast<F>(p);
  return p != nullptr;
}

bool find_all(void *from, RealNvJitLink &r) {
  return find(from, r.create, "__nvJitLinkCreate_13_0") &&
         find(from, r.destroy, "__nvJitLinkDestroy_13_0") &&
         find(from, r.add_data, "__nvJitLinkAddData_13_0") &&
         find(from, r.add_file, "__nvJitLinkAddFile_13_0") &&
         find(from, r.complete, "__nvJitLinkComplete_13_0") &&
         find(from, r.cubin_size, "__nvJitLinkGetLinkedCubinSize_13_0") &&
         find(from, r.cubin, "__nvJitLinkGetLinkedCubin_13_0") &&
         find(from, r.ptx_size, "__nvJitLinkGetLinkedPtxSize_13_0") &&
         find(from, r.ptx, "__nvJitLinkGetLinkedPtx_13_0") &&
         find(from, r.error_log_size, "__nvJitLinkGetErrorLogSize_13_0") &&
         find(from, r.error_log, "__nvJitLinkGetErrorLog_13_0") &&
         find(from, r.info_log_size, "__nvJitLinkGetInfoLogSize_13_0") &&
         find(from, r.info_log, "__nvJitLinkGetInfoLog_13_0") &&
         find(from, r.version, "nvJitLinkVersion");
}

Expected<RealNvJitLink> find_real() {
  RealNvJitLink r;
  if (find_all(RTLD_NEXT, r))
    return r;
  // Standing in for the library on the loader's path: load the real one by its path.
  const char *env = std::getenv(nvjitlink_real_env);
  std::string path = env && *env ? env : CUDAQ_RT_CUDA_LIBDIR "/libnvJitLink.so.13";
  r = {};
  r.library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!r.library)
    return make_error(path, "cannot load the real libnvJitLink: ", ::dlerror(),
                      env && *env ? "" : " (set " + std::string(nvjitlink_real_env) + ")");
  if (!find_all(r.library, r))
    return make_error(path, "is not the real libnvJitLink ", nvjitlink_version_node,
                      " (it lacks the entry points, or it is this interposer)");
  return r;
}

} // namespace

void *RealNvJitLink::symbol(const char *name) const {
  return lookup(library ? library : RTLD_NEXT, name);
}

Expected<const RealNvJitLink *> real_nvjitlink() {
  static const Expected<RealNvJitLink> real = find_real();
  if (!real)
    return real.error();
  return &*real;
}

} // namespace cudaq_rt
