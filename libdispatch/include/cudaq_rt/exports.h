/* cudaq_rt/exports.h: how handlers and dispatch kernels are exported, and how cudaq-rt-pack finds
 * them.
 *
 * A handler is exported twice:
 *
 * - on the device, as a pointer global with C linkage named cudaq_rt_handler__<name>, set to
 *   cudaq_rt_handler_call__<name>, a function with C linkage that calls the handler (the handler
 *   itself may be static; it is inlined into this one). A device function pointer is only valid
 *   inside the module that defines it, so the runtime reads these globals out of the linked module
 *   to fill the dispatch kernel's function table, and cudaq-rt-link keeps them alive
 *   (-variables-used) and checks each linked cubin defines them. The named function lets a link
 *   that sees the whole program (cudaq-rt-link --lto whole) call the handler directly: the
 *   generated unit of direct calls (runtime/src/link/direct_calls.cpp) compares the table's pointer
 *   with it and calls it by name, so that LTO can inline the handler into the dispatch kernel;
 * - on the host, as a 128-byte cudaq_rt_export_record in the allocated section .cudaq_rt_exports.
 *   Section headers survive `strip`, symbol tables do not, so this is how cudaq-rt-pack finds the
 *   exports of stripped executables and shared libraries. The host linker concatenates the records
 *   of every translation unit; each is 8-aligned and a multiple of 8 long, so they stay back to
 *   back.
 *
 * Usable from C and C++ (the record) and CUDA (the macros). */
#ifndef CUDAQ_RT_EXPORTS_H
#define CUDAQ_RT_EXPORTS_H

#include "cudaq_rt/wire.h"

#define CUDAQ_RT_EXPORTS_SECTION ".cudaq_rt_exports"
#define CUDAQ_RT_EXPORT_MAGIC 0x58525143u /* 'CQRX' */
/* Version 2: a handler's global points to its cudaq_rt_handler_call__<name> (above). Version 1
 * records, which said nothing of it, are still read. */
#define CUDAQ_RT_EXPORT_VERSION 2u
#define CUDAQ_RT_EXPORT_OLDEST_VERSION 1u
#define CUDAQ_RT_EXPORT_HANDLER_KIND 1u
#define CUDAQ_RT_EXPORT_DISPATCH_KERNEL_KIND 2u
#define CUDAQ_RT_EXPORT_GLOBAL_KIND 3u
/* A handler that is safe to run in several threads at once (no state written outside its own
 * output): the only kind the warp dispatcher may call. */
#define CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND 4u
/* A set of optional device hooks a bridge's code defines (the name says which set: "lone", the
 * lone form of cudaq_rt/dispatch.h), so that cudaq-rt-link links the dispatch kernel that uses
 * them. */
#define CUDAQ_RT_EXPORT_BRIDGE_HOOKS_KIND 5u
#define CUDAQ_RT_EXPORT_NAME_CAPACITY 112u
#define CUDAQ_RT_HANDLER_SYMBOL_PREFIX "cudaq_rt_handler__"
#define CUDAQ_RT_HANDLER_CALL_PREFIX "cudaq_rt_handler_call__"

typedef struct cudaq_rt_export_record {
  uint32_t magic;       /* CUDAQ_RT_EXPORT_MAGIC */
  uint16_t version;     /* CUDAQ_RT_EXPORT_VERSION */
  uint16_t kind;        /* CUDAQ_RT_EXPORT_*_KIND */
  uint32_t function_id; /* FNV-1a of name (handlers), 0 for kernels */
  uint32_t name_size;   /* bytes of name before its NUL */
  char name[CUDAQ_RT_EXPORT_NAME_CAPACITY];
} cudaq_rt_export_record;

#ifdef __cplusplus
static_assert(sizeof(cudaq_rt_export_record) == 128, "export records are 128 bytes");
#endif

/* The handler ABI: returns the status (0 ok, > 0 handler-defined). `input` holds arg_len bytes,
 * `output` has room for max_result_len bytes, and the two never overlap. */
typedef int (*cudaq_rt_handler_fn)(const void *input, void *output, uint32_t arg_len,
                                   uint32_t max_result_len, uint32_t *result_len);

#if defined(__CUDACC__)

#if defined(__has_attribute)
#if __has_attribute(retain)
#define CUDAQ_RT_RETAIN_ retain,
#endif
#endif
#ifndef CUDAQ_RT_RETAIN_
#define CUDAQ_RT_RETAIN_
#endif

// clang-format off
#define CUDAQ_RT_EXPORT_RECORD_(kind, id, name)                                                    \
  static_assert(sizeof(#name) <= CUDAQ_RT_EXPORT_NAME_CAPACITY, "export name too long: " #name);   \
  __attribute__((section(CUDAQ_RT_EXPORTS_SECTION), used, CUDAQ_RT_RETAIN_ aligned(8)))            \
  static const cudaq_rt_export_record cudaq_rt_export_record__##name = {                           \
      CUDAQ_RT_EXPORT_MAGIC, CUDAQ_RT_EXPORT_VERSION, kind, id, sizeof(#name) - 1, #name}
// clang-format on

/* Exports `fn` (which may be static) under `name`, a C identifier; its function_id is
 * cudaq_rt_function_id("name"). With one argument, `fn` is exported under its own name: the form
 * CUDA-Q realtime's device_code.h uses, where the application's function table (here: a package's
 * aliases, cudaq-rt-pack --alias, or the C API's cudaq_rt_set_function) chooses the function_id
 * a client sends. The global sits in an extern "C" block on purpose: written as
 * `extern "C" __device__ T x = ...;` nvcc takes it as a declaration and the host link fails on an
 * undefined shadow. */
#define CUDAQ_RT_EXPORT_HANDLER(...)                                                               \
  CUDAQ_RT_PICK_2_(__VA_ARGS__, CUDAQ_RT_EXPORT_HANDLER_AS_, CUDAQ_RT_EXPORT_HANDLER_SELF_, )      \
  (__VA_ARGS__)
#define CUDAQ_RT_PICK_2_(a1, a2, chosen, ...) chosen
#define CUDAQ_RT_EXPORT_HANDLER_SELF_(fn) CUDAQ_RT_EXPORT_HANDLER_AS_(fn, fn)
#define CUDAQ_RT_EXPORT_HANDLER_AS_(fn, name)                                                      \
  CUDAQ_RT_EXPORT_HANDLER_GLOBALS_(fn, name)                                                       \
  CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_HANDLER_KIND, ::cudaq_rt::function_id(#name), name)
/* The named call and the pointer global of a handler export (see the top of this file). */
#define CUDAQ_RT_EXPORT_HANDLER_GLOBALS_(fn, name)                                                 \
  extern "C" {                                                                                     \
  __device__ int cudaq_rt_handler_call__##name(const void *input, void *output, uint32_t arg_len,  \
                                               uint32_t max_result_len, uint32_t *result_len) {    \
    return fn(input, output, arg_len, max_result_len, result_len);                                 \
  }                                                                                                \
  __device__ cudaq_rt_handler_fn cudaq_rt_handler__##name = cudaq_rt_handler_call__##name;         \
  }

/* As CUDAQ_RT_EXPORT_HANDLER (one or two arguments), and promises that `fn` may run in several
 * threads at once: it writes nothing but its own output and result_len (reads of shared tables
 * are fine). The warp dispatcher (cudaq-rt-link --dispatcher warp) serves 32 requests at a time,
 * one per lane, and links only packages whose every handler makes this promise. */
#define CUDAQ_RT_EXPORT_HANDLER_CONCURRENT(...)                                                    \
  CUDAQ_RT_PICK_2_(__VA_ARGS__, CUDAQ_RT_EXPORT_CONCURRENT_AS_,                                    \
                   CUDAQ_RT_EXPORT_CONCURRENT_SELF_, )                                             \
  (__VA_ARGS__)
#define CUDAQ_RT_EXPORT_CONCURRENT_SELF_(fn) CUDAQ_RT_EXPORT_CONCURRENT_AS_(fn, fn)
#define CUDAQ_RT_EXPORT_CONCURRENT_AS_(fn, name)                                                   \
  CUDAQ_RT_EXPORT_HANDLER_GLOBALS_(fn, name)                                                       \
  CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND, ::cudaq_rt::function_id(#name), \
                          name)

/* The name CUDA-Q realtime uses for the same job: CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(fn), or
 * (fn, name). */
#define CUDAQ_REALTIME_EXPORT_DEVICE_FUNCTION(...) CUDAQ_RT_EXPORT_HANDLER(__VA_ARGS__)

/* Marks an extern "C" __global__ kernel with the cudaq_rt_dispatch_kernel_fn signature
 * (cudaq_rt/dispatch.h) as a custom dispatch kernel that cudaq-rt-pack records in the manifest. */
#define CUDAQ_RT_EXPORT_DISPATCH_KERNEL(kernel)                                                    \
  CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_DISPATCH_KERNEL_KIND, 0u, kernel)

/* Marks a __device__ global with C linkage (defined in an extern "C" block) as state the host
 * sets before the dispatch kernel starts (cudaq-rt-run --global NAME=...). nvJitLink makes every
 * global that no -variables-used names internal to the module, where the driver cannot find it
 * by name: cudaq-rt-link names each exported global, so it stays visible. */
#define CUDAQ_RT_EXPORT_GLOBAL(global)                                                             \
  CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_GLOBAL_KIND, 0u, global)

/* In a bridge's device code that defines every hook of an optional set (cudaq_rt/dispatch.h):
 * CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone). cudaq-rt-link then links the built-in unified kernel's build
 * that uses them; without it, the build that does not (which links with any bridge). */
#define CUDAQ_RT_EXPORT_BRIDGE_HOOKS(form)                                                         \
  CUDAQ_RT_EXPORT_RECORD_(CUDAQ_RT_EXPORT_BRIDGE_HOOKS_KIND, 0u, form)

#endif /* __CUDACC__ */

#endif /* CUDAQ_RT_EXPORTS_H */
