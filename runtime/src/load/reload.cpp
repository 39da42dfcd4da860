// Hot reload: the next code of a running server, staged while the old kernel serves, then swapped
// in between two requests (server.h: Server::stage, Server::swap, Server::update_globals).
//
// What may happen beside a running persistent kernel decides the split (measured on the H200 with
// bench/probe/load_while_serving.cu): a module load into the kernel's context, a module's first
// use there, an unload and cuMemFree all wait until the kernel ends; an allocation, a copy on
// another non-blocking stream, a synchronous copy (the kernel's stream does not block it) do not.
// So everything that reads the package, the cache, a linker or the disk runs before the swap, on
// any thread, with the old kernel serving: stage(). What touches the module runs in the gap:
//
//   1. hold: the bridge takes no more requests (a self-fed one stops reading its socket, where
//      datagrams wait; a host-fed ring keeps what is sent, up to its slots), the old kernel
//      answers what it took and ends on the shutdown flag;
//   2. the new module is loaded into the context, its kernel and every handler's address
//      resolved (one copy for all of them, handler_addresses), its function table and globals
//      written;
//   3. commit: the old module is unloaded and its table freed;
//   4. the new kernel is launched with the same control block (its counters carry on) and the
//      same bridge instance, whose ring positions carry on: the held requests flow again.
//
// A failure in step 2 unloads what it loaded and launches the old kernel again, untouched: the
// old code serves on, and the error says why. Globals alone (update_globals) skip steps 2 and 3:
// the values are checked against the module first, then written while no kernel runs, so that no
// request sees part of an old table and part of a new one.
#include "base/clock.h"
#include "formats/cubin.h"
#include "load/load_steps.h"
#include "load/server.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>

namespace cudaq_rt {
namespace {

bool same_globals(const std::vector<GlobalValue> &a, const std::vector<GlobalValue> &b) {
  auto sorted = [](std::vector<GlobalValue> v) {
    std::sort(v.begin(), v.end(), [](auto &x, auto &y) { return x.name < y.name; });
    return v;
  };
  auto x = sorted(a), y = sorted(b);
  return std::equal(x.begin(), x.end(), y.begin(), y.end(),
                    [](auto &p, auto &q) { return p.name == q.name && p.bytes == q.bytes; });
}

// Each global given is one the cubin defines, of that size: checked before the swap, from the
// cubin's symbol table, so that the swap itself does not fail on it.
Status check_globals(const StagedLoad &next, const std::string &subject) {
  if (next.options.globals.empty())
    return Status::ok();
  const CubinInfo &info = next.symbols;
  for (const GlobalValue &v : next.options.globals) {
    auto it = info.variable_symbols.find(v.name);
    if (it == info.variable_symbols.end())
      return make_error(subject, "no __device__ global ", quote(v.name),
                        " in the linked module (the link keeps a global visible by name only "
                        "when it is exported with CUDAQ_RT_EXPORT_GLOBAL)");
    if (it->second.size != v.bytes.size())
      return make_error(subject, "global ", quote(v.name), " is ", it->second.size, " bytes, but ",
                        v.bytes.size(), " bytes were given");
  }
  return Status::ok();
}

} // namespace

Expected<StagedLoad> Server::stage(const LoadOptions &next) const {
  auto t = Clock::now();
  const std::string subject = next.package.string();
  auto ready = prepare(next, gpu_);
  if (!ready)
    return std::move(ready).take_error();
  // Every blob on disk read and checked against its digest, whether this load needs it or not
  // (a cubin from the cache reads none of them): off the GPU's path, a reload can afford to
  // trust nothing it has not checked.
  for (const Digest &d : ready->package.referenced_blobs())
    if (ready->package.has_blob(d))
      if (auto blob = ready->package.read_blob(d); !blob)
        return std::move(blob).take_error();
  const LinkPlan &plan = ready->plan;
  if (ready->device.ordinal != report_.device.ordinal)
    return make_error(subject, "a reload keeps its GPU: GPU ", report_.device.ordinal,
                      " serves, not GPU ", ready->device.ordinal);
  if (plan.bridge != report_.bridge)
    return make_error(subject, "is linked with bridge ", quote(plan.bridge), ", but bridge ",
                      quote(report_.bridge),
                      " serves: a reload keeps the bridge instance (its ring and socket)");
  if (plan.dispatcher != report_.dispatcher)
    return make_error(subject, "has dispatch kernel ", quote(plan.dispatcher), ", but ",
                      quote(report_.dispatcher),
                      " serves: a reload keeps the kernel's shape, which the bridge instance was "
                      "made for");
  // The function table carries over: every function_id served now must still be served. An
  // application's table keeps its function_ids, each by the handler of the same name; the
  // default table becomes the new package's (its handlers' names and its aliases).
  const std::vector<AliasEntry> &aliases = ready->package.manifest().aliases;
  auto exports = [&](const std::string &h) {
    return std::find(plan.handlers.begin(), plan.handlers.end(), h) != plan.handlers.end();
  };
  auto in_new_default = [&](uint32_t function_id) {
    return std::any_of(plan.handlers.begin(), plan.handlers.end(),
                       [&](const std::string &h) {
                         return cudaq_rt_function_id(h.c_str()) == function_id;
                       }) ||
           std::any_of(aliases.begin(), aliases.end(),
                       [&](const AliasEntry &a) { return a.function_id == function_id; });
  };
  for (const auto &[function_id, handler] : names_) {
    if (custom_table_ ? exports(handler) : in_new_default(function_id))
      continue;
    if (exports(handler))
      return make_error(subject, "has no alias of function_id ", hex(function_id),
                        ", under which the running function table serves handler ", quote(handler));
    return make_error(subject, "does not export handler ", quote(handler),
                      ", which the running function table serves as function_id ",
                      hex(function_id));
  }

  StagedLoad s;
  s.options = next;
  s.manifest = ready->package.manifest_digest();
  LoadReport &r = s.report;
  r = report_;
  r.package = next.package;
  r.kernel = plan.kernel;
  r.handlers = plan.handlers;
  r.aliases = aliases;
  r.warnings = ready->warnings;
  r.times = {};
  r.times.open_ms = ready->open_ms;
  auto c = Clock::now();
  auto cubin =
      select_cubin(ready->package, plan, ready->arch, ready->cache, next.policy, next.trust);
  if (!cubin)
    return std::move(cubin).take_error();
  r.times.cubin_ms = ms_since(c);
  r.source = cubin->source;
  r.record = cubin->record;
  r.warnings.insert(r.warnings.end(), cubin->warnings.begin(), cubin->warnings.end());
  r.notes = cubin->notes;
  s.cubin = std::move(cubin->cubin);
  auto symbols = read_cubin(s.cubin, cat(subject, ": ", r.device.arch()));
  if (!symbols)
    return std::move(symbols).take_error();
  s.symbols = std::move(*symbols);
  if (auto st = check_globals(s, cat(subject, ": ", r.device.arch())); !st)
    return std::move(st).take_error();
  s.globals_only = s.manifest == manifest_ && r.record.cubin == report_.record.cubin;
  s.stage_ms = ms_since(t);
  return s;
}

bool Server::serves(const StagedLoad &next) const {
  return next.globals_only && same_globals(next.options.globals, globals_);
}

Status Server::hold() {
  // Server::stop: a self-fed bridge stops taking requests and waits for the answers to those it
  // took, the kernel answers what is in the ring and ends; the bridge's threads end after the
  // last responses are sent. Its socket stays open: what arrives meanwhile waits there.
  Status st = stop(true);
  if (!st && (hung_ || faulted_ || running_))
    return st;
  return Status::ok(); // a drain that ran out of time: the kernel still answered the ring
}

Expected<SwapTimes> Server::update_globals(const std::vector<GlobalValue> &values) {
  const std::string subject = report_.package.string();
  std::vector<GpuGlobal> targets;
  for (const GlobalValue &v : values) {
    auto g = exported_global(gpu_, library_, v.name, v.bytes.size(), "given");
    if (!g) {
      Error e = std::move(g).take_error();
      e.message = cat(subject, ": ", report_.device.arch(), ": ", e.message);
      e.subject.clear();
      return e;
    }
    targets.push_back(*g);
  }
  SwapTimes times;
  const bool was_running = running_;
  auto t = Clock::now();
  if (was_running)
    if (auto st = hold(); !st)
      return std::move(st).take_error();
  times.hold_ms = ms_since(t);
  t = Clock::now();
  std::optional<Error> failed;
  for (size_t i = 0; i < values.size() && !failed; ++i) {
    if (auto st = gpu_.copy_to_device(targets[i].address, values[i].bytes); !st)
      failed = st.error();
    else
      remember_global(values[i]);
  }
  times.swap_ms = ms_since(t);
  t = Clock::now();
  if (was_running)
    if (auto st = launch(false); !st)
      return std::move(st).take_error();
  times.launch_ms = ms_since(t);
  if (failed)
    return *failed;
  return times;
}

Expected<SwapTimes> Server::swap(StagedLoad next) {
  const std::string subject = next.options.package.string();
  if (!running_)
    return make_error(subject, "a swap needs a running dispatch kernel");
  if (next.globals_only)
    return update_globals(next.options.globals);

  // The entries the new table will hold, by handler name: the application's function_ids, or the
  // new package's default table (its handlers and aliases).
  std::vector<std::pair<uint32_t, std::string>> wanted;
  if (custom_table_) {
    wanted = names_;
  } else {
    for (const std::string &h : next.report.handlers)
      wanted.emplace_back(cudaq_rt_function_id(h.c_str()), h);
    for (const AliasEntry &a : next.report.aliases)
      wanted.emplace_back(a.function_id, a.handler);
  }
  // Allocated while the old kernel serves (an allocation does not wait for it).
  auto new_table =
      gpu_.allocate(std::max<size_t>(1, wanted.size()) * sizeof(cudaq_rt_function_entry));
  if (!new_table)
    return std::move(new_table).take_error();

  SwapTimes times;
  auto t = Clock::now();
  if (auto st = hold(); !st)
    return std::move(st).take_error(); // a hung or failed kernel: nothing is freed
  times.hold_ms = ms_since(t);
  t = Clock::now();

  GpuLibrary library = nullptr;
  auto back_to_old = [&](Error e) -> Expected<SwapTimes> {
    if (library)
      gpu_.unload(library);
    gpu_.release(*new_table);
    e.message =
        cat(subject, ": ", report_.device.arch(), ": ", e.message, " (the old code serves on)");
    e.subject.clear();
    if (auto st = launch(false); !st)
      return std::move(st).take_error();
    return e;
  };
  auto loaded = gpu_.load(next.cubin);
  if (!loaded)
    return back_to_old(std::move(loaded).take_error());
  library = *loaded;
  auto kernel = gpu_.kernel(library, next.report.kernel);
  if (!kernel)
    return back_to_old(std::move(kernel).take_error());
  times.load_ms = ms_since(t);
  auto addresses = handler_addresses(gpu_, library, next.report.handlers, &next.symbols);
  if (!addresses)
    return back_to_old(std::move(addresses).take_error());
  std::vector<cudaq_rt_function_entry> entries;
  {
    std::unordered_map<std::string_view, GpuPointer> by_name;
    for (const auto &[name, address] : *addresses)
      by_name.emplace(name, address);
    for (const auto &[function_id, handler] : wanted)
      if (auto it = by_name.find(handler); it != by_name.end())
        entries.push_back({function_id, 0, reinterpret_cast<cudaq_rt_handler_fn>(it->second)});
  }
  auto table = checked_table(entries, *addresses, subject);
  if (!table)
    return back_to_old(std::move(table).take_error());
  if (!table->entries.empty())
    if (auto st = gpu_.copy_to_device(
            *new_table, std::span(reinterpret_cast<const uint8_t *>(table->entries.data()),
                                  table->entries.size() * sizeof(cudaq_rt_function_entry)));
        !st)
      return back_to_old(std::move(st).take_error());
  for (const GlobalValue &v : next.options.globals) {
    auto g = exported_global(gpu_, library, v.name, v.bytes.size(), "given");
    if (!g)
      return back_to_old(std::move(g).take_error());
    if (auto st = gpu_.copy_to_device(g->address, v.bytes); !st)
      return back_to_old(std::move(st).take_error());
  }
  if (report_.shape.shared_bytes > 0 &&
      !gpu_.allow_dynamic_shared(*kernel, report_.shape.shared_bytes))
    return back_to_old(make_error("", "the new dispatch kernel cannot have the ",
                                  report_.shape.shared_bytes,
                                  " bytes of dynamic shared memory the bridge's hooks use"));

  // Commit: nothing of the old module is needed any more.
  auto u = Clock::now();
  gpu_.unload(library_);
  times.unload_ms = ms_since(u);
  if (table_)
    gpu_.release(table_);
  library_ = library;
  kernel_ = *kernel;
  addresses_ = std::move(*addresses);
  names_ = std::move(table->names);
  table_ = *new_table;
  table_capacity_ = std::max<size_t>(1, wanted.size());
  params_.function_table = reinterpret_cast<const cudaq_rt_function_entry *>(table_);
  params_.num_functions = static_cast<uint32_t>(table->entries.size());
  manifest_ = next.manifest;
  globals_ = next.options.globals;
  const LoadTimes first_times = report_.times;
  const LaunchShape shape = report_.shape;
  report_ = std::move(next.report);
  report_.times = first_times;
  report_.shape = shape;
  times.swap_ms = ms_since(t);

  t = Clock::now();
  if (auto st = launch(false); !st)
    return std::move(st).take_error();
  times.launch_ms = ms_since(t);
  return times;
}

} // namespace cudaq_rt
