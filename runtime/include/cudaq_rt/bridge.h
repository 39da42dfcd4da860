// cudaq_rt/bridge.h: the runtime's loader of bridge plugins (the C ABI a bridge implements is
// cudaq_rt/bridge_plugin.h). Finds a bridge library by name on the search path, dlopens it, checks
// its versioned entry point, and wraps its instances.
#pragma once

#include "cudaq_rt/bridge_plugin.h"
#include "cudaq_rt/error.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

class Bridge;

// What the launcher tells a bridge about an instance before creating it (cudaq_rt_bridge_launch):
// the dispatch kernel's threads that poll the ring side by side (1, 32 for the warp form, 32 * B
// for the warp dispatcher of B blocks, 0: not known), and the instance's place among one
// service's, one per GPU.
struct BridgeLaunch {
  uint32_t polling_lanes = 0;
  uint32_t instance = 0;
};

// A loaded bridge library. Copies share the dlopen handle; the library is unloaded when the last
// copy, and the last Bridge created from it, are gone.
class BridgeLibrary {
public:
  // `name_or_path` is a bridge name (`loopback`: letters, digits, '_' and '-') found on
  // bridge_search_path(), or a path to a shared library (anything with a '/' or ending in .so).
  static Expected<BridgeLibrary> open(std::string_view name_or_path);

  const std::filesystem::path &path() const { return path_; }
  const cudaq_rt_bridge_ops &ops() const { return *ops_; }
  std::string_view name() const { return ops_->name; }

  // The configuration an instance for `launch` is to be created with, from the user's `config`:
  // the bridge's answer (cudaq_rt_bridge_ops::instance_config), or `config` as it is from a bridge
  // without that operation (which cannot be told of more than one warp: an error).
  Expected<std::string> instance_config(const BridgeLaunch &launch,
                                        const std::string &config) const;
  // A new instance; see cudaq_rt_bridge_ops::create.
  Expected<Bridge> create(const std::string &config = {}) const;

private:
  static Expected<BridgeLibrary> load(const std::filesystem::path &path);
  BridgeLibrary(std::filesystem::path path, std::shared_ptr<void> handle,
                const cudaq_rt_bridge_ops *ops)
      : path_(std::move(path)), handle_(std::move(handle)), ops_(ops) {}

  std::filesystem::path path_;
  std::shared_ptr<void> handle_;
  const cudaq_rt_bridge_ops *ops_;
};

// One bridge instance, destroyed with this object.
class Bridge {
public:
  Bridge(Bridge &&other) noexcept;
  Bridge &operator=(Bridge &&other) noexcept;
  ~Bridge();

  void *device_context() const { return ops_->device_context(bridge_); }
  uint32_t slot_size() const { return ops_->slot_size(bridge_); }
  uint32_t num_slots() const { return ops_->num_slots(bridge_); }
  // Dynamic shared memory the device hooks want the dispatch kernel launched with (0: none, also
  // for a bridge without the operation).
  uint32_t dispatch_shared_bytes() const;
  const cudaq_rt_bridge_ops &ops() const { return *ops_; }
  cudaq_rt_bridge *get() const { return bridge_; }
  // Gives up the instance without destroying it: for an instance a hung kernel still uses, whose
  // destroy would wait for that kernel. It stays where the process can reach it until it exits
  // (so that a leak checker sees it kept, not lost).
  void abandon();

  // Host-fed bridges: false when the ring is full (send) or the response is not there yet
  // (receive, else the frame's size). `feeder` (below feeders()) is the share of the slots the
  // calling thread drives; 0, the instance, where the bridge has one.
  Expected<bool> send(std::span<const uint8_t> frame, uint32_t feeder = 0);
  Expected<std::optional<size_t>> receive(std::span<uint8_t> buffer, uint32_t feeder = 0);
  // Host threads that may feed the instance side by side, one feeder each
  // (cudaq_rt_bridge_ops::feeder): 1 for a bridge without them.
  uint32_t feeders() const { return uint32_t(feeders_.size()); }
  // The batched forms (cudaq_rt_bridge_ops::send_batch, receive_batch; a loop over send and
  // receive where the bridge has none): how many frames were queued, or responses taken, in
  // order. On an error, the ones before it were queued or taken and the count says how many.
  struct BatchResult {
    size_t done = 0;
    std::optional<Error> error;
  };
  BatchResult send_batch(std::span<const void *const> frames, std::span<const size_t> sizes,
                         uint32_t feeder = 0);
  BatchResult receive_batch(std::span<uint8_t> buffer, size_t stride, std::span<size_t> sizes,
                            uint32_t feeder = 0);

  // Self-fed bridges (a socket): see cudaq_rt_bridge_ops::start, drain and stop. drain answers
  // false when the time ran out before every request taken was answered.
  bool self_fed() const;
  Status start();
  Expected<bool> drain(double timeout_s);
  // For a swap of the kernel: takes nothing more at once (cudaq_rt_bridge_ops::hold), or drains
  // where the bridge has no hold.
  Expected<bool> hold(double timeout_s);
  void stop();
  // Where clients reach it, or empty.
  std::string address() const;
  // The bridge's live counters, in its order (empty for a bridge without them).
  std::vector<std::pair<std::string, uint64_t>> counters() const;
  // Adds its latency histogram (CUDAQ_RT_LATENCY_BUCKETS counts) into `buckets`; false when the
  // bridge measures none.
  bool add_latency(std::span<uint64_t, CUDAQ_RT_LATENCY_BUCKETS> buckets) const;

private:
  friend class BridgeLibrary;
  Bridge(std::shared_ptr<void> handle, const cudaq_rt_bridge_ops *ops, cudaq_rt_bridge *bridge);
  // Why the last call on `on` (the instance or one of its feeders) failed.
  Error error(std::string_view op, cudaq_rt_bridge *on = nullptr) const;
  // What a drain or a hold answered: done (true), out of time (false), or the bridge's error.
  Expected<bool> in_time(cudaq_rt_bridge_result r, std::string_view op) const;

  std::shared_ptr<void> handle_;
  const cudaq_rt_bridge_ops *ops_;
  cudaq_rt_bridge *bridge_;
  std::vector<cudaq_rt_bridge *> feeders_; // feeder i; [0] is bridge_
};

// Where bridge names are looked up, in order: each directory of $CUDAQ_RT_BRIDGE_PATH (colon
// separated), <directory of the running executable>/../lib/cudaq-rt/bridges, and the build
// tree's bridge directory (so tools and tests run uninstalled).
std::vector<std::filesystem::path> bridge_search_path();

// "loopback" -> "libcudaq_rt_bridge_loopback.so".
std::string bridge_library_file_name(std::string_view name);

// The library file of a bridge, without loading it: linking reads the bridge's device hooks from
// the file's __nv_relfatbin, and a build machine need not have what the bridge's host side links
// against (a NIC's driver, say). `name` is what link records and messages call it: the NAME of
// libcudaq_rt_bridge_NAME.so, else the file's stem.
struct BridgeLocation {
  std::string name;
  std::filesystem::path path;
};
Expected<BridgeLocation> find_bridge(std::string_view name_or_path);

} // namespace cudaq_rt
