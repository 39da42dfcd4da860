#include "formats/target.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace cudaq_rt;

namespace {

std::string arch_error(std::string_view text) {
  auto a = parse_arch(text);
  REQUIRE_FALSE(a);
  return a.error().str();
}

std::vector<std::string> strs(const std::vector<TargetArch> &archs) {
  std::vector<std::string> out;
  for (const TargetArch &a : archs)
    out.push_back(a.str());
  return out;
}

std::string list_error(const std::vector<std::string> &values) {
  auto l = parse_arch_list(values);
  REQUIRE_FALSE(l);
  return l.error().str();
}

} // namespace

TEST_CASE("an arch is sm_NN with an optional a or f suffix, and prints as it was written") {
  struct Case {
    const char *text;
    uint32_t sm;
    char suffix;
  };
  for (Case c :
       {Case{"sm_50", 50, 0}, Case{"sm_80", 80, 0}, Case{"sm_90", 90, 0}, Case{"sm_90a", 90, 'a'},
        Case{"sm_100f", 100, 'f'}, Case{"sm_120a", 120, 'a'}, Case{"sm_999", 999, 0}}) {
    CAPTURE(c.text);
    auto a = parse_arch(c.text);
    REQUIRE(a);
    CHECK(a->sm == c.sm);
    CHECK(a->suffix == c.suffix);
    CHECK(a->str() == c.text);
  }
  CHECK(TargetArch{90, 'a'}.str() == "sm_90a");
  CHECK(TargetArch{86, 0}.str() == "sm_86");
}

TEST_CASE("anything else is an unknown arch, with the one message that says what is expected") {
  for (const char *bad :
       {"",         "sm_",     "sm_9", "sm_9a",  "sm_49",  "sm_050",     "sm_1000",
        "sm_90b",   "sm_90af", "sm_a", "sm_-90", "sm_9x",  "SM_90",      "sm90",
        "compute_", "lto_x",   "90",   " sm_90", "sm_90 ", "sm_90,sm_80"}) {
    std::string text = bad;
    CAPTURE(text);
    CHECK(arch_error(bad) ==
          "unknown arch '" + text + "': expected sm_NN with an optional a or f suffix, e.g. sm_90");
  }
  // What the user typed is quoted and escaped, so a message stays one line.
  CHECK(arch_error("sm_9\n0") ==
        "unknown arch 'sm_9\\n0': expected sm_NN with an optional a or f suffix, e.g. sm_90");
  CHECK(arch_error("it's") ==
        "unknown arch 'it\\'s': expected sm_NN with an optional a or f suffix, e.g. sm_90");
  // No subject: a caller puts its own in front (--arch: ...).
  CHECK(parse_arch("sm_9x").error().subject.empty());
}

TEST_CASE("archs order by number, then plain before a before f") {
  CHECK(TargetArch{80, 0} < TargetArch{90, 0});
  CHECK(TargetArch{90, 0} < TargetArch{90, 'a'});
  CHECK(TargetArch{90, 'a'} < TargetArch{90, 'f'});
  CHECK(TargetArch{90, 'f'} < TargetArch{100, 0});
  CHECK(TargetArch{90, 'a'} != TargetArch{90, 0});
  CHECK(*parse_arch("sm_90a") == TargetArch{90, 'a'});
}

TEST_CASE("--arch lists: commas split, order kept, repeats and empty items dropped") {
  auto l = parse_arch_list({"sm_90,sm_80", "sm_90a,,sm_80", ",sm_100f,"});
  REQUIRE(l);
  CHECK(strs(*l) == std::vector<std::string>{"sm_90", "sm_80", "sm_90a", "sm_100f"});
  l = parse_arch_list({});
  REQUIRE(l);
  CHECK(l->empty());
  l = parse_arch_list({"", ",,"});
  REQUIRE(l);
  CHECK(l->empty());
  // The first bad item is the error, named alone.
  CHECK(list_error({"sm_90", "sm_80,sm_9x,sm_7"}) ==
        "unknown arch 'sm_9x': expected sm_NN with an optional a or f suffix, e.g. sm_90");
  CHECK(list_error({"sm_90 sm_80"}) ==
        "unknown arch 'sm_90 sm_80': expected sm_NN with an optional a or f suffix, e.g. sm_90");
}

TEST_CASE("nvcc's virtual and LTO-IR spellings are refused with the GPU arch they mean") {
  CHECK(arch_error("compute_90") ==
        "unknown arch 'compute_90': a virtual arch (PTX) is not a link target; for that GPU, give "
        "sm_90");
  CHECK(arch_error("compute_90a") == "unknown arch 'compute_90a': a virtual arch (PTX) is not a "
                                     "link target; for that GPU, give sm_90a");
  CHECK(arch_error("lto_100f") ==
        "unknown arch 'lto_100f': LTO-IR is not a link target; for that GPU, give sm_100f");
  // No GPU arch behind it: the plain message.
  CHECK(arch_error("compute_9") ==
        "unknown arch 'compute_9': expected sm_NN with an optional a or f suffix, e.g. sm_90");
}

TEST_CASE("native stands for what the caller says this machine's GPUs are, in the list's order") {
  int asked = 0;
  const NativeArchs two = [&]() -> Expected<std::vector<TargetArch>> {
    ++asked;
    return std::vector<TargetArch>{{90, 0}, {80, 0}};
  };
  auto l = parse_arch_list({"sm_100,native", "sm_80"}, two);
  REQUIRE(l);
  CHECK(strs(*l) == std::vector<std::string>{"sm_100", "sm_90", "sm_80"});
  CHECK(asked == 1);
  const NativeArchs none = []() -> Expected<std::vector<TargetArch>> {
    return make_error("", "no CUDA GPU on this machine");
  };
  l = parse_arch_list({"native"}, none);
  REQUIRE_FALSE(l);
  CHECK(l.error().str() == "native: no CUDA GPU on this machine");
  // Where the caller cannot ask a driver, native is an unknown arch with a hint.
  CHECK(list_error({"native"}) == "'native' is not an arch here: name one, e.g. sm_90");
}

TEST_CASE("an LTO mode has one name, and a link record's mode one spelling") {
  CHECK(std::string(lto_mode_name(LtoMode::per_tu)) == "per-tu");
  CHECK(std::string(lto_mode_name(LtoMode::whole)) == "whole");
  CHECK(parse_lto_mode("per-tu") == LtoMode::per_tu);
  CHECK(parse_lto_mode("whole") == LtoMode::whole);
  for (const char *bad : {"", "per_tu", "pertu", "Whole", "lto", "lto-per-tu", "whole "}) {
    std::string text = bad;
    CAPTURE(text);
    CHECK_FALSE(parse_lto_mode(bad));
  }
  CHECK(default_lto_mode == LtoMode::per_tu);
  CHECK(std::string(lto_mode_env) == "CUDAQ_RT_LTO");

  CHECK(linked_mode_name(std::nullopt) == "cubin");
  CHECK(linked_mode_name(LtoMode::whole) == "lto");
  CHECK(linked_mode_name(LtoMode::per_tu) == "lto-per-tu");
  for (std::optional<LtoMode> m : {std::optional<LtoMode>(), std::optional<LtoMode>(LtoMode::whole),
                                   std::optional<LtoMode>(LtoMode::per_tu)}) {
    auto back = parse_linked_mode(linked_mode_name(m));
    REQUIRE(back);
    CHECK(*back == m);
  }
  for (const char *bad : {"", "whole", "per-tu", "lto_per_tu", "LTO", "cubin "}) {
    std::string text = bad;
    CAPTURE(text);
    CHECK_FALSE(parse_linked_mode(bad));
  }
}
