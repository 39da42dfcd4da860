// The nvJitLink C API as libcudaq_rt_nvjitlink.so exports it: the versioned names the toolkit's
// header makes programs call (__nvJitLinkCreate_13_0, ...), the unversioned names programs that
// load the library by name look up (nvJitLinkCreate, ...), all under the real library's version
// node (nvjitlink.map), and the two hooks cudaq-rt itself uses. Each forwards to ApiLinks.
#include "interpose/api_link.h"

#define CUDAQ_RT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

cudaq_rt::ApiLinks *links() {
  return cudaq_rt::ApiLinks::process();
}

} // namespace

// The real library's entry point `name` (as the key's nvJitLink identity needs it), or null.
CUDAQ_RT_EXPORT void *cudaq_rt_nvjitlink_real_symbol(const char *name) {
  auto *l = links();
  return l && name ? l->real().symbol(name) : nullptr;
}

// Links this thread makes while `on` go straight to the real library (cudaq-rt's own).
CUDAQ_RT_EXPORT void cudaq_rt_nvjitlink_bypass(int on) {
  cudaq_rt::ApiLinks::set_bypass(on != 0);
}

// Each entry point under both names: the header's versioned one, and the unversioned one by an
// assembler label (the header defines that name as a static inline wrapper).
#define CUDAQ_RT_ENTRY(ret, versioned, unversioned, params, body)                                  \
  CUDAQ_RT_EXPORT ret versioned params {                                                           \
    auto *l = links();                                                                             \
    if (!l)                                                                                        \
      return NVJITLINK_ERROR_INTERNAL;                                                             \
    body                                                                                           \
  }                                                                                                \
  CUDAQ_RT_EXPORT ret cudaq_rt_unversioned_##versioned params __asm__(unversioned);                \
  CUDAQ_RT_EXPORT ret cudaq_rt_unversioned_##versioned params {                                    \
    auto *l = links();                                                                             \
    if (!l)                                                                                        \
      return NVJITLINK_ERROR_INTERNAL;                                                             \
    body                                                                                           \
  }

CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkCreate_13_0, "nvJitLinkCreate",
               (nvJitLinkHandle * h, uint32_t n, const char *const *o),
               { return l->create(h, n, o); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkDestroy_13_0, "nvJitLinkDestroy", (nvJitLinkHandle * h),
               { return l->destroy(h); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkAddData_13_0, "nvJitLinkAddData",
               (nvJitLinkHandle h, nvJitLinkInputType t, const void *d, size_t n, const char *name),
               { return l->add_data(h, t, d, n, name); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkAddFile_13_0, "nvJitLinkAddFile",
               (nvJitLinkHandle h, nvJitLinkInputType t, const char *path),
               { return l->add_file(h, t, path); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkComplete_13_0, "nvJitLinkComplete", (nvJitLinkHandle h),
               { return l->complete(h); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetLinkedCubinSize_13_0, "nvJitLinkGetLinkedCubinSize",
               (nvJitLinkHandle h, size_t *n), { return l->output_size(h, false, n); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetLinkedCubin_13_0, "nvJitLinkGetLinkedCubin",
               (nvJitLinkHandle h, void *out), { return l->output(h, false, out); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetLinkedPtxSize_13_0, "nvJitLinkGetLinkedPtxSize",
               (nvJitLinkHandle h, size_t *n), { return l->output_size(h, true, n); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetLinkedPtx_13_0, "nvJitLinkGetLinkedPtx",
               (nvJitLinkHandle h, char *out), { return l->output(h, true, out); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetErrorLogSize_13_0, "nvJitLinkGetErrorLogSize",
               (nvJitLinkHandle h, size_t *n), { return l->real().error_log_size(h, n); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetErrorLog_13_0, "nvJitLinkGetErrorLog",
               (nvJitLinkHandle h, char *out), { return l->real().error_log(h, out); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetInfoLogSize_13_0, "nvJitLinkGetInfoLogSize",
               (nvJitLinkHandle h, size_t *n), { return l->info_log_size(h, n); })
CUDAQ_RT_ENTRY(nvJitLinkResult, __nvJitLinkGetInfoLog_13_0, "nvJitLinkGetInfoLog",
               (nvJitLinkHandle h, char *out), { return l->info_log(h, out); })

CUDAQ_RT_EXPORT nvJitLinkResult nvJitLinkVersion(unsigned int *major, unsigned int *minor) {
  auto *l = links();
  return l ? l->real().version(major, minor) : NVJITLINK_ERROR_INTERNAL;
}
