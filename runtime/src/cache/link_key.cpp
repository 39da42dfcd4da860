// The link cache's key.
//
// nvJitLink is deterministic: the same inputs, options and library give a byte-identical cubin
// (measured, CUDA 13.0). So a cubin may be reused exactly when all of these are equal, and the key
// hashes each of them as a length-prefixed field:
//
//  - the key format version, so that changing what is hashed invalidates old entries instead of
//    mismatching them;
//  - the target arch *with* its a/f suffix: fatbins that hold only sm_100a code cannot be linked
//    for sm_100, and an sm_90a cubin is not an sm_90 one (its arch-specific instructions run on
//    sm_90 parts only);
//  - the nvJitLink options, normalized so that options that cannot change the cubin do not split
//    the cache: -time only adds to the info log, -no-cache only switches nvJitLink's in-memory
//    reuse. -verbose is kept: it passes -v to ptxas, which records its options in the cubin's
//    .note.nv.tkinfo, so a verbose link is a different cubin (measured, CUDA 13.0).
//    -kernels-used= and -variables-used= name sets, so their order and repeats do not matter.
//    Everything else keeps its order (-Xptxas options may override each other), and anything
//    unknown is kept, since a key that is too specific costs a relink while one that is too loose
//    returns wrong code. -split-compile-extended changes the code and is kept, and so is whether
//    -lto was given (without it a PTX + LTO-IR fatbin links through the PTX);
//  - the nvJitLink version and the library's identity. The version alone misses patched or
//    rebuilt libraries; hashing the 98 MB library at every process start would cost about 0.4 s,
//    more than most links. As ccache's compiler_check=mtime does, the realpath, size and mtime of
//    the loaded library stand in for its contents;
//  - the input digests in link order: symbol resolution and the layout of the cubin follow the
//    order of nvJitLinkAddData calls;
//  - what the entry holds, when it is not a module linked whole: a module linked per translation
//    unit ("per-tu", with the sizes of the runs of inputs compiled alone, since which inputs are
//    compiled together decides what is inlined), or one unit's relocatable cubin ("object"). A
//    whole-program key hashes no mode, so keys made before per-TU mode existed still match. The
//    options differ between the modes too (-Xptxas=-c), but the mode is what decides the procedure.
//
// Per-TU mode keeps each unit's relocatable cubin as an entry of its own, under a key of the same
// parts (the unit's container digests, its compile options): the same format, the same checks on
// read, the same LRU eviction. A module's entry is found without its units; the units are looked
// up only when the module misses, so a change to one unit costs that unit and the final link.
#include "cache/link_key.h"

#include <nvJitLink.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <link.h>
#include <sys/stat.h>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace cudaq_rt {
namespace {

Expected<NvJitLinkIdentity> find_nvjitlink_identity() {
  NvJitLinkIdentity id;
  if (nvJitLinkVersion(&id.major, &id.minor) != NVJITLINK_SUCCESS)
    return make_error("libnvJitLink", "nvJitLinkVersion failed");
  // In a PIE, &nvJitLinkVersion is the library's own definition; a non-PIE executable that takes
  // the address gets a canonical PLT entry instead, so fall back to asking the loader by soname.
  std::string loaded;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void *>(&nvJitLinkVersion), &info) && info.dli_fname &&
      fs::path(info.dli_fname).filename().string().find("nvJitLink") != std::string::npos)
    loaded = info.dli_fname;
  if (loaded.empty()) {
    std::string soname = cat("libnvJitLink.so.", id.major);
    if (void *handle = ::dlopen(soname.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      link_map *map = nullptr;
      if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
        loaded = map->l_name;
      ::dlclose(handle);
    }
  }
  if (loaded.empty())
    return make_error("libnvJitLink", "cannot find where the loaded library lives");
  char *real = ::realpath(loaded.c_str(), nullptr);
  if (!real)
    return make_error(loaded, "cannot resolve the path: ", std::strerror(errno));
  id.path = real;
  std::free(real);
  struct stat st;
  if (::stat(id.path.c_str(), &st) != 0)
    return make_error(id.path, "cannot stat: ", std::strerror(errno));
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

} // namespace

std::string NvJitLinkIdentity::version() const {
  return cat(major, '.', minor);
}

json NvJitLinkIdentity::to_json() const {
  return {{"version", version()}, {"path", path}, {"size", size}, {"mtime_ns", mtime_ns}};
}

Expected<NvJitLinkIdentity> loaded_nvjitlink_identity() {
  static const Expected<NvJitLinkIdentity> identity = find_nvjitlink_identity();
  return identity;
}

std::vector<std::string> normalize_link_options(std::span<const std::string> options) {
  static constexpr std::string_view kernels = "-kernels-used=", variables = "-variables-used=";
  std::vector<std::string> out, kernel_set, variable_set;
  for (const std::string &o : options) {
    if (o == "-time" || o == "-no-cache")
      continue;
    if (o.starts_with(kernels))
      kernel_set.push_back(o);
    else if (o.starts_with(variables))
      variable_set.push_back(o);
    else
      out.push_back(o);
  }
  for (std::vector<std::string> *set : {&kernel_set, &variable_set}) {
    std::sort(set->begin(), set->end());
    set->erase(std::unique(set->begin(), set->end()), set->end());
    out.insert(out.end(), set->begin(), set->end());
  }
  return out;
}

std::string_view LinkedForm::text() const {
  return unit ? "object" : mode == LtoMode::per_tu ? "per-tu" : "";
}

std::optional<LinkedForm> LinkedForm::parse(std::string_view text) {
  for (LinkedForm f :
       {LinkedForm{}, LinkedForm{LtoMode::per_tu}, LinkedForm{LtoMode::per_tu, true}})
    if (f.text() == text)
      return f;
  return std::nullopt;
}

LinkKey LinkKey::make(const TargetArch &arch, std::span<const std::string> options,
                      NvJitLinkIdentity nvjitlink, std::vector<Digest> inputs, LinkedForm form,
                      std::vector<uint32_t> units) {
  LinkKey k{arch,
            normalize_link_options(options),
            std::move(nvjitlink),
            std::move(inputs),
            form,
            std::move(units),
            Digest{}};
  Sha256 h;
  h.field("cudaq-rt link key");
  h.field(std::to_string(format_version));
  h.field(k.arch.str());
  h.field(std::to_string(k.options.size()));
  for (const std::string &o : k.options)
    h.field(o);
  h.field(k.nvjitlink.version());
  h.field(k.nvjitlink.path);
  h.field(std::to_string(k.nvjitlink.size));
  h.field(std::to_string(k.nvjitlink.mtime_ns));
  h.field(std::to_string(k.inputs.size()));
  for (const Digest &d : k.inputs)
    h.field(std::string_view(reinterpret_cast<const char *>(d.bytes.data()), d.bytes.size()));
  if (!k.form.text().empty()) {
    h.field("mode");
    h.field(k.form.text());
    h.field(std::to_string(k.units.size()));
    for (uint32_t n : k.units)
      h.field(std::to_string(n));
  }
  k.digest = h.finish();
  return k;
}

json LinkKey::to_json() const {
  json j = {{"digest", digest.str()},
            {"format_version", format_version},
            {"arch", arch.str()},
            {"options", options},
            {"nvjitlink", nvjitlink.to_json()},
            {"inputs", json::array()},
            {"mode", form.text().empty() ? "whole" : form.text()}};
  for (const Digest &d : inputs)
    j["inputs"].push_back(d.str());
  if (!units.empty())
    j["units"] = units;
  return j;
}

} // namespace cudaq_rt
