// The nvJitLink C API as the interposer exports it, built once per nvJitLink major
// (CUDAQ_RT_NVJITLINK_MAJOR 12 or 13) with the newest minor release it covers
// (CUDAQ_RT_NVJITLINK_NEWEST_MINOR), both set in runtime/CMakeLists.txt:
//
//  - every versioned name a header of that major makes programs call: each release's header binds
//    its inline wrappers to its own minor (the 13.5 header's nvJitLinkCreate calls
//    __nvJitLinkCreate_13_5), and the library of release M.N exports every name from _M_0 to _M_N,
//    so the interposer defines them all, and each forwards to the real library's function of the
//    same name;
//  - the unversioned names (nvJitLinkCreate, ...), which programs that load the library by name
//    look up, and nvJitLinkVersion;
//  - __nvJitLinkAPI, an undocumented entry point every release exports (it takes an id and
//    answers a table's address or NULL, read from its code), forwarded as it is;
//  - all under the real library's version node (nvjitlink.map.in), and the two hooks cudaq-rt
//    itself uses under a node of their own.
//
// A name the real library lacks (a program built with a newer header than the library it runs
// with, which the loader would have refused to start) gets one line on stderr and the code the
// real library gives for an outdated library. tests/interpose/test_nvjitlink_versions.py checks
// the exported names against the newest library NVIDIA publishes of each major.
#include "interpose/api_link.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>

#ifndef CUDAQ_RT_NVJITLINK_MAJOR
#error "CUDAQ_RT_NVJITLINK_MAJOR (12 or 13) is set by the build"
#endif
#ifndef CUDAQ_RT_NVJITLINK_NEWEST_MINOR
#error "CUDAQ_RT_NVJITLINK_NEWEST_MINOR is set by the build"
#endif

#define CUDAQ_RT_EXPORT extern "C" __attribute__((visibility("default")))
#define CUDAQ_RT_STR_(x) #x
#define CUDAQ_RT_STR(x) CUDAQ_RT_STR_(x)
#define CUDAQ_RT_CAT_(a, b, c, d) a##b##c##d
#define CUDAQ_RT_CAT(a, b, c, d) CUDAQ_RT_CAT_(a, b, c, d)
#define CUDAQ_RT_CAT2_(a, b) a##b
#define CUDAQ_RT_CAT2(a, b) CUDAQ_RT_CAT2_(a, b)

namespace {

using cudaq_rt::ApiLinks;
using cudaq_rt::LinkOutput;

const cudaq_rt::NvJitLinkMajor this_major = {
    .major = CUDAQ_RT_NVJITLINK_MAJOR,
    .newest_minor = CUDAQ_RT_NVJITLINK_NEWEST_MINOR,
    .version_node = "libnvJitLink.so." CUDAQ_RT_STR(CUDAQ_RT_NVJITLINK_MAJOR),
#if CUDAQ_RT_NVJITLINK_MAJOR >= 13
    .wheel_lib_dir = "nvidia/cu" CUDAQ_RT_STR(CUDAQ_RT_NVJITLINK_MAJOR) "/lib",
    .null_input = NVJITLINK_ERROR_NULL_INPUT,
    .outdated = NVJITLINK_ERROR_OUTDATED_LIBRARY,
#else
    .wheel_lib_dir = "nvidia/nvjitlink/lib",
    .null_input = NVJITLINK_ERROR_INVALID_INPUT,
    .outdated = NVJITLINK_ERROR_INTERNAL,
#endif
};

ApiLinks *links() {
  return ApiLinks::process(this_major);
}

// The real library's function `name`, found on the first call through that name and kept in
// `slot`; null, after one line on stderr, where the real library has none.
void *real_function(ApiLinks &l, const char *name, std::atomic<void *> &slot) {
  if (void *p = slot.load(std::memory_order_acquire))
    return p;
  void *p = l.real().symbol(name);
  if (p) {
    slot.store(p, std::memory_order_release);
    return p;
  }
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  if (said.insert(name).second)
    std::fprintf(stderr,
                 "cudaq-rt-nvjitlink: error: %s: the real libnvJitLink (%s) has no %s: this "
                 "program was built with a newer nvJitLink header than the library it runs with\n",
                 name, l.real().path.c_str(), name);
  return nullptr;
}

template <class F, class Call>
nvJitLinkResult forward(const char *name, std::atomic<void *> &slot, Call call) {
  ApiLinks *l = links();
  if (!l)
    return NVJITLINK_ERROR_INTERNAL;
  auto real = reinterpret_cast<F>(real_function(*l, name, slot));
  if (!real)
    return this_major.outdated;
  return call(*l, real);
}

using CreateFn = ApiLinks::CreateFn;
using DestroyFn = ApiLinks::DestroyFn;
using AddDataFn = ApiLinks::AddDataFn;
using AddFileFn = ApiLinks::AddFileFn;
using CompleteFn = ApiLinks::CompleteFn;
using SizeFn = ApiLinks::SizeFn;
using OutputFn = ApiLinks::OutputFn;
using LogFn = ApiLinks::LogFn;

} // namespace

// Every function of the API: X(Name, its type, (parameters), the call on ApiLinks `l` with the
// real function `real`). The linked LTO-IR calls came with CUDA 13.
#define CUDAQ_RT_NVJITLINK_COMMON(X)                                                               \
  X(Create, CreateFn, (nvJitLinkHandle * h, uint32_t n, const char *const *o),                     \
    l.create(real, h, n, o))                                                                       \
  X(Destroy, DestroyFn, (nvJitLinkHandle * h), l.destroy(real, h))                                 \
  X(AddData, AddDataFn,                                                                            \
    (nvJitLinkHandle h, nvJitLinkInputType t, const void *d, size_t n, const char *name),          \
    l.add_data(real, h, t, d, n, name))                                                            \
  X(AddFile, AddFileFn, (nvJitLinkHandle h, nvJitLinkInputType t, const char *path),               \
    l.add_file(real, h, t, path))                                                                  \
  X(Complete, CompleteFn, (nvJitLinkHandle h), l.complete(real, h))                                \
  X(GetLinkedCubinSize, SizeFn, (nvJitLinkHandle h, size_t * n),                                   \
    l.output_size(real, LinkOutput::cubin, h, n))                                                  \
  X(GetLinkedCubin, OutputFn, (nvJitLinkHandle h, void *out),                                      \
    l.output(real, LinkOutput::cubin, h, out))                                                     \
  X(GetLinkedPtxSize, SizeFn, (nvJitLinkHandle h, size_t * n),                                     \
    l.output_size(real, LinkOutput::ptx, h, n))                                                    \
  X(GetLinkedPtx, OutputFn, (nvJitLinkHandle h, char *out),                                        \
    l.output(real, LinkOutput::ptx, h, out))                                                       \
  X(GetErrorLogSize, SizeFn, (nvJitLinkHandle h, size_t * n), l.error_log_size(real, h, n))        \
  X(GetErrorLog, LogFn, (nvJitLinkHandle h, char *out), l.error_log(real, h, out))                 \
  X(GetInfoLogSize, SizeFn, (nvJitLinkHandle h, size_t * n), l.info_log_size(real, h, n))          \
  X(GetInfoLog, LogFn, (nvJitLinkHandle h, char *out), l.info_log(real, h, out))
#if CUDAQ_RT_NVJITLINK_MAJOR >= 13
#define CUDAQ_RT_NVJITLINK_FUNCTIONS(X)                                                            \
  CUDAQ_RT_NVJITLINK_COMMON(X)                                                                     \
  X(GetLinkedLTOIRSize, SizeFn, (nvJitLinkHandle h, size_t * n),                                   \
    l.output_size(real, LinkOutput::ltoir, h, n))                                                  \
  X(GetLinkedLTOIR, OutputFn, (nvJitLinkHandle h, void *out),                                      \
    l.output(real, LinkOutput::ltoir, h, out))
#else
#define CUDAQ_RT_NVJITLINK_FUNCTIONS(X) CUDAQ_RT_NVJITLINK_COMMON(X)
#endif

// One exported name, `symbol`, forwarding to the real library's function of that name.
#define CUDAQ_RT_ENTRY(symbol, type, params, call)                                                 \
  CUDAQ_RT_EXPORT nvJitLinkResult symbol params {                                                  \
    static std::atomic<void *> slot{nullptr};                                                      \
    return forward<type>(CUDAQ_RT_STR(symbol), slot,                                               \
                         [&](ApiLinks &l, type real) { return call; });                            \
  }

// The versioned name __nvJitLink<fn>_<major>_<minor>.
#define CUDAQ_RT_VERSIONED(minor, fn, type, params, call)                                          \
  CUDAQ_RT_ENTRY(CUDAQ_RT_CAT(__nvJitLink##fn##_, CUDAQ_RT_NVJITLINK_MAJOR, _, minor), type,       \
                 params, call)

// Minors 0 to N of one function.
#define CUDAQ_RT_MINORS_0(M, ...) M(0, __VA_ARGS__)
#define CUDAQ_RT_MINORS_1(M, ...) CUDAQ_RT_MINORS_0(M, __VA_ARGS__) M(1, __VA_ARGS__)
#define CUDAQ_RT_MINORS_2(M, ...) CUDAQ_RT_MINORS_1(M, __VA_ARGS__) M(2, __VA_ARGS__)
#define CUDAQ_RT_MINORS_3(M, ...) CUDAQ_RT_MINORS_2(M, __VA_ARGS__) M(3, __VA_ARGS__)
#define CUDAQ_RT_MINORS_4(M, ...) CUDAQ_RT_MINORS_3(M, __VA_ARGS__) M(4, __VA_ARGS__)
#define CUDAQ_RT_MINORS_5(M, ...) CUDAQ_RT_MINORS_4(M, __VA_ARGS__) M(5, __VA_ARGS__)
#define CUDAQ_RT_MINORS_6(M, ...) CUDAQ_RT_MINORS_5(M, __VA_ARGS__) M(6, __VA_ARGS__)
#define CUDAQ_RT_MINORS_7(M, ...) CUDAQ_RT_MINORS_6(M, __VA_ARGS__) M(7, __VA_ARGS__)
#define CUDAQ_RT_MINORS_8(M, ...) CUDAQ_RT_MINORS_7(M, __VA_ARGS__) M(8, __VA_ARGS__)
#define CUDAQ_RT_MINORS_9(M, ...) CUDAQ_RT_MINORS_8(M, __VA_ARGS__) M(9, __VA_ARGS__)
#define CUDAQ_RT_MINORS_10(M, ...) CUDAQ_RT_MINORS_9(M, __VA_ARGS__) M(10, __VA_ARGS__)
#define CUDAQ_RT_MINORS_11(M, ...) CUDAQ_RT_MINORS_10(M, __VA_ARGS__) M(11, __VA_ARGS__)
#define CUDAQ_RT_MINORS_12(M, ...) CUDAQ_RT_MINORS_11(M, __VA_ARGS__) M(12, __VA_ARGS__)
#define CUDAQ_RT_MINORS_13(M, ...) CUDAQ_RT_MINORS_12(M, __VA_ARGS__) M(13, __VA_ARGS__)
#define CUDAQ_RT_MINORS_14(M, ...) CUDAQ_RT_MINORS_13(M, __VA_ARGS__) M(14, __VA_ARGS__)
#define CUDAQ_RT_MINORS_15(M, ...) CUDAQ_RT_MINORS_14(M, __VA_ARGS__) M(15, __VA_ARGS__)
#define CUDAQ_RT_EVERY_MINOR(fn, type, params, call)                                               \
  CUDAQ_RT_CAT2(CUDAQ_RT_MINORS_, CUDAQ_RT_NVJITLINK_NEWEST_MINOR)                                 \
  (CUDAQ_RT_VERSIONED, fn, type, params, call)

// The unversioned name, by an assembler label: the header defines that name as an inline wrapper.
#define CUDAQ_RT_UNVERSIONED(fn, type, params, call)                                               \
  CUDAQ_RT_EXPORT nvJitLinkResult cudaq_rt_unversioned_##fn params __asm__("nvJitLink" #fn);       \
  CUDAQ_RT_EXPORT nvJitLinkResult cudaq_rt_unversioned_##fn params {                               \
    static std::atomic<void *> slot{nullptr};                                                      \
    return forward<type>("nvJitLink" #fn, slot, [&](ApiLinks &l, type real) { return call; });     \
  }

#define CUDAQ_RT_ALL_NAMES(fn, type, params, call)                                                 \
  CUDAQ_RT_EVERY_MINOR(fn, type, params, call)                                                     \
  CUDAQ_RT_UNVERSIONED(fn, type, params, call)

CUDAQ_RT_NVJITLINK_FUNCTIONS(CUDAQ_RT_ALL_NAMES)

CUDAQ_RT_EXPORT nvJitLinkResult nvJitLinkVersion(unsigned int *major, unsigned int *minor) {
  auto *l = links();
  return l ? l->real().api.version(major, minor) : NVJITLINK_ERROR_INTERNAL;
}

CUDAQ_RT_EXPORT void *__nvJitLinkAPI(unsigned id) {
  static std::atomic<void *> slot{nullptr};
  auto *l = links();
  if (!l)
    return nullptr;
  auto real = reinterpret_cast<void *(*)(unsigned)>(real_function(*l, "__nvJitLinkAPI", slot));
  return real ? real(id) : nullptr;
}

// The real library's entry point `name` (as the key's nvJitLink identity needs it), or null.
CUDAQ_RT_EXPORT void *cudaq_rt_nvjitlink_real_symbol(const char *name) {
  auto *l = links();
  return l && name ? l->real().symbol(name) : nullptr;
}

// Links this thread makes while `on` go straight to the real library (cudaq-rt's own).
CUDAQ_RT_EXPORT void cudaq_rt_nvjitlink_bypass(int on) {
  cudaq_rt::ApiLinks::set_bypass(on != 0);
}
