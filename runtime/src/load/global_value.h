// Bytes a load writes into a __device__ global before launch: cudaq-rt-run's `--global NAME=SPEC`
// (command/request_args.h reads the syntax), cudaq_rt_set_global in the C API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cudaq_rt {

struct GlobalValue {
  std::string name;
  std::vector<uint8_t> bytes;
};

} // namespace cudaq_rt
