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
//    more than most links. Its ELF build ID (NT_GNU_BUILD_ID, a hash the toolkit's linker made of
//    its contents, read from the loaded library's notes in memory at no cost) stands in for them:
//    the same toolkit installed from a .deb, a wheel or a container image at another path or time
//    has the same build ID, so a fleet shares entries. Only a library without one is known, as
//    ccache's compiler_check=mtime does, by the realpath, size and mtime of the loaded file;
//  - the input digests in link order: symbol resolution and the layout of the cubin follow the
//    order of nvJitLinkAddData calls;
//  - what the entry holds, when it is not a module linked whole: the output of a link a program
//    made through the nvJitLink API ("api", the interposer's), with each input's type as the
//    program passed it; a module linked per translation
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

#include "base/nvjitlink_library.h"

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

// The identity of the library that holds `version` (its nvJitLinkVersion), which answers
// `major`.`minor`.
Expected<NvJitLinkIdentity> identity_of(void *version, unsigned major, unsigned minor) {
  NvJitLinkIdentity id;
  id.major = major;
  id.minor = minor;
  Dl_info info{};
  if (!::dladdr(version, &info) || !info.dli_fname || !*info.dli_fname)
    return make_error("libnvJitLink", "cannot find where the loaded library lives");
  id.build_id = loaded_build_id(version);
  char *real = ::realpath(info.dli_fname, nullptr);
  if (!real)
    return make_error(info.dli_fname, "cannot resolve the path: ", std::strerror(errno));
  id.path = real;
  std::free(real);
  struct stat st;
  if (::stat(id.path.c_str(), &st) != 0)
    return make_error(id.path, "cannot stat: ", std::strerror(errno));
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

Expected<NvJitLinkIdentity> find_nvjitlink_identity() {
  auto lib = process_nvjitlink();
  if (!lib)
    return lib.error();
  // Where the library is the interposer standing in for the real one, the real one links.
  void *version =
      (*lib)->real_version ? (*lib)->real_version : reinterpret_cast<void *>((*lib)->api.version);
  return identity_of(version, (*lib)->major, (*lib)->minor);
}

struct BuildIdSearch {
  uintptr_t address = 0;
  std::string hex;
  bool found = false; // the object holding `address`
};

// The NT_GNU_BUILD_ID note among `size` bytes of notes, as hex, or empty.
std::string build_id_in_notes(const uint8_t *p, size_t size) {
  constexpr uint32_t nt_gnu_build_id = 3;
  auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
  while (size >= 12) {
    uint32_t namesz, descsz, type;
    std::memcpy(&namesz, p, 4);
    std::memcpy(&descsz, p + 4, 4);
    std::memcpy(&type, p + 8, 4);
    size_t total = 12 + align4(namesz) + align4(descsz);
    if (total > size)
      break;
    if (type == nt_gnu_build_id && namesz == 4 && std::memcmp(p + 12, "GNU", 4) == 0) {
      static constexpr char digits[] = "0123456789abcdef";
      std::string hex;
      for (const uint8_t *d = p + 12 + align4(namesz), *e = d + descsz; d != e; ++d) {
        hex += digits[*d >> 4];
        hex += digits[*d & 15];
      }
      return hex;
    }
    p += total;
    size -= total;
  }
  return {};
}

int find_build_id(dl_phdr_info *info, size_t, void *data) {
  auto *search = static_cast<BuildIdSearch *>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && search->address >= start && search->address < start + ph.p_memsz)
      holds = true;
  }
  if (!holds)
    return 0;
  for (int i = 0; i < info->dlpi_phnum && search->hex.empty(); ++i) {
    const auto &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_NOTE)
      search->hex = build_id_in_notes(
          reinterpret_cast<const uint8_t *>(info->dlpi_addr + ph.p_vaddr), ph.p_memsz);
  }
  search->found = true;
  return 1;
}

} // namespace

std::string loaded_build_id(const void *address) {
  BuildIdSearch search;
  search.address = reinterpret_cast<uintptr_t>(address);
  ::dl_iterate_phdr(find_build_id, &search);
  return search.hex;
}

std::string NvJitLinkIdentity::version() const {
  return cat(major, '.', minor);
}

json NvJitLinkIdentity::to_json() const {
  json j = {{"version", version()}, {"path", path}};
  if (!build_id.empty())
    j["build_id"] = build_id;
  else
    j.update({{"size", size}, {"mtime_ns", mtime_ns}});
  return j;
}

Expected<NvJitLinkIdentity> loaded_nvjitlink_identity() {
  static const Expected<NvJitLinkIdentity> identity = find_nvjitlink_identity();
  return identity;
}

Expected<NvJitLinkIdentity> nvjitlink_identity(nvJitLinkResult (*version)(unsigned *, unsigned *)) {
  unsigned major = 0, minor = 0;
  if (!version || version(&major, &minor) != NVJITLINK_SUCCESS)
    return make_error("libnvJitLink", "nvJitLinkVersion failed");
  return identity_of(reinterpret_cast<void *>(version), major, minor);
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
  return api ? "api" : unit ? "object" : mode == LtoMode::per_tu ? "per-tu" : "";
}

std::optional<LinkedForm> LinkedForm::parse(std::string_view text) {
  for (LinkedForm f : {LinkedForm{}, LinkedForm{LtoMode::per_tu}, LinkedForm{LtoMode::per_tu, true},
                       LinkedForm{LtoMode::whole, false, true}})
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
  if (!k.nvjitlink.build_id.empty()) {
    h.field("build-id");
    h.field(k.nvjitlink.build_id);
  } else {
    h.field(k.nvjitlink.path);
    h.field(std::to_string(k.nvjitlink.size));
    h.field(std::to_string(k.nvjitlink.mtime_ns));
  }
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
    j[form.api ? "input_types" : "units"] = units;
  return j;
}

std::optional<LinkKey> api_link_key(std::span<const std::string> options,
                                    const NvJitLinkIdentity &nvjitlink,
                                    std::span<const ApiLinkInput> inputs) {
  static constexpr std::string_view flag = "-arch=";
  std::optional<TargetArch> arch;
  for (const std::string &o : options) {
    if (!o.starts_with(flag))
      continue;
    auto parsed = parse_arch(std::string_view(o).substr(flag.size()));
    if (arch || !parsed)
      return std::nullopt; // twice, or not an sm_NN the key can name
    arch = *parsed;
  }
  if (!arch)
    return std::nullopt;
  std::vector<Digest> digests;
  std::vector<uint32_t> types;
  for (const ApiLinkInput &in : inputs) {
    digests.push_back(in.digest);
    types.push_back(in.type);
  }
  return LinkKey::make(*arch, options, nvjitlink, std::move(digests),
                       LinkedForm{LtoMode::whole, false, true}, std::move(types));
}

std::vector<std::string> with_arch(std::span<const std::string> options, const TargetArch &arch) {
  std::vector<std::string> out;
  for (const std::string &o : options)
    out.push_back(o.starts_with("-arch=") ? "-arch=" + arch.str() : o);
  return out;
}

} // namespace cudaq_rt
