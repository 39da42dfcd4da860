// The interposer's links (api_link.h).
//
// A hit must be invisible but for the time it saves, and a miss must be the real library's link,
// as a compiler cache's must (ccache, sccache):
//  - every call goes to the real library on the real handle, so its result codes, its checks of
//    options and inputs and its logs are the program's; only a hit's nvJitLinkComplete does not,
//    and the calls that read what Complete made (the output, the info log) are then answered from
//    the entry;
//  - a link is keyed only when all of its inputs are known: bytes given to AddData, and files
//    AddFile was given that this library could read too; a link whose options name no single
//    -arch=sm_NN, or whose input could not be read, goes to the real library uncached;
//  - a failed link is never stored: its result and logs reach the program as the real library
//    gave them, every time;
//  - an entry is used only after the cache has checked it against its key and its digest (and a
//    remote one is a cubin, where the link made one); anything else is a miss;
//  - a cache that cannot be opened or written costs one warning on stderr per process, never a
//    failed link;
//  - every call on a handle the interposer keeps a record of holds that handle's lock across the
//    real call and the record's update, so that the inputs a key names are exactly those the real
//    library received, in the order it received them. Without it, two threads adding to one
//    handle could record A, B while the real library got B, A, or only one of them: nvJitLink
//    13.0 itself drops one input in about 2% of links whose inputs two threads add at once, and
//    that incomplete cubin was stored under the key of all of them.
//
// A hit answers the cubin (or PTX) from the entry. What only the real link makes, the linked
// LTO-IR that nvJitLink 13 returns after a -lto link, is made on request: the real handle holds
// every input, so its Complete runs then, and the program gets the real answer. So does an input
// added after Complete: the real library refuses it (INTERNAL) on a handle that completed, but
// takes it on one that never did (measured, nvJitLink 12.9, 13.0 and 13.5, a link without -lto).
//
// Measured, CUDA 13.0: on a handle that has not completed, GetLinkedPtxSize answers
// INVALID_INPUT, as it does after a link that made a cubin, and GetLinkedCubinSize answers
// INTERNAL, as it does after a -ptx link; so on a hit the output the link did not make is asked
// of the real handle, which gives the real answer. A second Complete answers INTERNAL.
#include "interpose/api_link.h"

#include "base/clock.h"
#include "interpose/link_recording.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

thread_local bool bypass = false;

constexpr const char *tool = "cudaq-rt-nvjitlink";

void warn_once(const std::string &line) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    std::fprintf(stderr, "%s: warning: %s (this process warns once)\n", tool, line.c_str());
}

bool env_on(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}

std::string program_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() ? "program" : name;
}

std::optional<std::string> read_whole_file(const char *path) {
  FILE *f = std::fopen(path, "rb");
  if (!f)
    return std::nullopt;
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;)
    out.append(buf, n);
  bool ok = !std::ferror(f);
  std::fclose(f);
  return ok ? std::optional<std::string>(std::move(out)) : std::nullopt;
}

// What the real library logged, without its terminating NUL.
std::string real_log(const RealNvJitLink &real, nvJitLinkHandle h) {
  size_t n = 0;
  if (real.api.info_log_size(h, &n) != NVJITLINK_SUCCESS || n == 0)
    return {};
  std::string s(n, '\0');
  if (real.api.info_log(h, s.data()) != NVJITLINK_SUCCESS)
    return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

} // namespace

struct ApiLinks::Handle {
  std::mutex mutex;
  std::vector<std::string> options;
  bool ptx = false; // a -ptx link: its output is PTX
  std::vector<ApiLinkInput> inputs;
  std::vector<RecipeInput> recipe; // names and sizes, for a recording
  std::vector<std::string> bytes;  // the inputs' bytes, kept only when recording
  std::string uncacheable;         // why this link is not keyed, or empty
  // open: inputs come; linked: the real library completed (or refused) it; cached: answered from
  // the cache, the real handle not completed.
  enum class State { open, linked, cached } state = State::open;
  std::vector<uint8_t> output;                   // a hit's, where the entry gave it whole
  std::shared_ptr<const DeferredCubin> deferred; // a hit's, read into the caller's buffer
  std::string log;                               // a hit's info log

  uint64_t output_size() const { return deferred ? deferred->size() : output.size(); }

  // Records an input the real library accepted; its bytes too with `keep` (recording).
  void add(nvJitLinkInputType type, std::string name, std::string_view data, bool keep);
};

InterposerSettings InterposerSettings::of_process() {
  InterposerSettings s;
  if (const char *dir = std::getenv("CUDAQ_RT_NVJITLINK_RECORD"); dir && *dir)
    s.record_dir = dir;
  s.verbose = env_on("CUDAQ_RT_NVJITLINK_VERBOSE");
  return s;
}

std::string cache_hit_log_line(const LinkKey &key, bool remote) {
  return cat(tool, ": this output came from the ", remote ? "remote " : "", "link cache (key ",
             key.digest.short_str(), "); nvJitLink did not link\n");
}

ApiLinks::ApiLinks(const RealNvJitLink &real, const NvJitLinkMajor &major,
                   std::shared_ptr<const LinkCache> cache, InterposerSettings settings)
    : real_(real), major_(major), cache_(std::move(cache)), settings_(std::move(settings)) {}

ApiLinks *ApiLinks::process(const NvJitLinkMajor &major) {
  // Never destroyed: a program may link from its own static destructors.
  static ApiLinks *links = [&major]() -> ApiLinks * {
    auto real = real_nvjitlink(major);
    if (!real) {
      std::fprintf(stderr, "%s: error: %s\n", tool, real.error().str().c_str());
      return nullptr;
    }
    std::vector<std::string> warnings;
    // CUDAQ_RT_SIGN_KEY and CUDAQ_RT_TRUST, as a tool without --sign and --trust reads them.
    auto trust =
        resolve_trust({}, [](const char *var) -> const char * { return std::getenv(var); });
    auto opened = trust ? open_link_cache(CacheRequest{}, std::move(*trust), warnings)
                        : Expected<LinkCache>(trust.error());
    for (const std::string &w : warnings)
      warn_once(w);
    std::shared_ptr<const LinkCache> cache;
    if (opened)
      cache = std::make_shared<const LinkCache>(std::move(*opened));
    else
      warn_once("not using a link cache: " + opened.error().str());
    return new ApiLinks(**real, major, std::move(cache), InterposerSettings::of_process());
  }();
  return links;
}

void ApiLinks::set_bypass(bool on) {
  bypass = on;
}

std::shared_ptr<ApiLinks::Handle> ApiLinks::find(nvJitLinkHandle h) const {
  std::lock_guard lock(mutex_);
  auto it = handles_.find(h);
  return it == handles_.end() ? nullptr : it->second;
}

ApiLinks::Locked ApiLinks::locked(nvJitLinkHandle h) const {
  Locked out;
  if ((out.state = find(h)))
    out.lock = std::unique_lock(out.state->mutex);
  return out;
}

bool ApiLinks::cached(const Locked &s) {
  return s.state && s.state->state == Handle::State::cached;
}

const Expected<NvJitLinkIdentity> &ApiLinks::identity() const {
  std::call_once(identity_once_, [this] { identity_ = nvjitlink_identity(real_.api.version); });
  return *identity_;
}

void ApiLinks::say(const std::string &line) const {
  if (settings_.verbose)
    std::fprintf(stderr, "%s: %s\n", tool, line.c_str());
}

void ApiLinks::report(const LinkCache::RemoteLog &log) const {
  for (const std::string &w : log.warnings)
    std::fprintf(stderr, "%s: warning: %s\n", tool, w.c_str());
  for (const std::string &note : log.notes)
    say(note);
}

nvJitLinkResult ApiLinks::create(CreateFn real, nvJitLinkHandle *handle, uint32_t count,
                                 const char *const *options) {
  nvJitLinkResult r = real(handle, count, options);
  if (r != NVJITLINK_SUCCESS || !handle || !*handle || bypass)
    return r;
  auto state = std::make_shared<Handle>();
  for (uint32_t i = 0; i < count; ++i) {
    if (!options[i]) {
      state->uncacheable = "a NULL option";
      continue;
    }
    state->options.emplace_back(options[i]);
    if (state->options.back() == "-ptx")
      state->ptx = true;
  }
  std::lock_guard lock(mutex_);
  handles_[*handle] = std::move(state);
  return r;
}

nvJitLinkResult ApiLinks::destroy(DestroyFn real, nvJitLinkHandle *handle) {
  std::shared_ptr<Handle> state = handle ? find(*handle) : nullptr;
  if (!state)
    return real(handle);
  std::lock_guard hold(state->mutex);
  {
    std::lock_guard lock(mutex_);
    handles_.erase(*handle);
  }
  return real(handle);
}

void ApiLinks::Handle::add(nvJitLinkInputType type, std::string name, std::string_view data,
                           bool keep) {
  Digest d = sha256(as_bytes(data));
  inputs.push_back({static_cast<uint32_t>(type), d});
  recipe.push_back({static_cast<uint32_t>(type), std::move(name), d, data.size()});
  if (keep)
    bytes.emplace_back(data);
}

nvJitLinkResult ApiLinks::add_data(AddDataFn real, nvJitLinkHandle h, nvJitLinkInputType type,
                                   const void *data, size_t size, const char *name) {
  Locked s = locked(h);
  if (cached(s))
    complete_for_real(h, *s.state);
  nvJitLinkResult r = real(h, type, data, size, name);
  if (s.state && r == NVJITLINK_SUCCESS && s.state->state == Handle::State::open)
    s.state->add(type, name ? name : "", std::string_view(static_cast<const char *>(data), size),
                 !settings_.record_dir.empty());
  return r;
}

nvJitLinkResult ApiLinks::add_file(AddFileFn real, nvJitLinkHandle h, nvJitLinkInputType type,
                                   const char *path) {
  Locked s = locked(h);
  if (cached(s))
    complete_for_real(h, *s.state);
  nvJitLinkResult r = real(h, type, path);
  if (!s.state || r != NVJITLINK_SUCCESS || s.state->state != Handle::State::open)
    return r;
  // The key needs the bytes the real library read: read them again.
  if (std::optional<std::string> bytes = read_whole_file(path))
    s.state->add(type, path, *bytes, !settings_.record_dir.empty());
  else
    s.state->uncacheable = cat("cannot read ", quote(path), " again to key it");
  return r;
}

nvJitLinkResult ApiLinks::complete(CompleteFn real, nvJitLinkHandle h) {
  Locked s = locked(h);
  if (!s.state)
    return real(h);
  switch (s.state->state) {
  case Handle::State::cached:
    return NVJITLINK_ERROR_INTERNAL; // the real library's answer to a second Complete
  case Handle::State::linked:
    return real(h);
  case Handle::State::open:
    break;
  }
  return complete_cached(real, h, *s.state);
}

nvJitLinkResult ApiLinks::complete_cached(CompleteFn real, nvJitLinkHandle h, Handle &s) {
  std::optional<LinkKey> key;
  if (s.uncacheable.empty()) {
    if (const auto &id = identity(); !id)
      s.uncacheable = id.error().str();
    else if (key = api_link_key(s.options, *id, s.inputs); !key)
      s.uncacheable = "its options name no single -arch=sm_NN";
  }
  if (!key) {
    s.state = Handle::State::linked;
    say("not cached: " + s.uncacheable);
    return real(h);
  }
  auto start = Clock::now();
  std::optional<CacheEntry> hit;
  if (cache_) {
    hit = cache_->get(*key, /*defer_cubin=*/true);
    if (!hit && cache_->remote()) {
      LinkCache::RemoteLog log;
      const bool ptx = s.ptx;
      hit = cache_->get_remote(
          *key,
          [ptx](std::span<const uint8_t> out) -> std::optional<Error> {
            static constexpr uint8_t elf[4] = {0x7f, 'E', 'L', 'F'};
            if (!ptx && (out.size() < 4 || !std::equal(elf, elf + 4, out.begin())))
              return make_error("", "not an ELF file");
            return std::nullopt;
          },
          log);
      report(log);
    }
  }
  if (hit && hit->metadata.form.api && (!hit->cubin.empty() || hit->deferred)) {
    s.state = Handle::State::cached;
    s.output = std::move(hit->cubin);
    s.deferred = std::move(hit->deferred);
    s.log = hit->metadata.info_log + cache_hit_log_line(*key, hit->remote);
    say(cat("hit ", key->digest.short_str(), hit->remote ? " (remote)" : "", ": ", s.output_size(),
            " bytes in ", ms_since(start), " ms (linked in ", hit->metadata.link_time_ms, " ms)"));
    record(s, *key);
    return NVJITLINK_SUCCESS;
  }
  nvJitLinkResult r = real(h);
  double link_ms = ms_since(start);
  s.state = Handle::State::linked;
  if (r != NVJITLINK_SUCCESS) {
    say(cat("miss ", key->digest.short_str(), ": the link failed (", r, "): nothing stored"));
    return r;
  }
  std::vector<uint8_t> out;
  size_t n = 0;
  const NvJitLinkFunctions &api = real_.api;
  if ((s.ptx ? api.ptx_size : api.cubin_size)(h, &n) == NVJITLINK_SUCCESS && n) {
    out.resize(n);
    if ((s.ptx ? api.ptx(h, reinterpret_cast<char *>(out.data())) : api.cubin(h, out.data())) !=
        NVJITLINK_SUCCESS)
      out.clear();
  }
  if (cache_ && !out.empty()) {
    LinkMetadata md = LinkMetadata::from_key(*key);
    md.info_log = real_log(real_, h);
    md.link_time_ms = link_ms;
    if (auto st = cache_->put(*key, out, md); !st)
      warn_once("not cached: " + st.error().str());
    LinkCache::RemoteLog log;
    cache_->put_remote(*key, out, md, log);
    report(log);
  }
  say(cat("miss ", key->digest.short_str(), ": linked ", out.size(), " bytes in ", link_ms, " ms",
          cache_ && cache_->config().enabled ? ", stored" : ""));
  record(s, *key);
  return r;
}

void ApiLinks::complete_for_real(nvJitLinkHandle h, Handle &s) {
  s.state = Handle::State::linked;
  s.output.clear();
  s.output.shrink_to_fit();
  s.deferred.reset();
  nvJitLinkResult r = real_.api.complete(h);
  say(cat("a hit's handle asked to go on: the real link made (", r, ")"));
}

void ApiLinks::record(const Handle &s, const LinkKey &key) const {
  if (settings_.record_dir.empty())
    return;
  LinkRecipe recipe;
  recipe.options = s.options;
  recipe.inputs = s.recipe;
  recipe.output = s.ptx ? "ptx" : "cubin";
  recipe.arch = key.arch.str();
  recipe.program = program_name();
  recipe.nvjitlink_version = key.nvjitlink.version();
  recipe.cache_key = key.digest;
  const SigningKey *signer = cache_ ? cache_->trust().signer.get() : nullptr;
  if (auto st = write_recording(settings_.record_dir, recipe, s.bytes, signer); !st)
    warn_once("not recorded: " + st.error().str());
  else
    say("recorded under " + settings_.record_dir.string());
}

namespace {

// Whether a hit's entry answers `which`: its cubin, or its PTX for a -ptx link.
bool answers(bool ptx, LinkOutput which) {
  return which == (ptx ? LinkOutput::ptx : LinkOutput::cubin);
}

} // namespace

nvJitLinkResult ApiLinks::output_size(SizeFn real, LinkOutput which, nvJitLinkHandle h,
                                      size_t *size) {
  Locked s = locked(h);
  if (cached(s) && answers(s.state->ptx, which)) {
    if (!size)
      return major_.null_input;
    *size = s.state->output_size();
    return NVJITLINK_SUCCESS;
  }
  if (cached(s) && which == LinkOutput::ltoir)
    complete_for_real(h, *s.state);
  return real(h, size);
}

nvJitLinkResult ApiLinks::output(OutputFn real, LinkOutput which, nvJitLinkHandle h, void *out) {
  Locked s = locked(h);
  if (cached(s) && answers(s.state->ptx, which)) {
    if (!out)
      return major_.null_input;
    Handle &state = *s.state;
    if (!state.deferred) {
      std::memcpy(out, state.output.data(), state.output.size());
      return NVJITLINK_SUCCESS;
    }
    if (state.deferred->read_into(static_cast<uint8_t *>(out)))
      return NVJITLINK_SUCCESS;
    // The entry changed under the hit (someone wrote into the file): the real link, which is
    // byte-identical to a good entry's cubin, the size the program was told.
    const uint64_t told = state.deferred->size();
    warn_once(cat("the link cache entry of this hit no longer matched its digest: removed, and "
                  "linked for real"));
    complete_for_real(h, state);
    size_t n = 0;
    if ((state.ptx ? real_.api.ptx_size : real_.api.cubin_size)(h, &n) != NVJITLINK_SUCCESS ||
        n != told)
      return NVJITLINK_ERROR_INTERNAL;
    return real(h, out);
  }
  if (cached(s) && which == LinkOutput::ltoir)
    complete_for_real(h, *s.state);
  return real(h, out);
}

nvJitLinkResult ApiLinks::info_log_size(SizeFn real, nvJitLinkHandle h, size_t *size) {
  Locked s = locked(h);
  if (!cached(s))
    return real(h, size);
  if (!size)
    return major_.null_input;
  *size = s.state->log.size() + 1;
  return NVJITLINK_SUCCESS;
}

nvJitLinkResult ApiLinks::info_log(LogFn real, nvJitLinkHandle h, char *out) {
  Locked s = locked(h);
  if (!cached(s))
    return real(h, out);
  if (!out)
    return major_.null_input;
  std::memcpy(out, s.state->log.c_str(), s.state->log.size() + 1);
  return NVJITLINK_SUCCESS;
}

nvJitLinkResult ApiLinks::error_log_size(SizeFn real, nvJitLinkHandle h, size_t *size) {
  Locked s = locked(h);
  return real(h, size);
}

nvJitLinkResult ApiLinks::error_log(LogFn real, nvJitLinkHandle h, char *out) {
  Locked s = locked(h);
  return real(h, out);
}

} // namespace cudaq_rt
