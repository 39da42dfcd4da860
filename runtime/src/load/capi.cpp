// The C API (cudaq_rt/cudaq_rt.h) over the load path (server.h).
//
// Where a program's own device code comes from. CUDA-Q realtime reads the __nv_relfatbin of the
// running binary; so does cudaq_rt_open_self, and of the shared objects the process loaded that
// export handlers (device code cannot call across a shared object's boundary, so one without
// exports holds nothing a handler can reach; NCCL's hundreds of containers stay out). Bridge
// libraries are left out too: their hooks come with the chosen bridge. The files are read by
// path, so each is checked, before and after it is read, to be the very file the process has
// mapped (the device and inode in /proc/self/maps, and /proc/self/exe for the executable): a
// binary rebuilt or replaced on disk since the process started holds someone else's device code,
// and its handlers would not be the ones the program was built with. What is read is packed, as
// cudaq-rt-pack would, into a private package in a temporary directory, so that every later step
// is the load path's own: the same plan, cache keys, link, checks and messages.
//
// Function-table entries are device addresses, valid only in the module they were read from. An
// address the application made up, or looked up on another server (another binary's module, or
// an earlier load of this one), would have the dispatch kernel jump outside its module: start()
// refuses every entry that is not one this server's lookup returned, naming where it came from
// when another live server handed it out, and Server::set_function_table checks the same against
// the module itself.
#include "cudaq_rt/cudaq_rt.h"

#include "base/nvjitlink_library.h"
#include "cudaq_rt/bridge_plugin.h"
#include "formats/export_records.h"
#include "formats/input_file.h"
#include "load/capi_gpu.h"
#include "load/client.h"
#include "load/server.h"
#include "oci/store.h"
#include "pack/pack.h"
#include "package/package.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;
using namespace cudaq_rt;

struct cudaq_rt_code {
  fs::path package;
  fs::path temporary; // the private package's directory, removed with the code
  std::string label;  // for messages: the package path, or "this program (PATH)"
  Manifest manifest;
  std::vector<std::string> names;           // handler exports, then alias wire names
  std::shared_ptr<const BlobSource> source; // a registry package's (oci/store.h)
  ~cudaq_rt_code() {
    std::error_code ec;
    if (!temporary.empty())
      fs::remove_all(temporary, ec);
  }
};

namespace {

thread_local std::string last_error;

int fail(int code, const std::string &message) {
  last_error = message;
  return code;
}
int fail(int code, const Error &e) {
  return fail(code, e.str());
}

// Every C entry point runs its body through here: nothing thrown crosses into C.
template <class Body> int guarded(Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return fail(CUDAQ_RT_E_FAILED, "out of memory");
  } catch (const std::exception &e) {
    return fail(CUDAQ_RT_E_FAILED, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(CUDAQ_RT_E_FAILED, "internal error");
  }
}

// Addresses handed out by live servers' lookups, and whose code they belong to.
std::mutex issued_mutex;
std::map<uint64_t, std::pair<const cudaq_rt_server *, std::string>> issued_by;

struct OwnedConfig {
  int device = 0;
  std::string bridge, bridge_config, dispatcher, cache_dir;
  std::vector<std::string> trust;
  unsigned blocks = 0, threads = 0;
  bool allow_link = true, use_cache = true;
  std::vector<std::string> link_options;
  double stop_timeout_s = 5;
};

Expected<OwnedConfig> own(const cudaq_rt_config &c) {
  if (c.struct_size != sizeof(cudaq_rt_config))
    return make_error("", "cudaq_rt_config: struct_size is ", c.struct_size, ", not ",
                      sizeof(cudaq_rt_config), " (initialise it with cudaq_rt_config_init)");
  if (c.device < 0)
    return make_error("", "cudaq_rt_config: device ", c.device, " is negative");
  if ((c.grid_blocks == 0) != (c.grid_threads == 0))
    return make_error("", "cudaq_rt_config: grid_blocks and grid_threads are both 0 (the "
                          "default shape) or both positive");
  if (c.num_link_options && !c.link_options)
    return make_error("", "cudaq_rt_config: link_options is NULL but num_link_options is ",
                      c.num_link_options);
  if (!(c.stop_timeout_s >= 0))
    return make_error("", "cudaq_rt_config: stop_timeout_s must be 0 or more");
  if (c.nvjitlink && *c.nvjitlink) {
    auto lib = choose_nvjitlink(c.nvjitlink);
    if (!lib)
      return make_error("", "cudaq_rt_config: nvjitlink: ", lib.error().str());
    if (std::string why = nvjitlink_refuses_runtime_code(**lib); !why.empty())
      return make_error("", "cudaq_rt_config: nvjitlink: ", why);
  }
  OwnedConfig o;
  o.device = c.device;
  auto str = [](const char *s) { return s ? std::string(s) : std::string(); };
  o.bridge = str(c.bridge);
  o.bridge_config = str(c.bridge_config);
  o.dispatcher = str(c.dispatcher);
  o.cache_dir = str(c.cache_dir);
  // "PATH[:PATH...]", as CUDAQ_RT_TRUST; an empty string is NULL.
  o.trust = split_path_list(c.trust ? c.trust : "");
  o.blocks = c.grid_blocks;
  o.threads = c.grid_threads;
  o.allow_link = c.allow_link != 0;
  o.use_cache = c.use_cache != 0;
  for (size_t i = 0; i < c.num_link_options; ++i) {
    if (!c.link_options[i])
      return make_error("", "cudaq_rt_config: link_options[", i, "] is NULL");
    o.link_options.push_back(c.link_options[i]);
  }
  o.stop_timeout_s = c.stop_timeout_s;
  return o;
}

// The device and inode of each file the process has mapped, from /proc/self/maps.
std::map<std::string, std::pair<dev_t, ino_t>> mapped_files() {
  std::map<std::string, std::pair<dev_t, ino_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, path;
    unsigned long long inode = 0;
    if (!(in >> range >> perms >> offset >> dev >> inode) || inode == 0)
      continue;
    std::getline(in >> std::ws, path);
    unsigned major_id = 0, minor_id = 0;
    if (path.empty() || path[0] != '/' ||
        std::sscanf(dev.c_str(), "%x:%x", &major_id, &minor_id) != 2)
      continue;
    // A file replaced on disk since it was mapped: what its path names now is another file.
    static const std::string deleted = " (deleted)";
    if (path.size() > deleted.size() &&
        path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0) {
      out[path.substr(0, path.size() - deleted.size())] = {0, 0};
      continue;
    }
    out.emplace(path, std::pair(makedev(major_id, minor_id), static_cast<ino_t>(inode)));
  }
  return out;
}

// Whether the file at `path` is still the one the process runs (dev, ino).
Status same_file(const std::string &path, std::pair<dev_t, ino_t> running) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return make_error(
        path, "is mapped in this process but cannot be read from disk: ", std::strerror(errno));
  if (st.st_dev != running.first || st.st_ino != running.second)
    return make_error(path, "is not the binary this process runs (it was replaced on disk since "
                            "the process started): its device code is another binary's");
  return Status::ok();
}

struct SelfObject {
  std::string path;
  std::pair<dev_t, ino_t> identity;
};

int collect_object(struct dl_phdr_info *info, size_t, void *data) {
  auto *paths = static_cast<std::vector<std::string> *>(data);
  if (info->dlpi_name && info->dlpi_name[0] == '/')
    paths->push_back(info->dlpi_name);
  return 0;
}

// A shared object that is a bridge library: it exports the bridge entry point.
bool is_bridge_library(const std::string &path) {
  void *h = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!h)
    return false;
  const bool bridge = ::dlsym(h, CUDAQ_RT_BRIDGE_ENTRY_SYMBOL) != nullptr;
  ::dlclose(h);
  return bridge;
}

Expected<std::vector<SelfObject>> self_objects() {
  auto mapped = mapped_files();
  std::vector<SelfObject> out;
  // The executable: /proc/self/exe names the file the kernel started, even after a rename.
  struct stat exe;
  if (::stat("/proc/self/exe", &exe) != 0)
    return make_error("/proc/self/exe", "cannot be read: ", std::strerror(errno));
  std::error_code ec;
  fs::path exe_path = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return make_error("/proc/self/exe", "cannot be read: ", ec.message());
  const std::string deleted = " (deleted)";
  std::string exe_text = exe_path.string();
  if (exe_text.size() > deleted.size() &&
      exe_text.compare(exe_text.size() - deleted.size(), deleted.size(), deleted) == 0)
    return make_error(exe_text.substr(0, exe_text.size() - deleted.size()),
                      "is not the binary this process runs (it was replaced on disk since the "
                      "process started): its device code is another binary's");
  out.push_back({exe_text, {exe.st_dev, exe.st_ino}});
  std::vector<std::string> loaded;
  ::dl_iterate_phdr(collect_object, &loaded);
  for (const std::string &path : loaded) {
    auto it = mapped.find(path);
    if (it == mapped.end() || path == exe_text)
      continue;
    auto file = InputFile::open(path);
    if (!file)
      continue; // not something we can read (a vDSO, a file gone): it holds no handlers of ours
    const bool ours =
        std::any_of(file->units().begin(), file->units().end(),
                    [](const CodeUnit &u) { return u.has_relfatbin && !u.exports.empty(); });
    if (ours && !is_bridge_library(path))
      out.push_back({path, it->second});
  }
  return out;
}

Expected<std::unique_ptr<cudaq_rt_code>> code_from(const fs::path &package, std::string label,
                                                   std::shared_ptr<const BlobSource> source = {}) {
  auto pkg = Package::open(package, {.source = source});
  if (!pkg)
    return std::move(pkg).take_error();
  // Every blob the manifest names is read and checked against its digest now, as the header
  // promises and cudaq-rt-pack --list does: a corrupt package is refused at the open. A
  // registry package's blobs not fetched yet are checked when the load fetches them.
  for (const Digest &d : pkg->referenced_blobs())
    if (pkg->has_blob(d) || !source)
      if (auto blob = pkg->read_blob(d); !blob)
        return std::move(blob).take_error();
  auto code = std::make_unique<cudaq_rt_code>();
  code->package = package;
  code->source = std::move(source);
  code->label = std::move(label);
  code->manifest = pkg->manifest();
  for (const ExportEntry &e : code->manifest.exports)
    if (e.kind == export_kind_name(ExportKind::handler))
      code->names.push_back(e.name);
  for (const AliasEntry &a : code->manifest.aliases)
    code->names.push_back(a.name);
  return code;
}

std::string list_of(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &n : names)
    out += cat(out.empty() ? "" : ", ", n);
  return out.empty() ? "none" : out;
}

} // namespace

struct cudaq_rt_server {
  cudaq_rt_code *code = nullptr;
  Gpu *gpu = nullptr;
  OwnedConfig config;
  TrustPolicy trust; // resolved by each cudaq_rt_load
  std::vector<GlobalValue> globals;
  std::unique_ptr<Server> server;
  std::set<uint64_t> issued; // addresses this load's lookups returned
  std::vector<cudaq_rt_function_entry> table;
  bool custom_table = false;
  uint32_t next_request_id = 0;

  bool running() const { return server && server->running(); }

  void forget_addresses() {
    std::lock_guard<std::mutex> lock(issued_mutex);
    for (uint64_t a : issued) {
      auto it = issued_by.find(a);
      if (it != issued_by.end() && it->second.first == this)
        issued_by.erase(it);
    }
    issued.clear();
  }
  // Drops the loaded module, and with it every address and function.
  void unload() {
    forget_addresses();
    table.clear();
    custom_table = false;
    server.reset();
  }
  ~cudaq_rt_server() { unload(); }

  LoadOptions load_options() const {
    LoadOptions o;
    o.package = code->package;
    o.blob_source = code->source;
    o.device = config.device;
    o.link.bridge = config.bridge;
    o.link.dispatcher = config.dispatcher;
    o.link.extra_options = config.link_options;
    o.bridge_config = config.bridge_config;
    o.policy.allow_link = config.allow_link;
    o.cache = {.dir = config.cache_dir, .remote = "", .disable = !config.use_cache};
    o.trust = trust;
    o.own_code = !code->temporary.empty();
    o.globals = globals;
    if (config.blocks)
      o.shape = LaunchShape{config.blocks, config.threads};
    o.stop_timeout_s = config.stop_timeout_s;
    return o;
  }

  // The table start() launches with: the application's entries, each checked to be this load's,
  // or every handler under its own name and aliases.
  Expected<std::vector<cudaq_rt_function_entry>> launch_table() const {
    std::vector<cudaq_rt_function_entry> out;
    if (custom_table) {
      for (const cudaq_rt_function_entry &e : table) {
        const auto address = reinterpret_cast<uint64_t>(e.handler);
        if (issued.count(address))
          continue;
        std::lock_guard<std::mutex> lock(issued_mutex);
        auto other = issued_by.find(address);
        if (other != issued_by.end())
          return make_error(code->label, "function table entry for function_id ",
                            hex(e.function_id), ": ", hex(address),
                            " was looked up on a server of ", quote(other->second.second),
                            ": device code from another binary cannot serve here");
        return make_error(code->label, "function table entry for function_id ", hex(e.function_id),
                          ": ", hex(address),
                          " did not come from cudaq_rt_lookup_handler on this server's load");
      }
      return table;
    }
    const LoadReport &r = server->report();
    for (const std::string &h : r.handlers)
      out.push_back({cudaq_rt_function_id(h.c_str()), 0,
                     reinterpret_cast<cudaq_rt_handler_fn>(*server->handler_address(h))});
    for (const AliasEntry &a : r.aliases)
      out.push_back({a.function_id, 0,
                     reinterpret_cast<cudaq_rt_handler_fn>(*server->handler_address(a.handler))});
    return out;
  }
};

namespace {

// No GPU work can succeed on a machine without one: say so plainly, as the tools do.
int load(cudaq_rt_server &s) {
  if (s.running())
    return fail(CUDAQ_RT_E_STATE, cat(quote(s.code->label),
                                      ": cudaq_rt_load: the dispatch kernel is running (stop it "
                                      "first)"));
  s.unload();
  // The trust this load runs under, resolved once: config.trust over CUDAQ_RT_TRUST, and
  // CUDAQ_RT_SIGN_KEY for the cache entries a link at load stores.
  auto trust = resolve_trust({.sign_key = "", .trust = s.config.trust},
                             [](const char *var) -> const char * { return std::getenv(var); });
  if (!trust)
    return fail(CUDAQ_RT_E_REFUSED, trust.error());
  s.trust = std::move(*trust);
  if (auto st = check_package_trust(s.load_options()); !st)
    return fail(CUDAQ_RT_E_REFUSED, st.error());
  if (s.gpu == &driver_gpu())
    if (auto why = no_gpu_reason())
      return fail(CUDAQ_RT_E_NO_GPU, *why);
  auto loaded = Server::load(s.load_options(), *s.gpu);
  if (!loaded)
    return fail(CUDAQ_RT_E_FAILED, loaded.error());
  s.server = std::move(*loaded);
  return CUDAQ_RT_OK;
}

std::string subject_of(const cudaq_rt_server &s) {
  return quote(s.code->label);
}

} // namespace

namespace cudaq_rt {
int create_server(cudaq_rt_code *code, const cudaq_rt_config *config, Gpu &gpu,
                  cudaq_rt_server **out) {
  return guarded([&] {
    if (!code || !out)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_server_create: code and server must not be NULL");
    *out = nullptr;
    cudaq_rt_config defaults;
    cudaq_rt_config_init(&defaults);
    auto owned = own(config ? *config : defaults);
    if (!owned)
      return fail(CUDAQ_RT_E_ARGUMENT, owned.error().message);
    if (!owned->dispatcher.empty() && owned->dispatcher != "builtin")
      if (int rc = cudaq_rt_find_dispatch_kernel(code, owned->dispatcher.c_str()); rc)
        return rc;
    auto s = std::make_unique<cudaq_rt_server>();
    s->code = code;
    s->gpu = &gpu;
    s->config = std::move(*owned);
    *out = s.release();
    return CUDAQ_RT_OK;
  });
}
} // namespace cudaq_rt

extern "C" {

void cudaq_rt_config_init(cudaq_rt_config *c) {
  if (!c)
    return;
  std::memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->allow_link = 1;
  c->use_cache = 1;
  c->stop_timeout_s = 5;
}

const char *cudaq_rt_last_error(void) {
  return last_error.c_str();
}

int cudaq_rt_open_package(const char *path, cudaq_rt_code **out) {
  return guarded([&] {
    if (!path || !out)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_open_package: path and code must not be NULL");
    *out = nullptr;
    // A registry reference: pulled into the store under the link cache's directory, as
    // cudaq-rt-run does, then opened from there.
    fs::path dir = path;
    std::shared_ptr<const BlobSource> source;
    if (is_oci_reference(path)) {
      auto got = package_from_reference(path, CacheRequest{}, false);
      if (!got)
        return fail(CUDAQ_RT_E_FAILED, got.error());
      dir = got->package;
      source = got->source;
    }
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir, ec)))
      return fail(CUDAQ_RT_E_NOT_FOUND, make_error(path, "no such package"));
    auto code = code_from(dir, path, std::move(source));
    if (!code)
      return fail(CUDAQ_RT_E_FAILED, code.error());
    *out = code->release();
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_open_self(cudaq_rt_code **out) {
  return guarded([&] {
    if (!out)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_open_self: code must not be NULL");
    *out = nullptr;
    auto objects = self_objects();
    if (!objects)
      return fail(CUDAQ_RT_E_REFUSED, objects.error());
    for (const SelfObject &o : *objects)
      if (auto st = same_file(o.path, o.identity); !st)
        return fail(CUDAQ_RT_E_REFUSED, st.error());
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = cat(tmp && *tmp ? tmp : "/tmp", "/cudaq-rt-self-XXXXXX");
    if (!::mkdtemp(pattern.data()))
      return fail(CUDAQ_RT_E_FAILED, make_error(pattern, "cannot create a temporary directory: ",
                                                std::strerror(errno)));
    auto code = std::make_unique<cudaq_rt_code>();
    code->temporary = pattern;
    PackOptions opt;
    for (const SelfObject &o : *objects)
      opt.inputs.push_back({o.path, Role::application, ""});
    opt.output_dir = pattern;
    opt.name = "self";
    auto packed = pack(opt);
    if (!packed)
      return fail(CUDAQ_RT_E_FAILED, packed.error());
    // The files read were the ones mapped, unless one was replaced while it was read.
    for (const SelfObject &o : *objects)
      if (auto st = same_file(o.path, o.identity); !st)
        return fail(CUDAQ_RT_E_REFUSED, st.error());
    auto opened = code_from(packed->dir, cat("this program (", (*objects)[0].path, ")"));
    if (!opened)
      return fail(CUDAQ_RT_E_FAILED, opened.error());
    (*opened)->temporary = std::move(code->temporary);
    code->temporary.clear();
    *out = opened->release();
    return CUDAQ_RT_OK;
  });
}

void cudaq_rt_code_destroy(cudaq_rt_code *code) {
  delete code;
}

const char *cudaq_rt_code_handler(const cudaq_rt_code *code, size_t index) {
  return code && index < code->names.size() ? code->names[index].c_str() : nullptr;
}

int cudaq_rt_code_check_trust(const cudaq_rt_code *code, const char *trust) {
  return guarded([&] {
    if (!code)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_code_check_trust: code must not be NULL");
    auto policy = resolve_trust({.sign_key = "", .trust = split_path_list(trust ? trust : "")},
                                [](const char *var) -> const char * { return std::getenv(var); });
    if (!policy)
      return fail(CUDAQ_RT_E_REFUSED, policy.error());
    LoadOptions o;
    o.package = code->package;
    o.blob_source = code->source;
    o.own_code = !code->temporary.empty();
    o.trust = std::move(*policy);
    if (auto st = check_package_trust(o); !st)
      return fail(CUDAQ_RT_E_REFUSED, st.error());
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_find_dispatch_kernel(const cudaq_rt_code *code, const char *name) {
  return guarded([&] {
    if (!code || !name)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  "cudaq_rt_find_dispatch_kernel: code and name must not be NULL");
    std::vector<std::string> kernels;
    for (const ExportEntry &e : code->manifest.exports)
      if (e.kind == export_kind_name(ExportKind::dispatch_kernel)) {
        if (e.name == name)
          return CUDAQ_RT_OK;
        kernels.push_back(e.name);
      }
    return fail(CUDAQ_RT_E_NOT_FOUND,
                make_error(code->label, "no dispatch kernel ", quote(name), ": the code exports ",
                           list_of(kernels),
                           " ('builtin' is the unified kernel, 'warp' the warp-wide one)"));
  });
}

int cudaq_rt_server_create(cudaq_rt_code *code, const cudaq_rt_config *config,
                           cudaq_rt_server **out) {
  return create_server(code, config, driver_gpu(), out);
}

int cudaq_rt_server_configure(cudaq_rt_server *s, const cudaq_rt_config *config) {
  return guarded([&] {
    if (!s || !config)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_server_configure: server and config must not "
                                       "be NULL");
    if (s->running())
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": cudaq_rt_server_configure: the "
                                                        "dispatch kernel is running"));
    auto owned = own(*config);
    if (!owned)
      return fail(CUDAQ_RT_E_ARGUMENT, owned.error().message);
    if (!owned->dispatcher.empty() && owned->dispatcher != "builtin")
      if (int rc = cudaq_rt_find_dispatch_kernel(s->code, owned->dispatcher.c_str()); rc)
        return rc;
    s->unload();
    s->config = std::move(*owned);
    return CUDAQ_RT_OK;
  });
}

void cudaq_rt_server_destroy(cudaq_rt_server *s) {
  try {
    delete s;
  } catch (...) {
  }
}

int cudaq_rt_load(cudaq_rt_server *s) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_load: server must not be NULL");
    return load(*s);
  });
}

int cudaq_rt_lookup_handler(cudaq_rt_server *s, const char *name, cudaq_rt_device_fn *fn) {
  return guarded([&] {
    if (!s || !name || !fn)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  "cudaq_rt_lookup_handler: server, name and fn must not be NULL");
    if (!s->server)
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": cudaq_rt_lookup_handler ", quote(name),
                                        ": nothing is loaded (cudaq_rt_load first)"));
    std::string handler = name;
    for (const AliasEntry &a : s->server->report().aliases)
      if (a.name == name)
        handler = a.handler;
    auto address = s->server->handler_address(handler);
    if (!address)
      return fail(CUDAQ_RT_E_NOT_FOUND, make_error(s->code->label, "no handler ", quote(name),
                                                   ": the code exports ", list_of(s->code->names)));
    s->issued.insert(*address);
    {
      std::lock_guard<std::mutex> lock(issued_mutex);
      issued_by[*address] = {s, s->code->label};
    }
    *fn = *address;
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_set_function(cudaq_rt_server *s, uint32_t function_id, cudaq_rt_device_fn fn) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_set_function: server must not be NULL");
    if (!s->server)
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": cudaq_rt_set_function: nothing is "
                                                        "loaded (cudaq_rt_load first)"));
    if (s->running())
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": cudaq_rt_set_function: the dispatch "
                                                        "kernel is running"));
    for (const cudaq_rt_function_entry &e : s->table)
      if (e.function_id == function_id)
        return fail(CUDAQ_RT_E_ARGUMENT, cat(subject_of(*s), ": function_id ", hex(function_id),
                                             " is in the function table already"));
    s->table.push_back({function_id, 0, reinterpret_cast<cudaq_rt_handler_fn>(fn)});
    s->custom_table = true;
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_clear_functions(cudaq_rt_server *s) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_clear_functions: server must not be NULL");
    if (s->running())
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": cudaq_rt_clear_functions: the "
                                                        "dispatch kernel is running"));
    s->table.clear();
    s->custom_table = false;
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_set_global(cudaq_rt_server *s, const char *name, const void *data, size_t size) {
  return guarded([&] {
    if (!s || !name || (!data && size))
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_set_global: server, name and data must not be "
                                       "NULL");
    if (!is_c_identifier(name))
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": global ", quote(name), " is not a C identifier"));
    if (size > CUDAQ_RT_MAX_GLOBAL_SIZE)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": global ", quote(name), ": a value of ", size,
                      " bytes is over the limit of ", CUDAQ_RT_MAX_GLOBAL_SIZE,
                      " (CUDAQ_RT_MAX_GLOBAL_SIZE)"));
    const auto *bytes = static_cast<const uint8_t *>(data);
    GlobalValue v{name, std::vector<uint8_t>(bytes, bytes + size)};
    auto refused = [](const Error &e) {
      return fail(e.message.find("no __device__ global") != std::string::npos ? CUDAQ_RT_E_NOT_FOUND
                                                                              : CUDAQ_RT_E_ARGUMENT,
                  e);
    };
    if (s->running()) {
      if (auto t = s->server->update_globals({v}); !t)
        return s->running() ? refused(t.error()) : fail(CUDAQ_RT_E_FAILED, t.error());
    } else if (s->server) {
      if (auto st = s->server->set_global(v.name, v.bytes); !st)
        return refused(st.error());
    }
    auto same = std::find_if(s->globals.begin(), s->globals.end(),
                             [&](const GlobalValue &g) { return g.name == v.name; });
    if (same != s->globals.end())
      *same = std::move(v);
    else
      s->globals.push_back(std::move(v));
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_start(cudaq_rt_server *s) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_start: server must not be NULL");
    if (s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_start: the dispatch kernel is running"));
    if (!s->server)
      if (int rc = load(*s); rc)
        return rc;
    auto table = s->launch_table();
    if (!table)
      return fail(CUDAQ_RT_E_REFUSED, table.error());
    if (auto st = s->server->set_function_table(*table, s->custom_table); !st)
      return fail(CUDAQ_RT_E_REFUSED, st.error());
    if (auto st = s->server->relaunch(); !st)
      return fail(CUDAQ_RT_E_FAILED, st.error());
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_reload(cudaq_rt_server *s, cudaq_rt_code *code, cudaq_rt_reload_info *info) {
  return guarded([&] {
    if (!s || !code)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_reload: server and code must not be NULL");
    if (info)
      *info = {};
    if (!s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_reload swaps a running kernel's code (start it "
                                      "first, or create a server over the new code)"));
    cudaq_rt_code *old = s->code;
    s->code = code;
    LoadOptions next = s->load_options();
    s->code = old;
    auto staged = s->server->stage(next);
    if (!staged)
      return fail(CUDAQ_RT_E_REFUSED, staged.error());
    if (info)
      info->stage_ms = staged->stage_ms;
    if (s->server->serves(*staged))
      return CUDAQ_RT_OK;
    auto swapped = s->server->swap(std::move(*staged));
    if (!swapped)
      return fail(CUDAQ_RT_E_FAILED, swapped.error());
    if (info)
      *info = {1, info->stage_ms, swapped->hold_ms, swapped->swap_ms, swapped->launch_ms};
    // The new module's addresses: the application's table now holds them.
    s->code = code;
    s->forget_addresses();
    s->table = s->server->function_table();
    if (s->custom_table) {
      std::lock_guard<std::mutex> lock(issued_mutex);
      for (const cudaq_rt_function_entry &e : s->table) {
        const auto address = reinterpret_cast<uint64_t>(e.handler);
        s->issued.insert(address);
        issued_by[address] = {s, code->label};
      }
    }
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_stop(cudaq_rt_server *s) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_stop: server must not be NULL");
    if (!s->server)
      return CUDAQ_RT_OK;
    if (auto st = s->server->stop(); !st)
      return fail(CUDAQ_RT_E_FAILED, st.error());
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_check(cudaq_rt_server *s) {
  return guarded([&] {
    if (!s)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_check: server must not be NULL");
    if (!s->server)
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": nothing is loaded"));
    if (auto st = s->server->check(); !st)
      return fail(CUDAQ_RT_E_FAILED, st.error());
    if (!s->server->running())
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": the dispatch kernel is not running"));
    return CUDAQ_RT_OK;
  });
}

uint32_t cudaq_rt_slot_size(const cudaq_rt_server *s) {
  return s && s->server ? s->server->report().slot_size : 0;
}

int cudaq_rt_get_stats(const cudaq_rt_server *s, cudaq_rt_dispatch_stats *out) {
  return guarded([&] {
    if (!s || !out)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_get_stats: server and stats must not be NULL");
    if (!s->server)
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": nothing is loaded"));
    *out = s->server->stats();
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_send(cudaq_rt_server *s, const void *frame, size_t size, int *accepted) {
  return guarded([&] {
    if (!s || !frame || !accepted)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_send: server, frame and accepted must not be "
                                       "NULL");
    *accepted = 0;
    if (!s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_send: the dispatch kernel is not running"));
    auto sent = s->server->send(std::span(static_cast<const uint8_t *>(frame), size));
    if (!sent)
      return fail(CUDAQ_RT_E_FAILED, sent.error());
    *accepted = *sent ? 1 : 0;
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_receive(cudaq_rt_server *s, void *buffer, size_t capacity, size_t *size) {
  return guarded([&] {
    if (!s || !buffer || !size)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_receive: server, buffer and size must not be "
                                       "NULL");
    *size = 0;
    if (!s->server)
      return fail(CUDAQ_RT_E_STATE, cat(subject_of(*s), ": nothing is loaded"));
    auto got = s->server->receive(std::span(static_cast<uint8_t *>(buffer), capacity));
    if (!got)
      return fail(CUDAQ_RT_E_FAILED, got.error());
    *size = got->value_or(0);
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_call(cudaq_rt_server *s, uint32_t function_id, const void *arg, uint32_t arg_len,
                  void *result, uint32_t capacity, uint32_t *result_len, int32_t *status,
                  double timeout_s) {
  return guarded([&] {
    if (!s || (!arg && arg_len) || (!result && capacity) || !result_len || !status)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_call: server, arg, result, result_len and "
                                       "status must not be NULL");
    *result_len = 0;
    *status = 0;
    if (!(timeout_s > 0))
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_call: timeout_s must be more than 0");
    if (!s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_call: the dispatch kernel is not running"));
    const uint32_t room = s->server->report().slot_size - CUDAQ_RT_HEADER_SIZE;
    if (arg_len > room)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": cudaq_rt_call: ", arg_len,
                      " bytes of arguments, but the bridge's slots hold ", room));
    const uint32_t id = ++s->next_request_id;
    cudaq_rt_request_header h{CUDAQ_RT_REQUEST_MAGIC, function_id, arg_len, id, id};
    std::vector<uint8_t> frame(sizeof h + arg_len);
    std::memcpy(frame.data(), &h, sizeof h);
    if (arg_len)
      std::memcpy(frame.data() + sizeof h, arg, arg_len);
    auto reply = call(*s->server, frame, timeout_s);
    if (!reply)
      return fail(s->server->running() ? CUDAQ_RT_E_TIMEOUT : CUDAQ_RT_E_FAILED, reply.error());
    const Response &r = reply->response;
    if (r.request_id != id)
      return fail(CUDAQ_RT_E_FAILED, cat(subject_of(*s), ": the response is request ", r.request_id,
                                         "'s, not request ", id, "'s"));
    if (r.result.size() > capacity)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": the result is ", r.result.size(), " bytes, more than the ",
                      capacity, " the caller has room for"));
    if (!r.result.empty())
      std::memcpy(result, r.result.data(), r.result.size());
    *result_len = static_cast<uint32_t>(r.result.size());
    *status = r.status;
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_call_batch(cudaq_rt_server *s, uint32_t function_id, const void *args,
                        size_t arg_stride, const uint32_t *arg_lens, size_t count, void *results,
                        size_t result_stride, uint32_t *result_lens, int32_t *statuses,
                        uint32_t inflight, double timeout_s) {
  return guarded([&] {
    if (!s || (count &&
               ((!args && arg_stride) || (!results && result_stride) || !result_lens || !statuses)))
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_call_batch: server, args, results, result_lens "
                                       "and statuses must not be NULL");
    if (!(timeout_s > 0))
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_call_batch: timeout_s must be more than 0");
    if (!s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_call_batch: the dispatch kernel is not running"));
    if (count > UINT32_MAX / 2)
      return fail(CUDAQ_RT_E_ARGUMENT, cat(subject_of(*s), ": cudaq_rt_call_batch: ", count,
                                           " requests, more than one batch may number"));
    BatchCall b;
    b.function_id = function_id;
    b.args = static_cast<const uint8_t *>(args);
    b.arg_stride = arg_stride;
    if (arg_lens)
      b.arg_lens = std::span(arg_lens, count);
    b.count = count;
    b.results = static_cast<uint8_t *>(results);
    b.result_stride = result_stride;
    b.result_lens = result_lens;
    b.statuses = statuses;
    b.inflight = inflight;
    b.timeout_s = timeout_s;
    if (auto st = check_batch(*s->server, b); !st)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": cudaq_rt_call_batch: ", st.error().message));
    b.first_request_id = s->next_request_id + 1;
    s->next_request_id += static_cast<uint32_t>(count);
    bool timed_out = false;
    if (auto st = call_batch(*s->server, b, &timed_out); !st)
      return fail(timed_out ? CUDAQ_RT_E_TIMEOUT : CUDAQ_RT_E_FAILED, st.error());
    return CUDAQ_RT_OK;
  });
}

int cudaq_rt_bench(cudaq_rt_server *s, uint32_t function_id, const void *arg, uint32_t arg_len,
                   uint64_t requests, uint32_t inflight, uint64_t warmup, int expect_echo,
                   double timeout_s, cudaq_rt_bench_report *report) {
  return guarded([&] {
    if (!s || (!arg && arg_len) || !report)
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_bench: server, arg and report must not be NULL");
    if (report->struct_size != sizeof(cudaq_rt_bench_report))
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat("cudaq_rt_bench: report->struct_size is ", report->struct_size, ", not ",
                      sizeof(cudaq_rt_bench_report)));
    if (!(timeout_s > 0))
      return fail(CUDAQ_RT_E_ARGUMENT, "cudaq_rt_bench: timeout_s must be more than 0");
    if (!s->running())
      return fail(CUDAQ_RT_E_STATE,
                  cat(subject_of(*s), ": cudaq_rt_bench: the dispatch kernel is not running"));
    const uint32_t room = s->server->report().slot_size - CUDAQ_RT_HEADER_SIZE;
    if (arg_len > room)
      return fail(CUDAQ_RT_E_ARGUMENT,
                  cat(subject_of(*s), ": cudaq_rt_bench: ", arg_len,
                      " bytes of arguments, but the bridge's slots hold ", room));
    BenchOptions o;
    o.requests = requests;
    o.inflight = inflight;
    o.warmup = warmup;
    o.timeout_s = timeout_s;
    o.expect_echo = expect_echo != 0;
    auto r = bench(*s->server, function_id, subject_of(*s),
                   std::span(static_cast<const uint8_t *>(arg), arg_len), o);
    if (!r)
      return fail(s->server->running() ? CUDAQ_RT_E_TIMEOUT : CUDAQ_RT_E_FAILED, r.error());
    const LatencyStats &l = r->latency;
    *report = {sizeof *report, r->requests, r->wrong, r->seconds, r->requests_per_s, l.min_us,
               l.mean_us,      l.p50_us,    l.p90_us, l.p99_us,   l.p999_us,         l.max_us};
    return CUDAQ_RT_OK;
  });
}

} // extern "C"
