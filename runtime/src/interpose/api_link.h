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

class ApiLinks {
public:
  // `cache` may be null: every link then goes to the real library (and is still recorded).
  ApiLinks(const RealNvJitLink &real, std::shared_ptr<const LinkCache> cache,
           InterposerSettings settings);

  // The process's: the real library, the cache from the environment; warnings go to stderr once.
  // Null when there is no real library (the error was printed).
  static ApiLinks *process();

  nvJitLinkResult create(nvJitLinkHandle *handle, uint32_t count, const char *const *options);
  nvJitLinkResult destroy(nvJitLinkHandle *handle);
  nvJitLinkResult add_data(nvJitLinkHandle h, nvJitLinkInputType type, const void *data,
                           size_t size, const char *name);
  nvJitLinkResult add_file(nvJitLinkHandle h, nvJitLinkInputType type, const char *path);
  nvJitLinkResult complete(nvJitLinkHandle h);
  nvJitLinkResult output_size(nvJitLinkHandle h, bool ptx, size_t *size);
  nvJitLinkResult output(nvJitLinkHandle h, bool ptx, void *out);
  nvJitLinkResult info_log_size(nvJitLinkHandle h, size_t *size);
  nvJitLinkResult info_log(nvJitLinkHandle h, char *out);

  const RealNvJitLink &real() const { return real_; }

  // Links made on this thread while it is set go straight to the real library: cudaq-rt's own
  // links, which go through its cache already (cudaq_rt_nvjitlink_bypass).
  static void set_bypass(bool on);

private:
  struct Handle;
  std::shared_ptr<Handle> find(nvJitLinkHandle h) const;
  // The record of a handle the real library has just accepted an input for (`r`), locked, while
  // its link is still open; else no state.
  struct OpenRecord {
    std::shared_ptr<Handle> state;
    std::unique_lock<std::mutex> lock;
  };
  OpenRecord open_record(nvJitLinkResult r, nvJitLinkHandle h) const;
  // Complete on a handle whose inputs are all known.
  nvJitLinkResult complete_cached(nvJitLinkHandle h, Handle &state);
  void record(const Handle &state, const LinkKey &key) const;
  void say(const std::string &line) const;
  // What the remote cache did: its warnings always (it warns once itself), its notes as say().
  void report(const LinkCache::RemoteLog &log) const;

  const RealNvJitLink &real_;
  std::shared_ptr<const LinkCache> cache_;
  InterposerSettings settings_;
  mutable std::mutex mutex_;
  std::unordered_map<nvJitLinkHandle, std::shared_ptr<Handle>> handles_;
};

// The line a cache hit adds to the info log.
std::string cache_hit_log_line(const LinkKey &key, bool remote);

} // namespace cudaq_rt
