// One nvJitLink link: a handle per call, so calls on different threads run in parallel.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

struct NvJitLinkInput {
  std::string name; // shown in nvJitLink's log
  std::span<const uint8_t> fatbin;
  bool cubin = false; // the bytes are a relocatable cubin (a per-TU unit), not a fatbin container
  bool ltoir = false; // the bytes are bare LTO-IR (NVRTC's: the unit of direct calls)
  uint32_t type = 0;  // where nonzero, the nvJitLinkInputType to add it as (a recorded link's)
};

struct NvJitLinkResult {
  std::vector<uint8_t> cubin;
  std::string info_log;
  double link_ms = 0;
};

// A failed link keeps nvJitLink's result code and logs so callers can explain it.
struct NvJitLinkFailure {
  int result = 0;    // nvJitLinkResult
  std::string stage; // "create", "add <name>", "complete"
  std::string error_log;
  std::string info_log;
};

// Links `inputs` (each one fatbin container) with `options`. On failure returns the failure.
struct NvJitLinkOutcome {
  bool ok = false;
  NvJitLinkResult result;
  NvJitLinkFailure failure;
};
// With `ptx`, the result's `cubin` holds the linked PTX (a -ptx link).
NvJitLinkOutcome nvjitlink_link(std::span<const std::string> options,
                                std::span<const NvJitLinkInput> inputs, bool ptx = false);

// The options that make nvJitLink compile LTO-IR for one translation unit alone into a relocatable
// cubin (nvjitlink.cpp says why both, and that neither is documented).
inline constexpr const char *nvjitlink_unit_options[] = {"-Xptxas=-c", "-Xnvvm=--device-c"};

// Whether this process's nvJitLink compiles a unit alone: empty if it does, else why not, in a few
// words. A trial compile of a few lines of LTO-IR, run once per process, on the first call.
// CUDAQ_RT_FORCE_WHOLE_LINK=1 makes it refuse without a trial, as a toolkit that cannot would
// (for tests of the fallback to the whole-program link).
constexpr const char *force_whole_link_env = "CUDAQ_RT_FORCE_WHOLE_LINK";
std::string nvjitlink_unit_refusal();

// NVJITLINK_ERROR_ARCH_MISMATCH -> "ARCH_MISMATCH".
const char *nvjitlink_result_name(int result);

} // namespace cudaq_rt
