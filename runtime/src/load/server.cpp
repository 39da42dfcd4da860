// The load path, in the order it must run.
//
// 1. The package is opened (every blob's digest verified) and the link planned exactly as
//    cudaq-rt-link plans it (link_plan.cpp): the plan is what decides whether the package's own
//    cubin is still the one this runtime would link, and it is the key into the cache. Nothing
//    in it needs the GPU, so a package the load cannot use is refused on any machine.
// 2. The GPU: its exact arch decides which cubin serves it, and the bridge's host side (built
//    with the CUDA runtime) allocates in the context that is current, so the device's primary
//    context is made current before anything touches the bridge or the module.
// 3. A cubin: the package's, the local or remote cache's, or a link at load (select_cubin.cpp).
// 4. Everything the persistent kernel will touch is loaded and resolved before it starts: a
//    module load, a lazily loaded function, or a synchronous copy issued while it runs can wait
//    behind it forever (CUDA-Q realtime met this deadlock under CUDA's default lazy loading).
//    So: the module, its dispatch kernel (loaded with cuFuncLoad), every handler's
//    cudaq_rt_handler__<name> pointer (read into the sorted function table), every host-given
//    global (size-checked, written), the bridge instance, and the control block in mapped memory.
// 5. The launch, on a non-blocking stream so that nothing on the legacy default stream queues
//    behind the kernel. It is stopped through the shutdown flag in mapped memory, never by a copy.
//
// A kernel that ends by itself has failed (the unified kernel stops only when rx_poll says
// SHUTDOWN): a handler's illegal address or trap surfaces as the stream's error, and the counters
// (stored after each publish) tell which request it was serving. A kernel that does not stop
// within the timeout is hung; its memory is then never freed, since freeing it would wait for it.
#include "load/server.h"

#include "load/load_steps.h"

#include "base/clock.h"
#include "cudaq_rt/wire.h"
#include "link/builtin_dispatcher.h"
#include "package/package.h"
#include "package/signatures.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace cudaq_rt {
namespace {

// The control block in mapped memory: the shutdown flag, then the counters on a line of their
// own (the host writes one, the GPU the other), a row for each serving warp of the warp
// dispatcher.
constexpr size_t control_bytes = 4096;
constexpr size_t stats_offset = 64;
static_assert(stats_offset + kMaxWarpBlocks * sizeof(cudaq_rt_dispatch_stats) <= control_bytes);

// Under --trust, the package must carry a valid signature by a trusted key.
Status check_trusted(const Package &package, const LoadOptions &opt) {
  const TrustedKeys *trusted = opt.trust.trusted.get();
  if (!trusted || opt.own_code)
    return Status::ok();
  if (auto key = verify_package(package, *trusted); !key)
    return std::move(key).take_error();
  return Status::ok();
}

} // namespace

Expected<LoadPlan> prepare(const LoadOptions &opt, Gpu &gpu, bool ask_gpu) {
  // The package and its plan come before the GPU: what is wrong with them (no package, a
  // dispatch kernel or bridge it lacks) is said the same on any machine, without waiting for a
  // context.
  // Under --trust, a package no trusted key signed is refused here, before anything of it is
  // used and before the GPU is touched.
  auto t = Clock::now();
  std::vector<std::string> warnings;
  auto cache = open_link_cache(opt.cache, opt.trust, warnings);
  if (!cache)
    return std::move(cache).take_error();
  auto package = Package::open(opt.package, {.source = opt.blob_source});
  if (!package)
    return std::move(package).take_error();
  if (auto st = check_trusted(*package, opt); !st)
    return std::move(st).take_error();
  auto plan = plan_link(*package, opt.link);
  if (!plan)
    return std::move(plan).take_error();
  const double open_ms = ms_since(t);
  if (!ask_gpu)
    return LoadPlan{{},
                    std::move(*package),
                    std::move(*plan),
                    std::move(*cache),
                    *opt.arch,
                    std::move(warnings),
                    0,
                    open_ms};
  t = Clock::now();
  auto device = gpu.open(opt.device);
  if (!device)
    return std::move(device).take_error();
  const double context_ms = ms_since(t);
  auto arch = parse_arch(device->arch());
  if (!arch)
    return make_error("", "GPU ", device->ordinal, " (", device->name, ") reports sm_", device->sm,
                      ", which no link can target");
  return LoadPlan{*device, std::move(*package), std::move(*plan), std::move(*cache),
                  *arch,   std::move(warnings), context_ms,       open_ms};
}

// A global the host writes before launch or reads after stop: found by name (the link keeps
// exported globals visible) and exactly `size` bytes (`what`: "given", "asked for").
Expected<GpuGlobal> exported_global(Gpu &gpu, GpuLibrary library, const std::string &name,
                                    size_t size, const char *what) {
  auto g = gpu.global(library, name);
  if (!g)
    return std::move(g).take_error();
  if (!*g)
    return make_error("", "no __device__ global ", quote(name),
                      " in the linked module (the link keeps a global visible by name only when "
                      "it is exported with CUDAQ_RT_EXPORT_GLOBAL)");
  if ((*g)->size != size)
    return make_error("", "global ", quote(name), " is ", (*g)->size, " bytes, but ", size,
                      " bytes were ", what);
  return **g;
}

Expected<std::vector<std::pair<std::string, GpuPointer>>>
handler_addresses(Gpu &gpu, GpuLibrary library, const std::vector<std::string> &handlers,
                  const CubinInfo *symbols) {
  auto lookup = [&](const std::string &name) -> Expected<GpuGlobal> {
    const std::string symbol = CUDAQ_RT_HANDLER_SYMBOL_PREFIX + name;
    auto g = gpu.global(library, symbol);
    if (!g)
      return std::move(g).take_error();
    if (!*g)
      return make_error("", "the module lacks handler ", name, "'s global ", symbol);
    if ((*g)->size != sizeof(cudaq_rt_handler_fn))
      return make_error("", symbol, " is ", (*g)->size, " bytes, not a function pointer");
    return **g;
  };
  // One driver lookup by name per handler is work a reload does between two requests. A section
  // is loaded as one piece, so with the cubin's symbol table one lookup per section places every
  // global in it; a second lookup, of the section's last handler, checks that, else each is
  // looked up. (On the H200 this did not shorten a 1,000-handler swap measurably: its 40 ms are
  // elsewhere in the driver, bench/reload/reload_gap.py.)
  std::vector<GpuGlobal> globals(handlers.size());
  std::vector<bool> placed(handlers.size(), false);
  if (symbols) {
    std::map<uint32_t, std::vector<std::pair<uint64_t, size_t>>> by_section; // offset, index
    for (size_t i = 0; i < handlers.size(); ++i) {
      auto it = symbols->variable_symbols.find(CUDAQ_RT_HANDLER_SYMBOL_PREFIX + handlers[i]);
      if (it != symbols->variable_symbols.end() && it->second.size == sizeof(GpuPointer))
        by_section[it->second.section].emplace_back(it->second.offset, i);
    }
    for (auto &[section, members] : by_section) {
      std::sort(members.begin(), members.end());
      auto first = lookup(handlers[members.front().second]);
      if (!first)
        return std::move(first).take_error();
      const GpuPointer base = first->address - members.front().first;
      auto last = lookup(handlers[members.back().second]);
      if (!last)
        return std::move(last).take_error();
      if (last->address != base + members.back().first)
        continue; // not laid out as the symbol table says: each is looked up below
      for (const auto &[offset, i] : members) {
        globals[i] = {base + offset, sizeof(GpuPointer)};
        placed[i] = true;
      }
    }
  }
  for (size_t i = 0; i < handlers.size(); ++i) {
    if (placed[i])
      continue;
    auto g = lookup(handlers[i]);
    if (!g)
      return std::move(g).take_error();
    globals[i] = *g;
  }
  // The pointer globals lie side by side in the module's data: one copy for each run of them
  // instead of one synchronous copy each (about 20 us apiece on the H200, 20 ms for 1,000
  // handlers, which a reload pays between two requests). A run is read one by one where its copy
  // fails (it crossed into memory the module does not map).
  std::vector<size_t> order(globals.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return globals[a].address < globals[b].address; });
  std::vector<GpuPointer> values(globals.size(), 0);
  auto read_one = [&](size_t i) {
    return gpu.copy_from_device(
        std::span(reinterpret_cast<uint8_t *>(&values[i]), sizeof(GpuPointer)), globals[i].address);
  };
  constexpr GpuPointer max_hole = 64; // bytes between two globals of one run
  for (size_t first = 0; first < order.size();) {
    size_t last = first;
    while (last + 1 < order.size() &&
           globals[order[last + 1]].address <=
               globals[order[last]].address + sizeof(GpuPointer) + max_hole)
      ++last;
    const GpuPointer base = globals[order[first]].address;
    std::vector<uint8_t> bytes(size_t(globals[order[last]].address - base) + sizeof(GpuPointer));
    if (last > first && gpu.copy_from_device(bytes, base)) {
      for (size_t k = first; k <= last; ++k)
        std::memcpy(&values[order[k]], bytes.data() + (globals[order[k]].address - base),
                    sizeof(GpuPointer));
    } else {
      for (size_t k = first; k <= last; ++k)
        if (auto st = read_one(order[k]); !st)
          return std::move(st).take_error();
    }
    first = last + 1;
  }
  std::vector<std::pair<std::string, GpuPointer>> out;
  for (size_t i = 0; i < handlers.size(); ++i)
    out.emplace_back(handlers[i], values[i]);
  return out;
}

Expected<Server::Table>
checked_table(std::span<const cudaq_rt_function_entry> entries,
              const std::vector<std::pair<std::string, GpuPointer>> &addresses,
              const std::string &subject) {
  Server::Table t;
  t.entries.assign(entries.begin(), entries.end());
  std::unordered_map<GpuPointer, const std::string *> by_address;
  for (const auto &[name, address] : addresses)
    by_address.emplace(address, &name);
  for (cudaq_rt_function_entry &e : t.entries) {
    const auto address = reinterpret_cast<GpuPointer>(e.handler);
    auto at = by_address.find(address);
    if (at == by_address.end())
      return make_error(subject, "function table entry for function_id ", hex(e.function_id), ": ",
                        hex(address),
                        " is not the address of a handler in the loaded module (take it from a "
                        "lookup of the handler by name)");
    e.reserved = 0;
    t.names.emplace_back(e.function_id, *at->second);
  }
  std::sort(t.entries.begin(), t.entries.end(),
            [](const auto &a, const auto &b) { return a.function_id < b.function_id; });
  std::sort(t.names.begin(), t.names.end());
  for (size_t i = 1; i < t.names.size(); ++i)
    if (t.names[i].first == t.names[i - 1].first)
      return make_error(subject, "function_id ", hex(t.names[i].first),
                        " is in the function table twice (for ", quote(t.names[i - 1].second),
                        " and ", quote(t.names[i].second), ")");
  return t;
}

std::vector<cudaq_rt_function_entry>
default_table(const std::vector<std::pair<std::string, GpuPointer>> &addresses,
              const std::vector<AliasEntry> &aliases) {
  std::vector<cudaq_rt_function_entry> table;
  for (const auto &[name, address] : addresses)
    table.push_back(
        {cudaq_rt_function_id(name.c_str()), 0, reinterpret_cast<cudaq_rt_handler_fn>(address)});
  for (const AliasEntry &a : aliases)
    for (const auto &[name, address] : addresses)
      if (name == a.handler)
        table.push_back({a.function_id, 0, reinterpret_cast<cudaq_rt_handler_fn>(address)});
  return table;
}

Expected<std::unique_ptr<Server>> Server::start(const LoadOptions &opt, Gpu &gpu) {
  auto s = load(opt, gpu);
  if (!s)
    return s;
  auto t = Clock::now();
  if (auto st = (*s)->launch(); !st)
    return std::move(st).take_error();
  (*s)->report_.times.launch_ms = ms_since(t);
  return s;
}

Expected<std::unique_ptr<Server>> Server::load(const LoadOptions &opt, Gpu &gpu) {
  std::unique_ptr<Server> s(new Server(gpu));
  LoadReport &r = s->report_;
  r.package = opt.package;
  s->stop_timeout_s_ = opt.stop_timeout_s;
  const std::string subject = opt.package.string();

  auto ready = prepare(opt, gpu);
  if (!ready)
    return std::move(ready).take_error();
  const LinkPlan &plan = ready->plan;
  r.device = ready->device;
  r.times.context_ms = ready->context_ms;
  r.times.open_ms = ready->open_ms;
  r.bridge = plan.bridge;
  r.dispatcher = plan.dispatcher;
  r.kernel = plan.kernel;
  r.handlers = plan.handlers;
  r.aliases = ready->package.manifest().aliases;
  r.warnings = ready->warnings;

  auto t = Clock::now();
  auto cubin = select_cubin(ready->package, plan, ready->arch, ready->cache, opt.policy, opt.trust);
  if (!cubin)
    return std::move(cubin).take_error();
  r.source = cubin->source;
  r.record = cubin->record;
  r.warnings.insert(r.warnings.end(), cubin->warnings.begin(), cubin->warnings.end());
  r.notes = cubin->notes;
  r.times.cubin_ms = ms_since(t);

  t = Clock::now();
  const std::string where = cat(subject, ": ", r.device.arch());
  auto on_this_gpu = [&](Error e) {
    e.message = cat(where, ": ", e.message);
    e.subject.clear();
    return e;
  };
  auto library = gpu.load(cubin->cubin);
  if (!library)
    return on_this_gpu(std::move(library).take_error());
  s->library_ = *library;
  auto kernel = gpu.kernel(s->library_, r.kernel);
  if (!kernel)
    return on_this_gpu(std::move(kernel).take_error());
  s->kernel_ = *kernel;

  // Each handler's address, read from its cudaq_rt_handler__<name> global: a device function
  // pointer is only valid inside the module that defines it, so this is the only source of them.
  // The cubin's symbol table places the handlers' globals; one it cannot read is looked up
  // global by global.
  auto symbols = read_cubin(cubin->cubin, subject);
  auto addresses = handler_addresses(gpu, s->library_, r.handlers, symbols ? &*symbols : nullptr);
  if (!addresses)
    return on_this_gpu(std::move(addresses).take_error());
  s->addresses_ = std::move(*addresses);
  // The default table: every handler under its own name, and under each of its aliases.
  if (auto st = s->set_function_table(default_table(s->addresses_, r.aliases), false); !st)
    return on_this_gpu(std::move(st).take_error());
  s->manifest_ = ready->package.manifest_digest();

  s->globals_.clear();
  for (const GlobalValue &v : opt.globals)
    if (auto st = s->set_global(v.name, v.bytes); !st)
      return std::move(st).take_error();

  auto bridge_library = BridgeLibrary::open(opt.link.bridge.empty() ? r.bridge : opt.link.bridge);
  if (!bridge_library)
    return std::move(bridge_library).take_error();
  if (bridge_library->name() != r.bridge)
    return make_error(bridge_library->path().string(), "bridge library calls itself ",
                      quote(bridge_library->name()), ", but the module was linked with bridge ",
                      quote(r.bridge), " hooks");
  // A built-in kernel's own shape (the warp dispatcher: one warp) unless the caller gave one. The
  // warp dispatcher serves with the first warp of each block it is launched as (--grid B,32), each
  // warp with its own row of counters.
  const BuiltinDispatcher *builtin = find_builtin_dispatcher(r.dispatcher);
  LaunchShape shape;
  if (builtin)
    shape.threads = builtin->threads;
  r.shape = opt.shape.value_or(shape);
  uint32_t polling_lanes = builtin ? builtin->threads : 0;
  if (builtin && builtin->max_blocks > 1 && opt.shape) {
    if (r.shape.threads != builtin->threads || r.shape.blocks > builtin->max_blocks)
      return make_error(subject, "the ", builtin->name, " dispatcher is launched as 1 to ",
                        builtin->max_blocks, " blocks of ", builtin->threads, " threads, not ",
                        r.shape.blocks, ",", r.shape.threads);
    polling_lanes = builtin->threads * r.shape.blocks;
    s->stats_rows_ = r.shape.blocks;
  }
  // What depends on the kernel and the GPU in the instance's configuration is the bridge's to
  // decide; it is told the kernel's polling threads (every thread of a built-in kernel's block
  // polls, in each block of the warp dispatcher; of a custom kernel the runtime knows nothing)
  // and the instance's place in a service.
  const BridgeLaunch launch{polling_lanes, opt.bridge_instance};
  auto config = bridge_library->instance_config(launch, opt.bridge_config);
  if (!config)
    return std::move(config).take_error();
  auto bridge = bridge_library->create(*config);
  if (!bridge)
    return std::move(bridge).take_error();
  s->bridge_.emplace(std::move(*bridge));
  while (s->books_.size() < s->bridge_->feeders())
    s->books_.emplace_back();
  r.slot_size = s->bridge_->slot_size();
  r.num_slots = s->bridge_->num_slots();

  auto control = gpu.allocate_mapped(control_bytes);
  if (!control)
    return on_this_gpu(std::move(control).take_error());
  s->control_ = *control;
  std::memset(s->control_.host, 0, control_bytes);
  auto stream = gpu.create_stream();
  if (!stream)
    return on_this_gpu(std::move(stream).take_error());
  s->stream_ = *stream;

  cudaq_rt_dispatch_params &p = s->params_;
  p.transport_ctx = s->bridge_->device_context();
  p.slot_size = r.slot_size;
  p.shutdown_flag = reinterpret_cast<volatile int *>(s->control_.device);
  p.stats = reinterpret_cast<cudaq_rt_dispatch_stats *>(s->control_.device + stats_offset);
  // What the bridge's hooks ask for (the loopback ring's spare frame), where the GPU can give it:
  // else they go without, and say nothing is wrong.
  if (const uint32_t want = s->bridge_->dispatch_shared_bytes(); want > 0) {
    if (gpu.allow_dynamic_shared(s->kernel_, want)) {
      r.shape.shared_bytes = want;
      r.notes.push_back(cat("the dispatch kernel is launched with ", want,
                            " bytes of dynamic shared memory for the bridge's hooks"));
    } else
      r.notes.push_back(cat("the bridge's ", want, " bytes of dynamic shared memory do not fit ",
                            r.device.arch(), " beside the kernel's own: launched without them"));
  }
  r.times.load_ms = ms_since(t);
  return s;
}

std::optional<GpuPointer> Server::handler_address(const std::string &name) const {
  for (const auto &[n, address] : addresses_)
    if (n == name)
      return address;
  return std::nullopt;
}

std::vector<cudaq_rt_function_entry> Server::function_table() const {
  std::vector<cudaq_rt_function_entry> out;
  for (const auto &[function_id, name] : names_)
    out.push_back(
        {function_id, 0, reinterpret_cast<cudaq_rt_handler_fn>(handler_address(name).value_or(0))});
  return out;
}

std::string Server::handler_at(GpuPointer address) const {
  for (const auto &[n, a] : addresses_)
    if (a == address)
      return n;
  return "";
}

Status Server::set_function_table(std::span<const cudaq_rt_function_entry> entries, bool custom) {
  const std::string subject = report_.package.string();
  if (running_)
    return make_error(subject, "the function table cannot change while the dispatch kernel runs");
  auto table = checked_table(entries, addresses_, subject);
  if (!table)
    return std::move(table).take_error();
  const std::vector<cudaq_rt_function_entry> &t = table->entries;
  if (t.size() > table_capacity_) {
    auto p = gpu_.allocate(t.size() * sizeof t[0]);
    if (!p)
      return std::move(p).take_error();
    if (table_)
      gpu_.release(table_);
    table_ = *p;
    table_capacity_ = t.size();
  }
  if (!t.empty())
    if (auto st = gpu_.copy_to_device(
            table_, std::span(reinterpret_cast<const uint8_t *>(t.data()), t.size() * sizeof t[0]));
        !st)
      return std::move(st).take_error();
  params_.num_functions = static_cast<uint32_t>(t.size());
  params_.function_table = reinterpret_cast<const cudaq_rt_function_entry *>(table_);
  names_ = std::move(table->names);
  custom_table_ = custom;
  return Status::ok();
}

Status Server::set_global(const std::string &name, std::span<const uint8_t> bytes) {
  const std::string subject = report_.package.string();
  if (running_)
    return make_error(subject, "global ", quote(name),
                      " cannot be written while the dispatch kernel runs");
  auto on_this_gpu = [&](Error e) {
    e.message = cat(subject, ": ", report_.device.arch(), ": ", e.message);
    e.subject.clear();
    return e;
  };
  auto g = exported_global(gpu_, library_, name, bytes.size(), "given");
  if (!g)
    return on_this_gpu(std::move(g).take_error());
  if (auto st = gpu_.copy_to_device(g->address, bytes); !st)
    return on_this_gpu(std::move(st).take_error());
  remember_global({name, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  return Status::ok();
}

void Server::remember_global(GlobalValue value) {
  auto same = std::find_if(globals_.begin(), globals_.end(),
                           [&](const GlobalValue &g) { return g.name == value.name; });
  if (same != globals_.end())
    *same = std::move(value);
  else
    globals_.push_back(std::move(value));
}

Status check_package_trust(const LoadOptions &opt) {
  // No cache is opened (nor its directory made, nor the remote one asked) for a check that most
  // loads, without trust, skip at once.
  if (opt.own_code || !opt.trust.trusted)
    return Status::ok();
  auto package = Package::open(opt.package, {.source = opt.blob_source});
  if (!package)
    return std::move(package).take_error();
  if (auto key = verify_package(*package, *opt.trust.trusted); !key)
    return std::move(key).take_error();
  return Status::ok();
}

namespace {
// What a preview says of the package and its plan, whatever the target.
LoadPreview package_preview(const LoadOptions &opt, const LoadPlan &ready) {
  LoadPreview p;
  p.package = opt.package;
  p.bridge = ready.plan.bridge;
  p.dispatcher = ready.plan.dispatcher;
  p.handlers = ready.plan.handlers;
  p.aliases = ready.package.manifest().aliases;
  p.links = ready.package.manifest().links;
  p.warnings = ready.warnings;
  return p;
}
} // namespace

Expected<LoadPreview> preview_package(const LoadOptions &opt) {
  LoadOptions asked = opt;
  asked.arch = TargetArch{}; // no GPU is asked
  auto ready = prepare(asked, driver_gpu(), false);
  if (!ready)
    return std::move(ready).take_error();
  return package_preview(opt, *ready);
}

Expected<LoadPreview> preview_load(const LoadOptions &opt, Gpu &gpu) {
  const std::optional<std::string> no_gpu = opt.arch ? std::nullopt : gpu.absent();
  LoadOptions asked = opt;
  if (no_gpu)
    asked.arch = TargetArch{}; // the package alone: no target
  auto ready = prepare(asked, gpu, !asked.arch);
  if (!ready)
    return std::move(ready).take_error();
  LoadPreview p = package_preview(opt, *ready);
  if (no_gpu) {
    p.no_gpu = *no_gpu;
    return p;
  }
  LoadTarget &t = p.targets.emplace_back();
  if (!opt.arch)
    t.device = ready->device;
  t.arch = ready->arch.str();
  // An error (the target out of reach, a blob that does not verify or cannot be fetched) is why
  // it cannot load; nothing found, that a load would link, if it may.
  auto found = select_cubin(ready->package, ready->plan, ready->arch, ready->cache,
                            {.allow_link = false, .store = false, .none_is_error = false});
  if (!found) {
    t.why_not = found.error().str();
    return p;
  }
  p.warnings.insert(p.warnings.end(), found->warnings.begin(), found->warnings.end());
  if (found->found)
    t.source = found->source;
  else if (opt.policy.allow_link)
    t.source = CubinSource::link;
  else
    t.why_not = found->why_not;
  return p;
}

std::string format_preview(const LoadPreview &p) {
  // What a manifest says is printed escaped: a tampered name must not drive the terminal.
  std::ostringstream out;
  out << escape(p.package.string()) << ": bridge " << escape(p.bridge) << ", dispatcher "
      << escape(p.dispatcher) << "\n";
  out << "handlers:\n";
  for (const std::string &h : p.handlers)
    out << "  " << h << "  function_id " << hex(cudaq_rt_function_id(h.c_str())) << "\n";
  if (!p.aliases.empty()) {
    out << "aliases:\n";
    for (const AliasEntry &a : p.aliases)
      out << "  " << a.name << " -> " << a.handler << "  function_id " << hex(a.function_id)
          << "\n";
  }
  out << "linked:\n";
  for (const LinkRecord &l : p.links)
    out << "  " << l.arch.str() << "  bridge " << escape(l.bridge) << "  dispatcher "
        << escape(l.dispatcher) << "  " << l.cubin.short_str() << " (" << l.cubin_size
        << " bytes)\n";
  if (p.links.empty())
    out << "  (nothing)\n";
  for (const LoadTarget &t : p.targets) {
    if (t.device)
      out << "GPU " << t.device->ordinal << ": " << escape(t.device->name) << " ("
          << t.device->arch() << ", driver " << t.device->driver() << "): ";
    else
      out << t.arch << " (no GPU asked): ";
    if (t.source)
      out << "would load from the " << cubin_source_name(*t.source) << "\n";
    else
      out << "cannot load: " << t.why_not << "\n";
  }
  if (p.targets.empty())
    out << "no GPU here (" << p.no_gpu
        << "): --arch sm_XX[,sm_YY...] says what a GPU of each arch would load\n";
  return out.str();
}

nlohmann::json preview_json(const LoadPreview &p) {
  nlohmann::json handlers = nlohmann::json::array();
  for (const std::string &h : p.handlers)
    handlers.push_back({{"name", h}, {"function_id", cudaq_rt_function_id(h.c_str())}});
  nlohmann::json aliases = nlohmann::json::array();
  for (const AliasEntry &a : p.aliases)
    aliases.push_back({{"name", a.name}, {"handler", a.handler}, {"function_id", a.function_id}});
  nlohmann::json links = nlohmann::json::array();
  for (const LinkRecord &l : p.links)
    links.push_back({{"arch", l.arch.str()},
                     {"bridge", l.bridge},
                     {"dispatcher", l.dispatcher},
                     {"cubin", l.cubin.str()},
                     {"size", l.cubin_size}});
  nlohmann::json targets = nlohmann::json::array();
  for (const LoadTarget &t : p.targets) {
    nlohmann::json target = {{"arch", t.arch},
                             {"device", t.device ? nlohmann::json{{"ordinal", t.device->ordinal},
                                                                  {"name", t.device->name},
                                                                  {"arch", t.device->arch()},
                                                                  {"driver", t.device->driver()}}
                                                 : nlohmann::json()},
                             {"loadable", t.loadable()}};
    if (t.source)
      target["source"] = cubin_source_name(*t.source);
    else
      target["why_not"] = t.why_not;
    targets.push_back(std::move(target));
  }
  nlohmann::json j = {
      {"package", p.package.string()}, {"bridge", p.bridge}, {"dispatcher", p.dispatcher},
      {"handlers", handlers},          {"aliases", aliases}, {"links", links},
      {"loadable", p.loadable()},      {"targets", targets}, {"warnings", p.warnings}};
  // The first target's fields at the top too: a document for one GPU or one arch reads as before.
  if (!p.targets.empty())
    for (const char *key : {"arch", "device", "source", "why_not"})
      if (targets[0].contains(key))
        j[key] = targets[0][key];
  if (p.targets.empty())
    j["no_gpu"] = p.no_gpu;
  return j;
}

Server::~Server() {
  if (running_ && !hung_)
    (void)stop();
  if (hung_) {
    if (bridge_)
      bridge_->abandon();
    return;
  }
  if (stream_)
    gpu_.destroy_stream(stream_);
  bridge_.reset();
  if (control_.host)
    gpu_.release_mapped(control_);
  if (table_)
    gpu_.release(table_);
  if (library_)
    gpu_.unload(library_);
}

Status Server::read_global(const std::string &name, std::span<uint8_t> out) {
  if (running_ || hung_)
    return make_error("", "global ", quote(name), " is read only while the kernel is stopped");
  auto g = exported_global(gpu_, library_, name, out.size(), "asked for");
  if (!g)
    return std::move(g).take_error();
  return gpu_.copy_from_device(out, g->address);
}

Status Server::launch(bool fresh) {
  std::atomic_ref<int>(*static_cast<int *>(control_.host)).store(0, std::memory_order_release);
  if (fresh) {
    requests_at_launch_ = stats().requests;
    for (Book &book : books_) { // no feeder's thread runs while the kernel is launched
      book.received_since_launch = 0;
      book.in_flight.clear();
      book.last_answered.reset();
    }
  }
  void *args[] = {&params_};
  launched_at_ = Clock::now();
  if (auto st = gpu_.launch(kernel_, report_.shape, args, stream_); !st)
    return make_error(report_.package.string(), report_.device.arch(), ": the dispatch kernel ",
                      report_.kernel, ": ", st.error().message);
  running_ = true;
  // A self-fed bridge (a socket) starts feeding the ring once there is a kernel to serve it.
  if (auto st = bridge_->start(); !st) {
    (void)stop();
    return st;
  }
  return Status::ok();
}

Status Server::relaunch() {
  if (running_ || hung_ || faulted_)
    return make_error(report_.package.string(), "the dispatch kernel ", report_.kernel,
                      running_ ? " is running" : " cannot be launched again after a failure");
  return launch();
}

cudaq_rt_dispatch_stats Server::stats() const {
  auto *raw = reinterpret_cast<cudaq_rt_dispatch_stats *>(static_cast<char *>(control_.host) +
                                                          stats_offset);
  auto load = [](unsigned long long &v) {
    return std::atomic_ref<unsigned long long>(v).load(std::memory_order_acquire);
  };
  cudaq_rt_dispatch_stats s{};
  for (uint32_t row = 0; row < stats_rows_; ++row, ++raw) { // one a serving warp
    s.requests += load(raw->requests);
    s.ok += load(raw->ok);
    s.handler_errors += load(raw->handler_errors);
    s.protocol_errors += load(raw->protocol_errors);
  }
  return s;
}

std::string Server::handler_name(uint32_t function_id) const {
  auto it = std::lower_bound(names_.begin(), names_.end(), std::pair(function_id, std::string()));
  return it != names_.end() && it->first == function_id ? it->second : std::string();
}

Expected<bool> Server::send(std::span<const uint8_t> frame) {
  auto queued = bridge_->send(frame);
  if (queued && *queued) {
    auto lock = lock_book(books_[0]);
    sent(books_[0], frame);
  }
  return queued;
}

void Server::sent(Book &book, std::span<const uint8_t> frame) {
  if (frame.size() < sizeof(cudaq_rt_request_header))
    return;
  cudaq_rt_request_header h;
  std::memcpy(&h, frame.data(), sizeof h);
  book.in_flight.push_back({h.request_id, h.function_id});
}

void Server::answered(Book &book, std::span<const uint8_t> response) {
  if (response.size() < sizeof(cudaq_rt_response_header))
    return;
  cudaq_rt_response_header h;
  std::memcpy(&h, response.data(), sizeof h);
  // Responses come in request order from the loopback bridge: the oldest is nearly always it.
  auto &in_flight = book.in_flight;
  auto it = !in_flight.empty() && in_flight.front().request_id == h.request_id
                ? in_flight.begin()
                : std::find_if(in_flight.begin(), in_flight.end(),
                               [&](const InFlight &f) { return f.request_id == h.request_id; });
  if (it != in_flight.end()) {
    book.last_answered = *it;
    in_flight.erase(it);
    ++book.received_since_launch;
  }
  if (!answered_once_.load(std::memory_order_relaxed) && !answered_once_.exchange(true))
    report_.times.first_response_ms = ms_since(launched_at_);
}

Expected<std::optional<size_t>> Server::receive(std::span<uint8_t> buffer) {
  auto got = bridge_->receive(buffer);
  if (got && *got) {
    auto lock = lock_book(books_[0]);
    answered(books_[0], buffer.first(**got));
  }
  return got;
}

Expected<size_t> Server::send_batch(std::span<const void *const> frames,
                                    std::span<const size_t> sizes, uint32_t feeder) {
  Bridge::BatchResult r = bridge_->send_batch(frames, sizes, feeder);
  if (r.done > 0) { // an empty try takes no lock
    Book &book = books_[feeder];
    auto lock = lock_book(book);
    for (size_t i = 0; i < r.done; ++i)
      sent(book, std::span(static_cast<const uint8_t *>(frames[i]), sizes[i]));
  }
  if (r.error)
    return std::move(*r.error);
  return r.done;
}

Expected<size_t> Server::receive_batch(std::span<uint8_t> buffer, size_t stride,
                                       std::span<size_t> sizes, uint32_t feeder) {
  Bridge::BatchResult r = bridge_->receive_batch(buffer, stride, sizes, feeder);
  if (r.done > 0) { // an empty poll takes no lock
    Book &book = books_[feeder];
    auto lock = lock_book(book);
    for (size_t i = 0; i < r.done; ++i)
      answered(book, buffer.subspan(i * stride, sizes[i]));
  }
  if (r.error)
    return std::move(*r.error);
  return r.done;
}

std::string Server::describe(const InFlight &f) const {
  std::string name = handler_name(f.function_id);
  return cat("request_id ", f.request_id,
             name.empty() ? cat(" (function_id ", hex(f.function_id), ")")
                          : cat(" (handler ", quote(name), ")"));
}

std::string Server::serving() const {
  if (books_.size() > 1)
    return serving_feeders();
  if (books_.empty())
    return "";
  const Book &book = books_[0]; // one feeder: this thread's own
  if (book.in_flight.empty())
    return book.last_answered ? "after answering " + describe(*book.last_answered) : "";
  // The counters are stored after each publish: requests finished since the launch, less those
  // already taken by the host, is how far into what is in flight the kernel got.
  const uint64_t finished = stats().requests - requests_at_launch_;
  const uint64_t received = book.received_since_launch;
  size_t index = 0;
  if (finished >= received && finished - received < book.in_flight.size())
    index = static_cast<size_t>(finished - received);
  return "serving " + describe(book.in_flight[index]);
}

std::string Server::serving_feeders() const {
  // Several feeders' requests are served side by side: the oldest of each is what the kernel
  // may have been serving.
  std::string oldest;
  for (const Book &book : books_) {
    auto lock = lock_book(book);
    if (!book.in_flight.empty())
      oldest += (oldest.empty() ? "" : " or ") + describe(book.in_flight.front());
  }
  return oldest.empty() ? "" : "serving " + oldest;
}

Error Server::failed(const std::string &what) const {
  std::string where = serving();
  return make_error(report_.package.string(), report_.device.arch(), ": the dispatch kernel ",
                    report_.kernel, " ", what, where.empty() ? "" : ", " + where);
}

Status Server::check() {
  std::lock_guard lock(check_mutex_);
  if (!running_)
    return Status::ok();
  StreamState st = gpu_.query(stream_);
  if (!st.done)
    return Status::ok();
  running_ = false;
  bridge_->stop();
  if (st.fault) {
    faulted_ = true;
    return failed("failed: " + st.fault->message);
  }
  faulted_ = true;
  return failed("ended by itself (its bridge session did not start, or it does not keep the "
                "dispatch contract)");
}

Status Server::stop(bool for_swap) {
  if (!running_)
    return Status::ok();
  // A self-fed bridge first stops taking requests and waits for the answers to those it took;
  // what is still in the ring then is answered before the kernel sees the flag (dispatch.h).
  // For a swap it takes nothing more at once: what arrives waits for the next kernel.
  auto drained = for_swap ? bridge_->hold(stop_timeout_s_) : bridge_->drain(stop_timeout_s_);
  std::atomic_ref<int>(*static_cast<int *>(control_.host)).store(1, std::memory_order_release);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(std::max(0.0, stop_timeout_s_)));
  for (;;) {
    StreamState st = gpu_.query(stream_);
    if (st.done) {
      running_ = false;
      bridge_->stop(); // sends what the kernel answered last
      if (st.fault) {
        faulted_ = true;
        return failed("failed: " + st.fault->message);
      }
      // A drain that ran out of time is not an error once the kernel stopped: it answered what
      // was in the ring before it saw the flag, and the bridge's stop sent those answers.
      if (!drained)
        return drained.error();
      return Status::ok();
    }
    if (Clock::now() >= deadline) {
      hung_ = true;
      return failed(cat("did not stop within ", stop_timeout_s_, " s: it is hung"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

} // namespace cudaq_rt
