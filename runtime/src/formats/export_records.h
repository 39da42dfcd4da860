// Reads the host-side export records that CUDAQ_RT_EXPORT_HANDLER, CUDAQ_RT_EXPORT_DISPATCH_KERNEL
// and CUDAQ_RT_EXPORT_GLOBAL leave in .cudaq_rt_exports (layout in cudaq_rt/exports.h).
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// bridge_hooks: an optional set of device hooks a bridge's code defines (exports.h
// CUDAQ_RT_EXPORT_BRIDGE_HOOKS), named by the set ("lone", "warp_lone").
enum class ExportKind { handler, dispatch_kernel, global, bridge_hooks };
const char *export_kind_name(ExportKind k);

struct ExportRecord {
  ExportKind kind = ExportKind::handler;
  std::string name;
  uint32_t function_id = 0; // FNV-1a of name, for handlers
  bool concurrent = false;  // a handler exported with CUDAQ_RT_EXPORT_HANDLER_CONCURRENT
  bool direct = false;      // a handler with a cudaq_rt_handler_call__<name> (record version 2)
};

// Parses every record of a .cudaq_rt_exports section; zero padding between records is skipped.
Expected<std::vector<ExportRecord>> parse_export_records(std::span<const uint8_t> section,
                                                         const std::string &subject);

// Export names are C identifiers: the macros paste them into symbol names, and nothing else can
// name a device global or a kernel that -kernels-used/-variables-used and the loader look up.
bool is_c_identifier(std::string_view name);

// The device global that carries a handler's pointer: cudaq_rt_handler__<name>.
std::string handler_symbol(const std::string &name);
// The device function with C linkage that calls it: cudaq_rt_handler_call__<name> (exports.h).
std::string handler_call_symbol(const std::string &name);

} // namespace cudaq_rt
