// What a link targets and how: the GPU arch (sm_90a) and the way LTO-IR is linked. One type each,
// parsed in one place and printed in one place, for the tools' flags, the manifest's link
// records, the cache's keys and every message.
#pragma once

#include "cudaq_rt/error.h"

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// sm_NN with an optional a or f suffix: sm_90a code runs on sm_90 parts only, and is not sm_90's.
struct TargetArch {
  uint32_t sm = 0;
  char suffix = 0; // 0, 'a' or 'f'
  std::string str() const;
  friend auto operator<=>(const TargetArch &, const TargetArch &) = default;
  // As str(): so that cat() and make_error() take an arch as they take text.
  friend std::ostream &operator<<(std::ostream &os, const TargetArch &a) { return os << a.str(); }
};
// "sm_90a" -> {90, 'a'}; the error says what was expected, and for a virtual arch (compute_90)
// or an LTO-IR target (lto_90) which GPU arch is meant.
Expected<TargetArch> parse_arch(std::string_view text);
// The archs of this machine's GPUs, for `--arch native`: asked of the CUDA driver by the caller
// (formats/ knows no driver).
using NativeArchs = std::function<Expected<std::vector<TargetArch>>()>;
// --arch values, each a list separated by commas: in order, without repeats; empty items are
// skipped. `native` stands for this machine's GPUs where `native_archs` is given.
Expected<std::vector<TargetArch>> parse_arch_list(const std::vector<std::string> &values,
                                                  const NativeArchs &native_archs = {});

// How LTO-IR is linked (cudaq-rt-link(1), --lto).
enum class LtoMode {
  per_tu, // each unit compiled alone for the arch (cached), then a non-LTO link of the cubins
  whole,  // one -lto link of every input: inlining across units, cost that grows with the whole
};
const char *lto_mode_name(LtoMode mode); // "per-tu", "whole"
std::optional<LtoMode> parse_lto_mode(std::string_view text);
// The mode when none is asked for, by the settings or by CUDAQ_RT_LTO (per-tu or whole): chosen
// from GPU measurements (bench/link_bench.md).
constexpr LtoMode default_lto_mode = LtoMode::per_tu;
constexpr const char *lto_mode_env = "CUDAQ_RT_LTO";

// How a module was linked, as a manifest's link record spells it: "cubin" (no LTO-IR: nothing
// was compiled), "lto" (whole), "lto-per-tu".
std::string_view linked_mode_name(std::optional<LtoMode> lto);
std::optional<std::optional<LtoMode>> parse_linked_mode(std::string_view text);

} // namespace cudaq_rt
