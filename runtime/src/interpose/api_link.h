// The interposer's links: for every handle a program creates, its options and inputs in order;
// at nvJitLinkComplete, the link cache's entry for them, or the real link, stored on success.
//
// What the program sees is the real library's answer to every call but three: on a cache hit,
// nvJitLinkComplete succeeds without linking, the linked cubin (or PTX) is the entry's, and the
// info log is the original link's with one line saying where it came from. Everything the real
// library decides (options, inputs, misuse, failed links) it still decides: every call but a hit's
// Complete goes to it, on the real handle the program holds.
#pragma once

#include "cache/link_cache.h"
#include "interpose/real_nvjitlink.h"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace cudaq_rt {

// What the interposer reads from its environment (man/cudaq-rt-nvjitlink.7).
struct InterposerSettings {
  std::filesystem::path record_dir; // CUDAQ_RT_NVJITLINK_RECORD: a package per distinct link
  bool verbose = false;             // CUDAQ_RT_NVJITLINK_VERBOSE: a line per link on stderr
  static InterposerSettings of_process();
};

// Which output of a link a call asks for.
enum class LinkOutput { cubin, ptx, ltoir };

class ApiLinks {
public:
  // `cache` may be null: every link then goes to the real library (and is still recorded).
  ApiLinks(const RealNvJitLink &real, const NvJitLinkMajor &major,
           std::shared_ptr<const LinkCache> cache, InterposerSettings settings);

  // The process's: the real library of `major`, the cache from the environment; warnings go to
  // stderr once. Null when there is no real library (the error was printed).
  static ApiLinks *process(const NvJitLinkMajor &major);

  // Each call takes the real library's function of the name the program called (`real`), which
  // it forwards to with the handle's lock held: the real library receives exactly the inputs
  // the handle's record names, in its order, however many threads use the handle.
  using CreateFn = decltype(NvJitLinkFunctions::create);
  using DestroyFn = decltype(NvJitLinkFunctions::destroy);
  using AddDataFn = decltype(NvJitLinkFunctions::add_data);
  using AddFileFn = decltype(NvJitLinkFunctions::add_file);
  using CompleteFn = decltype(NvJitLinkFunctions::complete);
  using SizeFn = decltype(NvJitLinkFunctions::cubin_size);
  using OutputFn = nvJitLinkResult (*)(nvJitLinkHandle, void *);
  using LogFn = decltype(NvJitLinkFunctions::info_log);

  nvJitLinkResult create(CreateFn real, nvJitLinkHandle *handle, uint32_t count,
                         const char *const *options);
  nvJitLinkResult destroy(DestroyFn real, nvJitLinkHandle *handle);
  nvJitLinkResult add_data(AddDataFn real, nvJitLinkHandle h, nvJitLinkInputType type,
                           const void *data, size_t size, const char *name);
  nvJitLinkResult add_file(AddFileFn real, nvJitLinkHandle h, nvJitLinkInputType type,
                           const char *path);
  nvJitLinkResult complete(CompleteFn real, nvJitLinkHandle h);
  nvJitLinkResult output_size(SizeFn real, LinkOutput which, nvJitLinkHandle h, size_t *size);
  // `real` is the output call of `which` (GetLinkedPtx takes a char *, the same pointer).
  nvJitLinkResult output(OutputFn real, LinkOutput which, nvJitLinkHandle h, void *out);
  nvJitLinkResult info_log_size(SizeFn real, nvJitLinkHandle h, size_t *size);
  nvJitLinkResult info_log(LogFn real, nvJitLinkHandle h, char *out);
  // The error log: what the real handle logged (a hit logs no error), under the handle's lock.
  nvJitLinkResult error_log_size(SizeFn real, nvJitLinkHandle h, size_t *size);
  nvJitLinkResult error_log(LogFn real, nvJitLinkHandle h, char *out);

  const RealNvJitLink &real() const { return real_; }
  const NvJitLinkMajor &major() const { return major_; }

  // Links made on this thread while it is set go straight to the real library: cudaq-rt's own
  // links, which go through its cache already (cudaq_rt_nvjitlink_bypass).
  static void set_bypass(bool on);

private:
  struct Handle;
  std::shared_ptr<Handle> find(nvJitLinkHandle h) const;
  // The record of handle `h`, locked while this lives: held across a forwarded call, so that the
  // real library and the record see the same calls in the same order. No state for a handle the
  // interposer keeps no record of.
  struct Locked {
    std::shared_ptr<Handle> state;
    std::unique_lock<std::mutex> lock;
  };
  Locked locked(nvJitLinkHandle h) const;
  // Whether the handle was answered from the cache (its real handle never completed).
  static bool cached(const Locked &s);
  // Complete on a handle whose inputs are all known.
  nvJitLinkResult complete_cached(CompleteFn real, nvJitLinkHandle h, Handle &state);
  // A hit's handle asked for what only the real link makes (its LTO-IR): the real link, now.
  void complete_for_real(nvJitLinkHandle h, Handle &state);
  void record(const Handle &state, const LinkKey &key) const;
  void say(const std::string &line) const;
  // What the remote cache did: its warnings always (it warns once itself), its notes as say().
  void report(const LinkCache::RemoteLog &log) const;
  const Expected<NvJitLinkIdentity> &identity() const;

  const RealNvJitLink &real_;
  const NvJitLinkMajor &major_;
  std::shared_ptr<const LinkCache> cache_;
  InterposerSettings settings_;
  mutable std::mutex mutex_;
  std::unordered_map<nvJitLinkHandle, std::shared_ptr<Handle>> handles_;
  mutable std::once_flag identity_once_;
  mutable std::optional<Expected<NvJitLinkIdentity>> identity_;
};

// The line a cache hit adds to the info log.
std::string cache_hit_log_line(const LinkKey &key, bool remote);

} // namespace cudaq_rt
