// load/: the only stage that talks to the CUDA driver (gpu.h): the cubin for a GPU
// (select_cubin.h), the load path (this file), clients of a host-fed bridge (client.h), a service
// over GPUs (serve.h), the C API (capi.cpp); cudaq-rt-run's command (command/run_command.h) drives it.
//
// The load path: a package on a GPU, serving. The one launcher every program uses (cudaq-rt-run,
// the tests, the benchmarks): open and verify the package, choose a cubin for the GPU's exact
// arch (select_cubin.h), load it eagerly, build the function table, set host-given globals,
// create the bridge instance and launch the dispatch kernel; then stop it, and say why when it
// cannot be stopped or has failed. server.cpp explains the order of these steps.
#pragma once

#include "base/digest.h"
#include "cache/link_cache.h"
#include "cudaq_rt/bridge.h"
#include "cudaq_rt/dispatch.h"
#include "formats/cubin.h"
#include "load/global_value.h"
#include "load/gpu.h"
#include "load/select_cubin.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace cudaq_rt {

class BlobSource;

struct LoadOptions {
  // Whose signatures a package and a cache entry need (trusted), and what signs the entries a
  // link at load stores (signer): resolved once by the caller (resolve_trust, signing.h), never
  // here.
  TrustPolicy trust;
  std::filesystem::path package;
  // A package from a registry's store (oci/store.h): the blobs it lacks come from here.
  std::shared_ptr<const BlobSource> blob_source;
  // --list only: the arch to say what would load for, with no GPU asked.
  std::optional<TargetArch> arch;
  int device = 0;
  LinkSettings link;            // bridge, dispatcher, and the options of a link at load
  std::string bridge_config;    // the bridge instance's "key=value,..."
  uint32_t bridge_instance = 0; // its place among a service's instances, one per GPU (serve.h)
  CubinPolicy policy;
  CacheRequest cache; // and the trust: --sign, --trust (its trusted keys vet the package too)
  // The package is the running process's own device code (cudaq_rt_open_self), vouched for by
  // the files the process runs: --trust does not ask it for a signature (cache entries still do).
  bool own_code = false;
  std::vector<GlobalValue> globals; // written before launch; each exactly its global's size
  std::optional<LaunchShape> shape; // default 1 block of 1 thread
  double stop_timeout_s = 5;
};

// Milliseconds spent on each step of start().
struct LoadTimes {
  double context_ms = 0; // driver and the device's primary context
  double open_ms = 0;    // package open, every blob verified, the link planned
  double cubin_ms = 0;   // package or cache lookup, or the link at load
  double load_ms = 0;    // module load, kernel and globals resolved, table built, bridge created
  double launch_ms = 0;
  // From the launch to the first response received (set by the first receive()).
  std::optional<double> first_response_ms;
};

struct LoadReport {
  std::filesystem::path package;
  GpuDevice device;
  CubinSource source = CubinSource::package;
  LinkRecord record; // of the cubin that was loaded
  std::string bridge;
  std::string dispatcher;
  std::string kernel;
  std::vector<std::string> handlers; // as exported, in the manifest's order
  std::vector<AliasEntry> aliases;   // the package's wire names for handlers
  uint32_t slot_size = 0;
  uint32_t num_slots = 0;
  LaunchShape shape;
  LoadTimes times;
  std::vector<std::string> warnings;
  std::vector<std::string> notes; // what the remote cache did, for -v
};

// Where one GPU, or one arch asked for, would get its cubin.
struct LoadTarget {
  std::optional<GpuDevice> device;   // none for an arch asked for: no GPU was asked
  std::string arch;                  // the device's, or the one asked for
  std::optional<CubinSource> source; // where the cubin would come from; nullopt: nowhere
  std::string why_not;               // with no source
  bool loadable() const { return source.has_value(); }
};

// What would load on a GPU, found the way start() finds it, without loading anything: the
// runtime's view of a package (cudaq-rt-run --list).
struct LoadPreview {
  std::filesystem::path package;
  std::string bridge;
  std::string dispatcher;
  std::vector<std::string> handlers;
  std::vector<AliasEntry> aliases;
  std::vector<LinkRecord> links; // the package's
  // LoadOptions::arch's, else the GPU's; none where the machine has no GPU and no arch was asked
  // (no_gpu says why): the package alone is listed.
  std::vector<LoadTarget> targets;
  std::string no_gpu;
  std::vector<std::string> warnings;
  bool loadable() const {
    return std::all_of(targets.begin(), targets.end(),
                       [](const LoadTarget &t) { return t.loadable(); });
  }
};
Expected<LoadPreview> preview_load(const LoadOptions &options, Gpu &gpu = driver_gpu());
// The package alone, opened, checked under --trust and planned as a load would, asking no GPU (no
// targets): what a request is checked against before a context is paid for.
Expected<LoadPreview> preview_package(const LoadOptions &options);
// What the load path checks first under --trust, alone and without a GPU: the package opened and
// its signatures checked against the trusted keys (none configured: nothing to check). The C API
// asks this before it looks for a GPU, so that a refusal is the same on any machine.
Status check_package_trust(const LoadOptions &options);
std::string format_preview(const LoadPreview &preview);
nlohmann::json preview_json(const LoadPreview &preview);

// The next code of a running server, made ready off the GPU's path while the old kernel serves
// (Server::stage): the package opened and verified (its signatures under --trust), the cubin for
// this GPU picked or linked, the globals checked against the cubin's symbol table, and the
// function table the server serves checked against the new exports. Server::swap puts it in.
struct StagedLoad {
  LoadOptions options;
  LoadReport report; // what the load of it reports once swapped in (times: stage only)
  std::vector<uint8_t> cubin;
  CubinInfo symbols; // the cubin's symbol table: where its globals lie
  Digest manifest;   // the package's manifest digest: the same as the running one's is no change
  // Only the globals changed (same manifest, same cubin): no module is swapped, the values are
  // written between two requests (Server::swap).
  bool globals_only = false;
  double stage_ms = 0;
};

// How one swap went, in milliseconds on the host's clock. hold: from the moment the bridge took
// no more requests to the old kernel's end (what it held was answered first); swap: the new
// module loaded, resolved and written, the old one unloaded; launch: the new kernel launched and
// the bridge taking requests again. gap_ms() is the time no kernel took a request.
struct SwapTimes {
  double hold_ms = 0;
  double swap_ms = 0;
  double launch_ms = 0;
  // Within swap: the new module's load with its kernel (cuModuleLoadData, cuFuncLoad), and the
  // old module's unload.
  double load_ms = 0;
  double unload_ms = 0;
  double gap_ms() const { return hold_ms + swap_ms + launch_ms; }
};

class Server {
public:
  // Everything up to and including the launch; on any error, nothing is left running.
  static Expected<std::unique_ptr<Server>> start(const LoadOptions &options,
                                                 Gpu &gpu = driver_gpu());
  // Everything but the launch: the module is loaded, the function table built (every handler
  // under its own name's function_id and the package's aliases), the globals written and the
  // bridge instance created. The caller may then look handlers up, replace the table, write
  // globals, and launch with relaunch() (the C API, cudaq_rt.h, works this way). A process that
  // serves on several GPUs loads every GPU's module before any kernel starts (serve.cpp): a
  // module load (the driver loads a library into every context) waits behind a persistent kernel.
  static Expected<std::unique_ptr<Server>> load(const LoadOptions &options,
                                                Gpu &gpu = driver_gpu());
  // Stops a running kernel first. A hung kernel's resources are left to the process's end:
  // freeing them would wait for the kernel.
  ~Server();
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;

  const LoadReport &report() const { return report_; }
  Bridge &bridge() { return *bridge_; }
  // The counters, read live from mapped memory.
  cudaq_rt_dispatch_stats stats() const;
  // The handler name behind a function_id, or empty.
  std::string handler_name(uint32_t function_id) const;
  // A handler export's device address in the loaded module (its cudaq_rt_handler__<name>
  // global's value), or nullopt when the package exports no such handler.
  std::optional<GpuPointer> handler_address(const std::string &name) const;
  // The handler export whose address this is, or empty.
  std::string handler_at(GpuPointer address) const;
  // Replaces the function table while the kernel is not running. Every entry's handler must be
  // the address of one of the module's handlers (handler_address()): any other would have the
  // kernel jump to an address outside the module. function_ids must be unique.
  // `custom`: the application's table, which a reload carries over by handler name (else the
  // default one, which a reload takes from the new package).
  Status set_function_table(std::span<const cudaq_rt_function_entry> table, bool custom = true);
  // A function table checked against a module's handler addresses: sorted by function_id, each
  // entry's handler named.
  struct Table {
    std::vector<cudaq_rt_function_entry> entries;
    std::vector<std::pair<uint32_t, std::string>> names; // function_id -> handler, sorted
  };
  // Writes a __device__ global exported with CUDAQ_RT_EXPORT_GLOBAL while the kernel is not
  // running; `bytes` must be exactly its size.
  Status set_global(const std::string &name, std::span<const uint8_t> bytes);

  // Host-fed bridges: queue a request frame (false: every slot is in flight), take the oldest
  // response (nullopt: not there yet). The server remembers what is in flight, to say which
  // request a failed kernel was serving.
  Expected<bool> send(std::span<const uint8_t> frame);
  Expected<std::optional<size_t>> receive(std::span<uint8_t> buffer);
  // The batched forms (Bridge::send_batch, receive_batch): how many frames were queued, or
  // responses taken (response i at buffer + i * stride, sizes[i] bytes), 0 when none could be.
  // With a bridge that has several feeders (Bridge::feeders), one thread per feeder may call
  // these side by side, each with its own `feeder`, and check() from any of them.
  Expected<size_t> send_batch(std::span<const void *const> frames, std::span<const size_t> sizes,
                              uint32_t feeder = 0);
  Expected<size_t> receive_batch(std::span<uint8_t> buffer, size_t stride, std::span<size_t> sizes,
                                 uint32_t feeder = 0);
  // Host threads that may feed the bridge side by side (Bridge::feeders): 1 for most bridges.
  uint32_t feeders() const { return bridge_ ? bridge_->feeders() : 1u; }

  // Copies a __device__ global of the loaded module (exported with CUDAQ_RT_EXPORT_GLOBAL, so
  // that the link kept it by name) into `out`, which must be exactly its size. Only while the
  // kernel is stopped: what a running kernel writes has no defined moment to be read.
  Status read_global(const std::string &name, std::span<uint8_t> out);

  // An error once the kernel has ended by itself (a fault, a trap), naming what it served.
  Status check();
  // Sets the shutdown flag and waits up to the stop timeout. A kernel that does not stop is hung:
  // the error names it and what it was serving, and hung() turns true. A self-fed bridge (UDP) is
  // drained first: it takes no more requests, and those it took are answered before the flag is
  // set (waiting up to the stop timeout for them), then its threads end.
  Status stop() { return stop(false); }
  // Launches the kernel after load(), or again on the same bridge instance after stop().
  Status relaunch();

  // Hot reload (reload.cpp). stage() reads everything the next code needs while the kernel
  // serves, touching nothing of the server: any thread may call it. It is refused (the error is
  // why) when the next code cannot serve here: another bridge or kernel shape (the ring and the
  // socket are kept), a handler the running function table serves is gone, a global is missing or
  // of another size, no cubin for this GPU. The function table carries over by handler name: an
  // application's table (set_function_table) keeps its function_ids, the default one becomes the
  // new package's.
  Expected<StagedLoad> stage(const LoadOptions &next) const;
  // Whether `next` is the code and globals already serving: a reload of it swaps nothing.
  bool serves(const StagedLoad &next) const;
  // Swaps `next` in, on the thread whose context the server uses, between two requests: the
  // bridge holds new requests (they wait in the ring or the socket), the old kernel answers what
  // it took and stops, the new module is loaded and resolved, its table and globals written, the
  // old module unloaded, the new kernel launched on the same bridge instance and control block
  // (the counters carry on), and the held requests flow again. When anything fails before the
  // old module is unloaded, the old kernel is launched again as it was and the error says why.
  // Only while running.
  Expected<SwapTimes> swap(StagedLoad next);
  // New values for host-set globals while serving, without a swap of code: each is checked
  // against the module first (nothing is written when one is wrong), then written between two
  // requests as swap() does it, so that no request sees half of an old value and half of a new.
  Expected<SwapTimes> update_globals(const std::vector<GlobalValue> &values);
  // The function table as the kernel serves it, sorted by function_id.
  std::vector<cudaq_rt_function_entry> function_table() const;
  // Whether the function table is the application's (set_function_table) rather than the default
  // one load() built.
  bool custom_table() const { return custom_table_; }

  bool running() const { return running_; }
  bool hung() const { return hung_; }

private:
  explicit Server(Gpu &gpu) : gpu_(gpu) {}
  // `fresh`: a launch after load() or stop(), which forgets what was in flight; a swap's launch
  // keeps it (the held requests are still to be answered).
  Status launch(bool fresh = true);
  // Stops the kernel for a swap: the bridge holds requests until the next launch.
  Status hold();
  Status stop(bool for_swap);
  void remember_global(GlobalValue value);
  struct Book;
  void sent(Book &book, std::span<const uint8_t> frame);        // in flight from now
  void answered(Book &book, std::span<const uint8_t> response); // no longer
  std::string serving() const;         // "serving request_id 7 (handler 'echo')", or empty
  std::string serving_feeders() const; // the same where several feeders have requests in flight

  Error failed(const std::string &what) const;

  struct InFlight {
    uint32_t request_id;
    uint32_t function_id;
  };
  std::string describe(const InFlight &f) const;

  Gpu &gpu_;
  std::optional<Bridge> bridge_;
  std::vector<std::pair<std::string, GpuPointer>> addresses_; // handler export -> device address
  LoadReport report_;
  std::vector<std::pair<uint32_t, std::string>> names_; // function_id -> handler, sorted
  GpuLibrary library_ = nullptr;
  GpuFunction kernel_ = nullptr;
  GpuPointer table_ = 0;
  size_t table_capacity_ = 0; // entries table_ has room for
  MappedMemory control_{};
  uint32_t stats_rows_ = 1; // rows of counters in control_: one a serving warp
  GpuStream stream_ = nullptr;
  cudaq_rt_dispatch_params params_{};
  double stop_timeout_s_ = 5;
  // What one feeder has in flight (the bridge's feeder 0 for send and receive), under its mutex
  // where several feeders' threads run (lock_book): a failure reported on one thread reads them
  // all.
  struct Book {
    mutable std::mutex mutex;
    std::deque<InFlight> in_flight;
    // The last request answered: a fault the GPU reports after the handler returned (a store to a
    // bad address completes late) is attributed to it.
    std::optional<InFlight> last_answered;
    uint64_t received_since_launch = 0;
  };
  std::deque<Book> books_; // one per feeder of the bridge, made with it
  // A book's lock, taken only where several feeders' threads run: one feeder is one thread's.
  std::unique_lock<std::mutex> lock_book(const Book &book) const {
    return books_.size() > 1 ? std::unique_lock(book.mutex) : std::unique_lock<std::mutex>();
  }
  uint64_t requests_at_launch_ = 0;
  std::atomic<bool> answered_once_{false}; // report_.times.first_response_ms is set
  std::mutex check_mutex_;                 // check() from several feeders' threads
  std::chrono::steady_clock::time_point launched_at_;
  bool running_ = false;
  bool hung_ = false;
  bool faulted_ = false;
  bool custom_table_ = false;
  Digest manifest_;                  // the package's, as loaded
  std::vector<GlobalValue> globals_; // the host-set values written, by name
};

} // namespace cudaq_rt
