// What cudaq-rt-link checks in a linked cubin before it stores it.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

struct CubinInfo {
  uint32_t arch = 0;               // SM number from the ELF header
  bool relocatable = false;        // ET_REL: one unit compiled alone, not a loadable module
  std::set<std::string> functions; // defined function symbols (kernels and device functions)
  std::set<std::string> variables; // defined object symbols (globals)
  // Each defined variable's place: in a linked module, its section and its offset there (the
  // driver loads a section as one piece), and its size in bytes.
  struct Variable {
    uint32_t section = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  std::map<std::string, Variable> variable_symbols;
};

// Reads a cubin's ELF header and symbol table (libObject). Not an NVIDIA CUDA ELF is an error.
Expected<CubinInfo> read_cubin(std::span<const uint8_t> cubin, const std::string &subject);

// The symbols a relocatable cubin defines with global, non-weak binding (functions and objects):
// what no two units of one link may both define.
Expected<std::vector<std::string>> strong_definitions(std::span<const uint8_t> cubin,
                                                      const std::string &subject);

} // namespace cudaq_rt
