// Finding the real library.
//
// Preloaded, the interposer comes first in the loader's search and the program's own libnvJitLink
// next: RTLD_NEXT finds it. Standing in for it (the interposer on the loader's path under the
// library's file name, or already loaded when a Python program asks for the library by name), no
// definition follows, and the real library is loaded by path: $CUDAQ_RT_NVJITLINK_REAL, else the
// first of these that is a real library of the major (the interposer itself never is):
//  1. the loader's own search path for the program (LD_LIBRARY_PATH, its RUNPATH, the system's
//     directories: dlinfo's RTLD_DI_SERINFO), the library the program would have loaded without
//     the interposer. A program built against a 13.5 wheel's header with that wheel in its RUNPATH
//     calls __nvJitLinkCreate_13_5, which the toolkit's 13.0 lacks: taking the toolkit's first
//     would stop a program that runs without the interposer;
//  2. NVIDIA's wheels, where a CUDA-Q Python install loads the library from:
//     <site-packages>/nvidia/cu13/lib/libnvJitLink.so.13 (cu13) or
//     nvidia/nvjitlink/lib/libnvJitLink.so.12 (cu12), in the site-packages directories the
//     process already loads objects from and those of $VIRTUAL_ENV, $CONDA_PREFIX and $PYTHONPATH
//     (a Python program looks in its site-packages before the system's libraries);
//  3. the CUDA toolkit's: $CUDA_HOME/lib64, $CUDA_PATH/lib64, the one cudaq-rt was built with,
//     /usr/local/cuda/lib64, /usr/local/cuda-<major>/lib64.
#include "interpose/real_nvjitlink.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <link.h>
#include <vector>

#ifndef CUDAQ_RT_CUDA_LIBDIR
#define CUDAQ_RT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

// Whether `p` lies in this library (the interposer) rather than in the real one.
bool is_ours(void *p) {
  static int anchor;
  Dl_info mine{}, theirs{};
  return ::dladdr(&anchor, &mine) && ::dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
}

// `name` in `from`, under the real library's version node or unversioned; never this library's.
void *lookup(void *from, const char *name, const char *node) {
  void *p = ::dlvsym(from, name, node);
  if (!p)
    p = ::dlsym(from, name);
  return p && !is_ours(p) ? p : nullptr;
}

std::string find_all(RealNvJitLink &r) {
  return r.api.find_all([&r](const char *name) { return r.symbol(name); });
}

// The directories `site-packages` and `dist-packages` of the objects the process has loaded.
int add_site_dir(dl_phdr_info *info, size_t, void *data) {
  auto *dirs = static_cast<std::vector<fs::path> *>(data);
  std::string_view name = info->dlpi_name ? info->dlpi_name : "";
  for (std::string_view marker : {"/site-packages/", "/dist-packages/"})
    if (size_t at = name.find(marker); at != std::string_view::npos) {
      fs::path dir(name.substr(0, at + marker.size() - 1));
      if (std::find(dirs->begin(), dirs->end(), dir) == dirs->end())
        dirs->push_back(dir);
    }
  return 0;
}

// <prefix>/lib/python3.*/site-packages.
void add_prefix_site_dirs(const char *prefix, std::vector<fs::path> &dirs) {
  if (!prefix || !*prefix)
    return;
  std::error_code ec;
  for (auto it = fs::directory_iterator(fs::path(prefix) / "lib", ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind("python3", 0) == 0)
      dirs.push_back(it->path() / "site-packages");
}

std::vector<fs::path> site_dirs() {
  std::vector<fs::path> dirs;
  ::dl_iterate_phdr(add_site_dir, &dirs);
  add_prefix_site_dirs(std::getenv("VIRTUAL_ENV"), dirs);
  add_prefix_site_dirs(std::getenv("CONDA_PREFIX"), dirs);
  if (const char *pp = std::getenv("PYTHONPATH"))
    for (std::string_view rest = pp; !rest.empty();) {
      size_t colon = rest.find(':');
      if (colon)
        dirs.emplace_back(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? "" : rest.substr(colon + 1);
    }
  return dirs;
}

// The directories the loader searches for the program's libraries, in its order.
std::vector<fs::path> loader_dirs() {
  std::vector<fs::path> dirs;
  void *program = ::dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD);
  Dl_serinfo size{};
  if (!program || ::dlinfo(program, RTLD_DI_SERINFOSIZE, &size) != 0 || size.dls_size == 0)
    return dirs;
  std::vector<std::max_align_t> storage(size.dls_size / sizeof(std::max_align_t) + 1);
  auto *info = reinterpret_cast<Dl_serinfo *>(storage.data());
  *info = size;
  if (::dlinfo(program, RTLD_DI_SERINFO, info) == 0)
    for (unsigned i = 0; i < info->dls_cnt; ++i)
      if (info->dls_serpath[i].dls_name && *info->dls_serpath[i].dls_name)
        dirs.emplace_back(info->dls_serpath[i].dls_name);
  return dirs;
}

// Where a real library of `m` may be, in order.
std::vector<std::string> candidates(const NvJitLinkMajor &m) {
  const std::string file = m.version_node;
  std::vector<std::string> out;
  for (const fs::path &dir : loader_dirs())
    out.push_back((dir / file).string());
  for (const fs::path &site : site_dirs())
    out.push_back((site / m.wheel_lib_dir / file).string());
  for (const char *env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *home = std::getenv(env); home && *home)
      out.push_back((fs::path(home) / "lib64" / file).string());
  out.push_back(CUDAQ_RT_CUDA_LIBDIR "/" + file);
  out.push_back("/usr/local/cuda/lib64/" + file);
  out.push_back(cat("/usr/local/cuda-", m.major, "/lib64/", file));
  return out;
}

// Whether `path` is this interposer's own file (under the library's name on the loader's path).
bool is_this_library(const std::string &path) {
  static int anchor;
  Dl_info mine{};
  std::error_code ec;
  return ::dladdr(&anchor, &mine) && mine.dli_fname && fs::equivalent(path, mine.dli_fname, ec);
}

// The library at `path`, if it is a real one of `m`; else why not.
Expected<RealNvJitLink> open_real(const std::string &path, const NvJitLinkMajor &m) {
  RealNvJitLink r;
  r.version_node = m.version_node;
  r.path = path;
  ::dlerror();
  r.library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!r.library) {
    const char *why = ::dlerror();
    return make_error(path, "cannot load the real libnvJitLink: ", why ? why : "dlopen failed");
  }
  if (::dlsym(r.library, "cudaq_rt_nvjitlink_real_symbol"))
    return make_error(path, "is the interposer, not the real libnvJitLink");
  if (!::dlvsym(r.library, "nvJitLinkVersion", m.version_node))
    return make_error(path, "is not the real ", m.version_node, " (no ", m.version_node,
                      " version node)");
  if (std::string missing = find_all(r); !missing.empty())
    return make_error(path, "is not the real ", m.version_node, ": it lacks ", missing);
  return r;
}

Expected<RealNvJitLink> find_real(const NvJitLinkMajor &m) {
  RealNvJitLink r;
  r.library = RTLD_NEXT;
  r.version_node = m.version_node;
  if (::dlvsym(RTLD_NEXT, "nvJitLinkVersion", m.version_node)) {
    std::string missing = find_all(r);
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void *>(r.api.version), &info) && info.dli_fname)
      r.path = info.dli_fname;
    if (!missing.empty())
      return make_error(r.path, "is not the real ", m.version_node, ": it lacks ", missing);
    return r;
  }
  // The program's nvJitLink is another major's: this interposer is the wrong one to preload.
  if (void *other = ::dlsym(RTLD_NEXT, "nvJitLinkVersion"); other && !is_ours(other)) {
    unsigned major = 0, minor = 0;
    reinterpret_cast<nvJitLinkResult (*)(unsigned *, unsigned *)>(other)(&major, &minor);
    return make_error("", "this program links with nvJitLink ", major, ".", minor,
                      " and this interposer is for ", m.version_node,
                      ": preload libcudaq_rt_nvjitlink_cu", major, ".so instead");
  }
  if (const char *env = std::getenv(nvjitlink_real_env); env && *env) {
    auto real = open_real(env, m);
    if (!real)
      return make_error(real.error().subject, real.error().message, " (from $", nvjitlink_real_env,
                        ")");
    return real;
  }
  std::string tried;
  for (const std::string &path : candidates(m)) {
    std::error_code ec;
    if (!fs::exists(path, ec) || is_this_library(path))
      continue;
    auto real = open_real(path, m);
    if (real)
      return real;
    tried += "; " + real.error().str();
  }
  return make_error("", "cannot find the real ", m.version_node, " (set $", nvjitlink_real_env,
                    " to its path)", tried);
}

} // namespace

void *RealNvJitLink::symbol(const char *name) const {
  return lookup(library ? library : RTLD_NEXT, name, version_node);
}

Expected<const RealNvJitLink *> real_nvjitlink(const NvJitLinkMajor &major) {
  static const Expected<RealNvJitLink> real = find_real(major);
  if (!real)
    return real.error();
  return &*real;
}

} // namespace cudaq_rt
