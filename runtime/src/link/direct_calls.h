// The unit of direct calls: the cudaq_rt_call_direct a whole-program link generates for a package,
// so that the built-in kernels' direct form (cudaq_rt/dispatch_framing.cuh) calls its handlers by
// name and LTO can inline them.
#pragma once

#include "cudaq_rt/error.h"
#include "package/manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cudaq_rt {

// Whether some handler of `m` was exported with cudaq_rt_handler_call__<name> (ExportEntry::direct;
// older packages have none).
bool has_direct_handlers(const Manifest &m);

// The CUDA C++ source of the unit for `m`: a switch over the function_ids of its direct handlers
// and of the aliases that name them; in each case, a call by name when the table's pointer is
// that function; every other call through the pointer. Deterministic: declarations by name, cases
// by function_id, names within a case by name, whatever the manifest's order.
std::string direct_calls_source(const Manifest &m);

// NVRTC's LTO-IR of `source` for compute_80 (LTO-IR for one arch links for that GPU and every
// newer one, as the built-in kernels' does). The error carries NVRTC's log.
Expected<std::vector<uint8_t>> compile_direct_calls(const std::string &source,
                                                    const std::string &subject);

} // namespace cudaq_rt
