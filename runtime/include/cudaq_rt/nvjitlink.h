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
NvJitLinkOutcome nvjitlink_link(std::span<const std::string> options,
                                std::span<const NvJitLinkInput> inputs);

// NVJITLINK_ERROR_ARCH_MISMATCH -> "ARCH_MISMATCH".
const char *nvjitlink_result_name(int result);

} // namespace cudaq_rt
