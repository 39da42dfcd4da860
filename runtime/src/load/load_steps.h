// The steps of the load path that a first load (server.cpp) and a reload (reload.cpp) share.
#pragma once

#include "formats/cubin.h"
#include "load/server.h"
#include "package/package.h"

#include <string>
#include <utility>
#include <vector>

namespace cudaq_rt {

// Steps 1 and 2 (server.cpp): the GPU, the package and its plan, the cache, the arch to find a
// cubin for. Without `ask_gpu`, no GPU is opened and the arch is LoadOptions::arch.
struct LoadPlan {
  GpuDevice device;
  Package package;
  LinkPlan plan;
  LinkCache cache;
  TargetArch arch;
  std::vector<std::string> warnings;
  double context_ms = 0;
  double open_ms = 0;
};
Expected<LoadPlan> prepare(const LoadOptions &opt, Gpu &gpu, bool ask_gpu = true);

// A global the host writes before launch or reads after stop: found by name (the link keeps
// exported globals visible) and exactly `size` bytes (`what`: "given", "asked for").
Expected<GpuGlobal> exported_global(Gpu &gpu, GpuLibrary library, const std::string &name,
                                    size_t size, const char *what);

// Each handler's device address in a loaded module, read from its cudaq_rt_handler__<name>
// global, in the order given. With the cubin's symbol table, the globals are found from one
// lookup per section (checked against a second), not one each.
Expected<std::vector<std::pair<std::string, GpuPointer>>>
handler_addresses(Gpu &gpu, GpuLibrary library, const std::vector<std::string> &handlers,
                  const CubinInfo *symbols = nullptr);

// `entries` checked against a module's handler addresses (each must be one), sorted, named, and
// no function_id twice.
Expected<Server::Table>
checked_table(std::span<const cudaq_rt_function_entry> entries,
              const std::vector<std::pair<std::string, GpuPointer>> &addresses,
              const std::string &subject);

// Every handler under FNV-1a of its own name, and under each of its aliases.
std::vector<cudaq_rt_function_entry>
default_table(const std::vector<std::pair<std::string, GpuPointer>> &addresses,
              const std::vector<AliasEntry> &aliases);

} // namespace cudaq_rt
