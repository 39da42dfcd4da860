// The key of a link cache entry: a hash of everything that decides a linked cubin's bytes, with
// its parts kept so that `cudaq-rt-link --dry-run` can show what was hashed. link_key.cpp says why
// the key has these parts.
#pragma once

#include "base/digest.h"
#include "cudaq_rt/error.h"
#include "formats/target.h"

#include <nlohmann/json.hpp>
#include <nvJitLink.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

// Which libnvJitLink does the linking: its version and, standing in for a hash of its 98 MB of
// code, its ELF build ID, so that nodes with the same toolkit installed at other paths or times
// share entries. A library without a build ID is known by where it lives and its size and mtime
// instead (ccache's compiler_check=mtime).
struct NvJitLinkIdentity {
  unsigned major = 0;
  unsigned minor = 0;
  std::string build_id; // NT_GNU_BUILD_ID, hex; empty: the library has none
  std::string path;     // realpath of the loaded library (in the key only without a build ID)
  uint64_t size = 0;
  int64_t mtime_ns = 0;

  std::string version() const; // "13.0"
  nlohmann::json to_json() const;
  friend bool operator==(const NvJitLinkIdentity &, const NvJitLinkIdentity &) = default;
};

// The identity of the libnvJitLink this process links with (base/nvjitlink_library.h: the one a
// tool or the C API chose, else the environment's, else the toolkit's; where that is the
// interposer standing in for the real library, the real one's), computed on the first call and
// remembered.
Expected<NvJitLinkIdentity> loaded_nvjitlink_identity();

// The identity of the library whose nvJitLinkVersion is `version` (the interposer's real one).
Expected<NvJitLinkIdentity> nvjitlink_identity(nvJitLinkResult (*version)(unsigned *, unsigned *));

// The build ID of the loaded ELF object that holds `address`, read from its notes in memory, as
// hex; empty when it has none.
std::string loaded_build_id(const void *address);

// The nvJitLink options as they go into a key: -time and -no-cache (which change only the info log
// or nvJitLink's in-memory reuse) are dropped, -verbose is not (ptxas records it in the cubin);
// -kernels-used= and -variables-used= are sets, so they are sorted, deduplicated and moved to the
// end; every other option keeps its place.
std::vector<std::string> normalize_link_options(std::span<const std::string> options);

// What an entry holds: a module linked whole or per TU, or one unit's relocatable cubin, or the
// output of a link a program made through the nvJitLink API (the interposer's).
struct LinkedForm {
  LtoMode mode = LtoMode::whole; // per_tu: a module linked from units compiled alone
  bool unit = false;             // one unit's relocatable cubin, compiled alone (per-TU mode)
  bool api = false;              // a program's own link: its inputs' types are in the key

  // As keys hash it and entries store it: "" a module linked whole (keys made before per-TU
  // mode existed hash nothing), "per-tu", "object", "api".
  std::string_view text() const;
  static std::optional<LinkedForm> parse(std::string_view text);
  friend bool operator==(const LinkedForm &, const LinkedForm &) = default;
};

// A cache key with its parts, so that `--dry-run` can show what was hashed.
struct LinkKey {
  // Bump when anything below changes meaning; old entries then simply stop matching.
  static constexpr uint32_t format_version = 1;

  TargetArch arch;                  // with any a/f suffix: sm_90a is not sm_90
  std::vector<std::string> options; // normalized
  NvJitLinkIdentity nvjitlink;
  std::vector<Digest> inputs; // in the order they are added to the link
  LinkedForm form;
  std::vector<uint32_t> units; // per-TU module: the sizes of the runs of `inputs` compiled alone;
                               // an API link: each input's nvJitLinkInputType
  Digest digest;               // SHA-256 over all of the above

  // `options` is the final list passed to nvJitLinkCreate; it is normalized here.
  static LinkKey make(const TargetArch &arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs, LinkedForm form = {},
                      std::vector<uint32_t> units = {});
  bool object() const { return form.unit; }
  nlohmann::json to_json() const;
};

// One input of a link a program made through the nvJitLink API.
struct ApiLinkInput {
  uint32_t type = 0; // nvJitLinkInputType, as the program passed it
  Digest digest;     // of the bytes (nvJitLinkAddFile: of the file's)
};

// The key of a link a program made through the nvJitLink API, from its options as it passed them
// to nvJitLinkCreate: the interposer's, and cudaq-rt-link's of a recording (the recipe's options
// with -arch replaced), so that both find one entry. Nothing when the options name no single
// -arch=sm_NN the key can take (such a link is not cached).
std::optional<LinkKey> api_link_key(std::span<const std::string> options,
                                    const NvJitLinkIdentity &nvjitlink,
                                    std::span<const ApiLinkInput> inputs);

// `options` with its -arch= replaced by `arch` (the recipe of a recording, for another GPU).
std::vector<std::string> with_arch(std::span<const std::string> options, const TargetArch &arch);

} // namespace cudaq_rt
