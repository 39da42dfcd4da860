// bridge/: bridge libraries found by name on the search path, dlopened and checked
// (cudaq_rt/bridge.h); below both link (which reads a bridge's device code from its file) and load
// (which drives its host side). It names no transport: what a bridge needs decided, it says
// through its ABI (instance_config).
//
// Finding, loading and checking bridge libraries.
#include "cudaq_rt/bridge.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <system_error>
#include <vector>

#ifndef CUDAQ_RT_BUILD_BRIDGE_DIR
#error "the build defines CUDAQ_RT_BUILD_BRIDGE_DIR (runtime/CMakeLists.txt)"
#endif

namespace cudaq_rt {

namespace fs = std::filesystem;

// An operation appended within the ABI version (bridge_plugin.h), or NULL when the bridge's table
// predates it.
#define CUDAQ_RT_APPENDED(ops, field)                                                              \
  ((ops)->struct_size >= offsetof(cudaq_rt_bridge_ops, field) + sizeof((ops)->field)               \
       ? (ops)->field                                                                              \
       : nullptr)

namespace {

bool is_bridge_name(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return false;
  return true;
}

bool looks_like_path(std::string_view s) {
  return s.find('/') != std::string_view::npos ||
         (s.size() >= 3 && s.substr(s.size() - 3) == ".so") ||
         s.find(".so.") != std::string_view::npos;
}

std::string join(const std::vector<fs::path> &dirs) {
  std::string out;
  for (const fs::path &d : dirs)
    out += (out.empty() ? "" : ", ") + d.string();
  return out;
}

} // namespace

std::vector<fs::path> bridge_search_path() {
  std::vector<fs::path> dirs;
  if (const char *env = std::getenv("CUDAQ_RT_BRIDGE_PATH")) {
    std::string_view rest = env;
    while (!rest.empty()) {
      size_t colon = rest.find(':');
      std::string_view dir = rest.substr(0, colon);
      if (!dir.empty())
        dirs.emplace_back(dir);
      rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    }
  }
  // Installed layout: <prefix>/bin/<tool>, <prefix>/<libdir>/libcudaq_rt.so and the bridges in
  // <prefix>/lib/cudaq-rt/bridges. Look relative to the executable and, for a program installed
  // elsewhere, to the shared runtime library holding this code.
  auto add = [&](fs::path dir) {
    dir = dir.lexically_normal();
    if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
      dirs.push_back(std::move(dir));
  };
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec)
    add(exe.parent_path() / ".." / "lib" / "cudaq-rt" / "bridges");
  fs::path object;
  Dl_info self{};
  if (::dladdr(reinterpret_cast<void *>(&bridge_search_path), &self) != 0 && self.dli_fname)
    object = fs::weakly_canonical(self.dli_fname, ec);
  if (!object.empty() && object != exe)
    add(object.parent_path() / CUDAQ_RT_LIBDIR_TO_BRIDGES);
  // The build tree's bridges, only for programs that run from the build tree: an installed tool
  // must never load code from wherever it happened to be built.
  auto in_build_tree = [](const fs::path &p) {
    fs::path root = fs::path(CUDAQ_RT_BUILD_ROOT).lexically_normal();
    auto [r, _] = std::mismatch(root.begin(), root.end(), p.begin(), p.end());
    return !p.empty() && r == root.end();
  };
  if (in_build_tree(exe) || in_build_tree(object))
    add(CUDAQ_RT_BUILD_BRIDGE_DIR);
  return dirs;
}

std::string bridge_library_file_name(std::string_view name) {
  return cat(CUDAQ_RT_BRIDGE_LIBRARY_PREFIX, name, ".so");
}

Expected<BridgeLocation> find_bridge(std::string_view name_or_path) {
  if (looks_like_path(name_or_path)) {
    fs::path path(name_or_path);
    std::error_code ec;
    if (!fs::exists(path, ec))
      return make_error(path.string(), "no such bridge library");
    std::string stem = path.filename().string();
    stem = stem.substr(0, stem.find(".so"));
    const std::string_view prefix = CUDAQ_RT_BRIDGE_LIBRARY_PREFIX;
    if (stem.starts_with(prefix) && stem.size() > prefix.size())
      stem.erase(0, prefix.size());
    return BridgeLocation{stem, path};
  }
  if (!is_bridge_name(name_or_path))
    return make_error("", "bad bridge name ", quote(name_or_path),
                      ": use letters, digits, '_' and '-', or a path to a shared library");
  std::vector<fs::path> dirs = bridge_search_path();
  const std::string file = bridge_library_file_name(name_or_path);
  for (const fs::path &dir : dirs) {
    std::error_code ec;
    fs::path candidate = dir / file;
    if (fs::is_regular_file(candidate, ec))
      return BridgeLocation{std::string(name_or_path), candidate};
  }
  return make_error("", "unknown bridge ", quote(name_or_path), " (searched: ", join(dirs), ")");
}

Expected<BridgeLibrary> BridgeLibrary::open(std::string_view name_or_path) {
  auto where = find_bridge(name_or_path);
  if (!where)
    return std::move(where).take_error();
  return load(where->path);
}

Expected<BridgeLibrary> BridgeLibrary::load(const fs::path &path) {
  // dlopen searches the library path for a name without '/'; an explicit path must not.
  const std::string spec = path.has_parent_path() ? path.string() : ("./" + path.string());
  void *raw = dlopen(spec.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!raw) {
    const char *why = dlerror();
    return make_error(path.string(), "cannot load bridge: ", why ? why : "dlopen failed");
  }
  std::shared_ptr<void> handle(raw, [](void *h) { dlclose(h); });

  dlerror();
  void *sym = dlsym(raw, CUDAQ_RT_BRIDGE_ENTRY_SYMBOL);
  if (!sym)
    return make_error(path.string(),
                      "not a cudaq-rt bridge: no symbol " CUDAQ_RT_BRIDGE_ENTRY_SYMBOL);
  auto entry = reinterpret_cast<cudaq_rt_bridge_entry_fn>(sym);
  const cudaq_rt_bridge_ops *ops = entry();
  if (!ops)
    return make_error(path.string(), "not a cudaq-rt bridge: " CUDAQ_RT_BRIDGE_ENTRY_SYMBOL
                                     " returned no operations");
  if (ops->abi_version != CUDAQ_RT_BRIDGE_ABI_VERSION)
    return make_error(path.string(), "bridge ABI version ", ops->abi_version,
                      ", but this runtime supports version ", CUDAQ_RT_BRIDGE_ABI_VERSION,
                      ": rebuild the bridge against this cudaq-rt");
  // Operations appended within the version are optional: a shorter table lacks them.
  if (ops->struct_size < CUDAQ_RT_BRIDGE_OPS_V1_SIZE)
    return make_error(path.string(), "bridge operations table is ", ops->struct_size,
                      " bytes, but ABI version ", CUDAQ_RT_BRIDGE_ABI_VERSION, " needs at least ",
                      CUDAQ_RT_BRIDGE_OPS_V1_SIZE, ": rebuild the bridge against this cudaq-rt");
  if (!ops->name || !ops->create || !ops->destroy || !ops->last_error || !ops->device_context ||
      !ops->slot_size || !ops->num_slots)
    return make_error(path.string(), "bridge operations table lacks a required operation");
  if ((ops->capabilities & CUDAQ_RT_BRIDGE_CAP_HOST_FRAMES) && (!ops->send || !ops->receive))
    return make_error(path.string(),
                      "bridge claims host frames but has no send or receive operation");
  auto covers = [&](size_t end) { return ops->struct_size >= end; };
  const bool has_threads = covers(offsetof(cudaq_rt_bridge_ops, stop) + sizeof(void *)) &&
                           ops->start && ops->drain && ops->stop;
  if ((ops->capabilities & CUDAQ_RT_BRIDGE_CAP_SELF_FED) && !has_threads)
    return make_error(path.string(),
                      "bridge claims to feed itself but has no start, drain or stop operation");
  return BridgeLibrary(path, std::move(handle), ops);
}

Expected<std::string> BridgeLibrary::instance_config(const BridgeLaunch &launch,
                                                     const std::string &config) const {
  auto op = CUDAQ_RT_APPENDED(ops_, instance_config);
  if (!op && launch.polling_lanes > 32)
    return make_error(path_.string(), "bridge ", quote(ops_->name), " cannot be told of ",
                      launch.polling_lanes / 32,
                      " serving warps (it has no instance_config): launch the warp dispatcher as "
                      "one block");
  if (!op)
    return config;
  const cudaq_rt_bridge_launch c{sizeof c, launch.polling_lanes, launch.instance};
  // First asked for the size, then into a buffer of that size: nothing to guess.
  std::string out;
  size_t needed = 0;
  for (int call = 0; call < 2; ++call) {
    switch (op(&c, config.c_str(), out.empty() ? nullptr : out.data(), out.size(), &needed)) {
    case CUDAQ_RT_BRIDGE_OK:
      out.resize(::strnlen(out.data(), out.size()));
      return out;
    case CUDAQ_RT_BRIDGE_AGAIN:
      out.assign(needed, '\0');
      break;
    default: {
      const char *why = ops_->last_error(nullptr);
      return make_error(path_.string(), "bridge ", quote(ops_->name), ": ",
                        why && *why ? why : "instance_config failed");
    }
    }
  }
  return make_error(path_.string(), "bridge ", quote(ops_->name),
                    ": instance_config asked for a larger buffer than it said it needed");
}

Expected<Bridge> BridgeLibrary::create(const std::string &config) const {
  cudaq_rt_bridge *bridge = nullptr;
  if (ops_->create(config.c_str(), &bridge) != CUDAQ_RT_BRIDGE_OK || !bridge) {
    const char *why = ops_->last_error(nullptr);
    return make_error(path_.string(), "bridge ", quote(ops_->name), ": ",
                      why && *why ? why : "create failed");
  }
  return Bridge(handle_, ops_, bridge);
}

Bridge::Bridge(std::shared_ptr<void> handle, const cudaq_rt_bridge_ops *ops,
               cudaq_rt_bridge *bridge)
    : handle_(std::move(handle)), ops_(ops), bridge_(bridge), feeders_{bridge} {
  // Bounded, so that a bridge that never answers NULL costs a table, not a hang.
  constexpr size_t kMaxFeeders = 1024;
  auto feeder = CUDAQ_RT_APPENDED(ops_, feeder);
  while (feeder && ops_->send && feeders_.size() < kMaxFeeders) {
    cudaq_rt_bridge *f = feeder(bridge_, uint32_t(feeders_.size()));
    if (!f)
      break;
    feeders_.push_back(f);
  }
}

Bridge::Bridge(Bridge &&other) noexcept
    : handle_(std::move(other.handle_)), ops_(other.ops_), bridge_(other.bridge_),
      feeders_(std::move(other.feeders_)) {
  other.bridge_ = nullptr;
}

Bridge &Bridge::operator=(Bridge &&other) noexcept {
  if (this != &other) {
    if (bridge_)
      ops_->destroy(bridge_);
    handle_ = std::move(other.handle_);
    ops_ = other.ops_;
    bridge_ = other.bridge_;
    feeders_ = std::move(other.feeders_);
    other.bridge_ = nullptr;
  }
  return *this;
}

void Bridge::abandon() {
  static std::mutex mutex;
  static auto *kept = new std::vector<cudaq_rt_bridge *>; // never freed: the process keeps them
  std::lock_guard lock(mutex);
  kept->push_back(bridge_);
  bridge_ = nullptr;
}

Bridge::~Bridge() {
  if (bridge_)
    ops_->destroy(bridge_);
}

Error Bridge::error(std::string_view op, cudaq_rt_bridge *on) const {
  const char *why = ops_->last_error(on ? on : bridge_);
  return make_error("", "bridge ", quote(ops_->name), ": ", op, ": ", why && *why ? why : "failed");
}

uint32_t Bridge::dispatch_shared_bytes() const {
  auto op = CUDAQ_RT_APPENDED(ops_, dispatch_shared_bytes);
  return op ? op(bridge_) : 0u;
}

Expected<bool> Bridge::send(std::span<const uint8_t> frame, uint32_t feeder) {
  if (!ops_->send)
    return make_error("", "bridge ", quote(ops_->name), " is not fed from the host");
  cudaq_rt_bridge *on = feeders_.at(feeder);
  switch (ops_->send(on, frame.data(), frame.size())) {
  case CUDAQ_RT_BRIDGE_OK:
    return true;
  case CUDAQ_RT_BRIDGE_AGAIN:
    return false;
  default:
    return error("send", on);
  }
}

Bridge::BatchResult Bridge::send_batch(std::span<const void *const> frames,
                                       std::span<const size_t> sizes, uint32_t feeder) {
  BatchResult r;
  const size_t count = std::min(frames.size(), sizes.size());
  if (!ops_->send) {
    r.error = make_error("", "bridge ", quote(ops_->name), " is not fed from the host");
    return r;
  }
  if (auto batch = CUDAQ_RT_APPENDED(ops_, send_batch)) {
    cudaq_rt_bridge *on = feeders_.at(feeder);
    if (batch(on, frames.data(), sizes.data(), count, &r.done) == CUDAQ_RT_BRIDGE_ERROR)
      r.error = error("send", on);
    return r;
  }
  for (; r.done < count; ++r.done) {
    auto sent =
        send(std::span(static_cast<const uint8_t *>(frames[r.done]), sizes[r.done]), feeder);
    if (!sent)
      r.error = std::move(sent).take_error();
    if (!sent || !*sent)
      break;
  }
  return r;
}

Bridge::BatchResult Bridge::receive_batch(std::span<uint8_t> buffer, size_t stride,
                                          std::span<size_t> sizes, uint32_t feeder) {
  BatchResult r;
  const size_t count = stride ? std::min(buffer.size() / stride, sizes.size()) : 0;
  if (!ops_->receive) {
    r.error = make_error("", "bridge ", quote(ops_->name), " is not fed from the host");
    return r;
  }
  if (auto batch = CUDAQ_RT_APPENDED(ops_, receive_batch)) {
    cudaq_rt_bridge *on = feeders_.at(feeder);
    if (batch(on, buffer.data(), stride, sizes.data(), count, &r.done) == CUDAQ_RT_BRIDGE_ERROR)
      r.error = error("receive", on);
    return r;
  }
  for (; r.done < count; ++r.done) {
    auto got = receive(buffer.subspan(r.done * stride, stride), feeder);
    if (!got)
      r.error = std::move(got).take_error();
    if (!got || !*got)
      break;
    sizes[r.done] = **got;
  }
  return r;
}

Expected<std::optional<size_t>> Bridge::receive(std::span<uint8_t> buffer, uint32_t feeder) {
  if (!ops_->receive)
    return make_error("", "bridge ", quote(ops_->name), " is not fed from the host");
  size_t size = 0;
  cudaq_rt_bridge *on = feeders_.at(feeder);
  switch (ops_->receive(on, buffer.data(), buffer.size(), &size)) {
  case CUDAQ_RT_BRIDGE_OK:
    return std::optional<size_t>(size);
  case CUDAQ_RT_BRIDGE_AGAIN:
    return std::optional<size_t>();
  default:
    return error("receive", on);
  }
}

bool Bridge::self_fed() const {
  return (ops_->capabilities & CUDAQ_RT_BRIDGE_CAP_SELF_FED) != 0;
}

Status Bridge::start() {
  auto start = CUDAQ_RT_APPENDED(ops_, start);
  if (!self_fed() || !start)
    return Status::ok();
  if (start(bridge_) != CUDAQ_RT_BRIDGE_OK)
    return error("start");
  return Status::ok();
}

Expected<bool> Bridge::drain(double timeout_s) {
  auto drain = CUDAQ_RT_APPENDED(ops_, drain);
  if (!self_fed() || !drain)
    return true;
  return in_time(drain(bridge_, timeout_s), "drain");
}

Expected<bool> Bridge::hold(double timeout_s) {
  auto hold = CUDAQ_RT_APPENDED(ops_, hold);
  if (!self_fed() || !hold)
    return drain(timeout_s);
  return in_time(hold(bridge_, timeout_s), "hold");
}

Expected<bool> Bridge::in_time(cudaq_rt_bridge_result r, std::string_view op) const {
  switch (r) {
  case CUDAQ_RT_BRIDGE_OK:
    return true;
  case CUDAQ_RT_BRIDGE_AGAIN:
    return false;
  default:
    return error(op);
  }
}

void Bridge::stop() {
  if (auto stop = CUDAQ_RT_APPENDED(ops_, stop); self_fed() && stop)
    stop(bridge_);
}

std::string Bridge::address() const {
  auto address = CUDAQ_RT_APPENDED(ops_, address);
  const char *text = address ? address(bridge_) : nullptr;
  return text ? text : "";
}

std::vector<std::pair<std::string, uint64_t>> Bridge::counters() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  auto counters = CUDAQ_RT_APPENDED(ops_, counters);
  if (!counters)
    return out;
  std::vector<cudaq_rt_bridge_counter> raw(64);
  uint32_t n = counters(bridge_, raw.data(), uint32_t(raw.size()));
  if (n > raw.size()) {
    raw.resize(n);
    n = std::min<uint32_t>(n, counters(bridge_, raw.data(), n));
  }
  for (uint32_t i = 0; i < n; ++i)
    out.emplace_back(raw[i].name ? raw[i].name : "", raw[i].value);
  return out;
}

bool Bridge::add_latency(std::span<uint64_t, CUDAQ_RT_LATENCY_BUCKETS> buckets) const {
  auto latency = CUDAQ_RT_APPENDED(ops_, latency);
  if (!latency)
    return false;
  latency(bridge_, buckets.data());
  return true;
}

} // namespace cudaq_rt
