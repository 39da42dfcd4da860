// Target archs and LTO modes (target.h).
#include "formats/target.h"

#include <algorithm>

namespace cudaq_rt {

std::string TargetArch::str() const {
  return suffix ? cat("sm_", sm, suffix) : cat("sm_", sm);
}

Expected<TargetArch> parse_arch(std::string_view text) {
  auto unknown = [&] {
    return make_error("", "unknown arch ", quote(text),
                      ": expected sm_NN with an optional a or f suffix, e.g. sm_90");
  };
  // nvcc's other spellings of a target name code that is not linked for a GPU: say which GPU.
  for (std::string_view other : {"compute_", "lto_"})
    if (text.substr(0, other.size()) == other && text.size() > other.size()) {
      auto gpu = parse_arch(cat("sm_", text.substr(other.size())));
      if (gpu)
        return make_error("", "unknown arch ", quote(text), ": ",
                          other == "lto_" ? "LTO-IR" : "a virtual arch (PTX)",
                          " is not a link target; for that GPU, give ", gpu->str());
    }
  std::string_view rest = text;
  if (rest.substr(0, 3) != "sm_" || rest.size() < 5)
    return unknown();
  rest.remove_prefix(3);
  TargetArch a;
  if (rest.back() == 'a' || rest.back() == 'f') {
    a.suffix = rest.back();
    rest.remove_suffix(1);
  }
  if (rest.empty() || rest.size() > 3 || rest[0] == '0')
    return unknown();
  for (char c : rest) {
    if (c < '0' || c > '9')
      return unknown();
    a.sm = a.sm * 10 + static_cast<uint32_t>(c - '0');
  }
  if (a.sm < 50)
    return unknown();
  return a;
}

Expected<std::vector<TargetArch>> parse_arch_list(const std::vector<std::string> &values,
                                                  const NativeArchs &native_archs) {
  std::vector<TargetArch> out;
  auto add = [&out](TargetArch arch) {
    if (std::find(out.begin(), out.end(), arch) == out.end())
      out.push_back(arch);
  };
  for (std::string_view value : values) {
    while (!value.empty()) {
      const size_t comma = value.find(',');
      std::string_view item = value.substr(0, comma);
      value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
      if (item.empty())
        continue;
      if (item == "native") {
        if (!native_archs)
          return make_error("", "'native' is not an arch here: name one, e.g. sm_90");
        auto here = native_archs();
        if (!here)
          return make_error("", "native: ", here.error().str());
        for (TargetArch a : *here)
          add(a);
        continue;
      }
      auto arch = parse_arch(item);
      if (!arch)
        return std::move(arch).take_error();
      add(*arch);
    }
  }
  return out;
}

const char *lto_mode_name(LtoMode mode) {
  return mode == LtoMode::per_tu ? "per-tu" : "whole";
}

std::optional<LtoMode> parse_lto_mode(std::string_view text) {
  if (text == "per-tu")
    return LtoMode::per_tu;
  if (text == "whole")
    return LtoMode::whole;
  return std::nullopt;
}

std::string_view linked_mode_name(std::optional<LtoMode> lto) {
  if (!lto)
    return "cubin";
  return *lto == LtoMode::per_tu ? "lto-per-tu" : "lto";
}

std::optional<std::optional<LtoMode>> parse_linked_mode(std::string_view text) {
  if (text == "cubin")
    return std::optional<LtoMode>();
  if (text == "lto")
    return std::optional<LtoMode>(LtoMode::whole);
  if (text == "lto-per-tu")
    return std::optional<LtoMode>(LtoMode::per_tu);
  return std::nullopt;
}

} // namespace cudaq_rt
