// cudaq-rt-link's command (link_command.h).
#include "command/link_command.h"

#include "base/clock.h"
#include "base/jobserver.h"
#include "base/nvjitlink_library.h"
#include "cache/link_cache.h"
#include "oci/package_argument.h"
#include "oci/transfer.h"
#include "package/signatures.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace cudaq_rt {
namespace {

json arch_json(const ArchLink &a) {
  json j = {{"arch", a.arch.str()},   {"cache_key", a.key.digest.str()},
            {"key", a.key.to_json()}, {"inputs", a.input_names},
            {"options", a.options},   {"cache_hit", a.cache_hit}};
  // Where the cubin came from: "link", "cache" (local) or "remote" (the remote cache).
  if (a.record)
    j["source"] = a.remote_hit ? "remote" : a.cache_hit ? "cache" : "link";
  // link_ms is the link's own time (on a hit, the run that linked it); time_ms is this run's.
  if (a.record)
    j["cubin"] = {{"digest", a.record->cubin.str()},
                  {"size", a.record->cubin_size},
                  {"link_ms", a.record->link_ms},
                  {"time_ms", a.time_ms}};
  if (a.error)
    j["error"] = a.error->str();
  if (!a.info_log.empty())
    j["info_log"] = a.info_log;
  if (!a.notes.empty())
    j["remote_cache"] = a.notes;
  j["lto"] = lto_mode_name(a.mode);
  if (!a.fallback.empty())
    j["fallback"] = a.fallback;
  // Per-TU mode, when the module was not in the cache: where each unit's cubin came from.
  if (!a.units.empty()) {
    j["final_link_ms"] = a.final_link_ms;
    j["units"] = json::array();
    for (const UnitLink &u : a.units) {
      json ju = {{"name", u.name},
                 {"source", u.shipped     ? "shipped"
                            : u.cache_hit ? "cache"
                            : u.compiled  ? "compiled"
                                          : "fatbin"}};
      if (u.cache_hit || u.compiled)
        ju.update({{"key", u.key.str()}, {"size", u.size}, {"time_ms", u.time_ms}});
      j["units"].push_back(ju);
    }
  }
  return j;
}

// The progress line, ninja style: one line on stderr rewritten in place ("[3/12] sm_90 app.o#1
// 4s"), cleared before anything else is printed. The seconds since the link began are redrawn
// every second, so that a long step (a whole-program link takes 6 to 11 s for one arch) does not
// look stuck. Steps are cut to fit a narrow terminal: a line that wraps could no longer be
// rewritten.
class ProgressLine {
public:
  explicit ProgressLine(ToolOutput &output) : output_(output) {}
  ~ProgressLine() { clear(); }
  void show(size_t done, size_t total, const std::string &step) {
    std::lock_guard<std::mutex> hold(mutex_);
    done_ = done;
    total_ = total;
    step_ = escape(step.empty() ? "linking" : step);
    if (step_.size() > 60)
      step_ = step_.substr(0, 57) + "...";
    draw();
    if (!ticker_.joinable())
      ticker_ = std::thread([this] { tick(); });
  }
  void clear() {
    {
      std::lock_guard<std::mutex> hold(mutex_);
      stopped_ = true;
    }
    wake_.notify_all();
    if (ticker_.joinable())
      ticker_.join();
    if (shown_)
      output_.err("\r\x1b[K");
    shown_ = false;
  }

private:
  void draw() {
    const auto seconds =
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_).count();
    output_.err(cat("\r\x1b[K[", done_, "/", total_, "] ", step_, "  ", seconds, "s"));
    output_.flush();
    shown_ = true;
  }
  void tick() {
    std::unique_lock<std::mutex> hold(mutex_);
    while (!wake_.wait_for(hold, std::chrono::seconds(1), [this] { return stopped_; }))
      draw();
  }

  ToolOutput &output_;
  const Clock::time_point started_ = Clock::now();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
  size_t done_ = 0, total_ = 0;
  std::string step_;
  bool shown_ = false;
  bool stopped_ = false;
};

// --cache-prune and --cache-stats. With --json the results go into `doc`, the one document the
// caller prints; otherwise they are printed here.
int cache_command(const LinkCache &cache, const LinkCommand &c, json &doc, ToolOutput &output) {
  if (c.prune) {
    auto r = cache.prune(*c.prune);
    if (!r)
      return output.fail(r.error());
    doc["pruned"] = {{"entries", r->entries}, {"bytes", r->bytes}};
    if (!c.json)
      output.out(cat("pruned ", r->entries, " entries, ", r->bytes, " bytes\n"));
  }
  if (c.cache_stats) {
    auto s = cache.stats();
    if (!s)
      return output.fail(s.error());
    doc["cache"] = s->to_json();
    if (!c.json)
      output.out(format_cache_stats(*s));
  }
  return 0;
}

// --cache-push: the package's cubins into the remote cache.
int push_command(const LinkCache &cache, const TrustPolicy &trust, const LinkCommand &c,
                 ToolOutput &output) {
  const std::string package = c.push.string();
  auto pushed = push_links(c.push, cache, trust.trusted.get());
  if (!pushed)
    return output.fail(pushed.error());
  json doc = {{"package", package}, {"pushed", json::array()}};
  int rc = 0;
  for (const PushedLink &p : *pushed) {
    json j = {{"arch", p.arch}, {"cache_key", p.key.str()}, {"bytes", p.bytes}};
    if (p.error) {
      j["error"] = p.error->str();
      rc = output.fail(*p.error);
    } else if (!c.json) {
      output.out(cat(p.arch, "  pushed  ", p.bytes, " bytes  ", p.key.str(), "\n"));
    }
    doc["pushed"].push_back(j);
  }
  if (pushed->empty() && !c.json)
    output.warn("'" + package + "': no link records: nothing to push");
  if (c.json)
    output.out_json(doc);
  return rc;
}

// What each arch said on stderr: warnings, the fallback note, and with -v the units, the remote
// cache's notes and nvJitLink's info log; an arch's error with its details as notes.
void print_diagnostics(const LinkCommand &c, const LinkReport &report, ToolOutput &output) {
  const bool verbose = c.link.settings.verbose;
  for (const ArchLink &a : report.archs) {
    for (const std::string &w : a.warnings)
      output.warn(a.arch.str() + ": " + w);
    if (!a.fallback.empty())
      output.note(a.arch.str() + ": " + a.fallback);
    if (verbose)
      for (const UnitLink &u : a.units) {
        char ms[32];
        std::snprintf(ms, sizeof ms, "%.1f ms", u.time_ms);
        std::string what = u.shipped     ? cat("shipped  ", u.size, " bytes  ", ms)
                           : u.cache_hit ? cat("cached  ", u.size, " bytes  ", ms)
                           : u.compiled  ? cat("compiled  ", u.size, " bytes  ", ms)
                                         : std::string("no LTO-IR: linked as it is");
        output.err(cat(output.tool(), ": ", a.arch, ": unit ", u.name, ": ", what, "\n"));
      }
    if (verbose)
      for (const std::string &n : a.notes)
        output.err(cat(output.tool(), ": ", a.arch, ": note: ", n, "\n"));
    if (a.error) {
      output.fail(*a.error);
      std::istringstream details(a.details);
      for (std::string line; std::getline(details, line);)
        output.note(line);
    }
    if (verbose && !a.info_log.empty() && !c.json)
      output.err(cat(output.tool(), ": ", a.arch, ": nvJitLink info log:\n", a.info_log));
  }
}

std::string format_report(const LinkCommand &c, const LinkReport &report) {
  std::string out;
  char line[512];
  for (const ArchLink &a : report.archs) {
    if (c.link.dry_run) {
      out += cat(a.arch, "  key ", a.key.digest.str(), "\n  options:");
      for (const std::string &s : a.options)
        out += " " + s;
      out += "\n";
      for (const std::string &n : a.input_names)
        out += cat("  input: ", n, "\n");
    } else if (a.record && a.cache_hit) {
      std::snprintf(line, sizeof line, "%s  %s  %llu bytes  %.1f ms (linked in %.1f ms)  %s\n",
                    a.arch.str().c_str(), a.remote_hit ? "remote" : "cached",
                    (unsigned long long)a.record->cubin_size, a.time_ms, a.record->link_ms,
                    a.record->cubin.str().c_str());
      out += line;
    } else if (a.record) {
      std::snprintf(line, sizeof line, "%s  linked  %llu bytes  %.1f ms  %s\n",
                    a.arch.str().c_str(), (unsigned long long)a.record->cubin_size,
                    a.record->link_ms, a.record->cubin.str().c_str());
      out += line;
    }
  }
  return out;
}

// --push: the package as the command left it, to the registry; its report into `doc`.
int push_to_registry(const LinkCommand &c, const fs::path &package, json &doc, ToolOutput &output) {
  if (!c.oci_push)
    return 0;
  auto pushed = push_package_to(package, *c.oci_push);
  if (!pushed)
    return output.fail(pushed.error());
  if (c.json)
    doc["push"] = push_json(*c.oci_push, *pushed);
  else
    output.out(format_push(*c.oci_push, *pushed));
  return 0;
}

// --sign with no --arch: the package signed as it is, after the --trust check.
int sign_command(const TrustPolicy &trust, const LinkCommand &c, ToolOutput &output) {
  const SigningKey *signer = trust.signer.get();
  if (auto st = sign_package(c.link.package, *signer, trust.trusted.get()); !st)
    return output.fail(st.error());
  json doc = {{"package", c.link.package.string()}, {"signed_by", signer->id().hex()}};
  if (!c.json)
    output.out(cat("signed  key ", signer->id().short_str(), "\n"));
  if (int rc = push_to_registry(c, c.link.package, doc, output); rc != 0)
    return rc;
  if (c.json)
    output.out_json(doc);
  return 0;
}

} // namespace

Expected<LinkCommand> make_link_command(LinkArgs args) {
  LinkCommand c;
  c.link = std::move(args.link);
  c.cache = std::move(args.cache);
  c.trust = std::move(args.trust);
  c.cache_stats = args.cache_stats;
  c.push = std::move(args.push);
  c.json = args.json;
  c.progress = args.progress;
  if (args.prune) {
    c.prune = parse_cache_size(*args.prune);
    if (!c.prune)
      return make_error("", "--cache-prune: ", quote(*args.prune), " is not a size");
  }
  if (!c.push.empty()) {
    if (!c.link.package.empty())
      return make_error("", "--cache-push takes the package: give no other");
    return c;
  }
  if (c.link.package.empty()) {
    if (c.cache_stats || c.prune)
      return c;
    return make_error("", "no package given");
  }
  if (args.oci_push) {
    auto ref = RegistryRef::parse(*args.oci_push);
    if (!ref)
      return make_error("", "--push: ", ref.error().message);
    if (c.link.dry_run)
      return make_error("", "--push does not go with --dry-run, which writes nothing");
    c.oci_push = std::move(*ref);
  }
  if (args.archs.empty() && is_copied_package_argument(c.link.package.string()) &&
      (!c.trust.sign_key.empty() || c.oci_push))
    return make_error("", "--sign or --push without --arch writes the package as it is: give a "
                          "package directory (cudaq-rt-pack --pull copies one)");
  if (args.archs.empty() && !c.trust.sign_key.empty()) {
    if (c.link.dry_run || c.cache_stats || c.prune)
      return make_error("", "--sign without --arch signs the package and does nothing else");
    c.sign_only = true;
    return c;
  }
  if (args.archs.empty() && c.oci_push) {
    if (c.cache_stats || c.prune)
      return make_error("", "--push without --arch pushes the package and does nothing else");
    c.push_only = true;
    return c;
  }
  auto archs = parse_arch_list(args.archs, args.native_archs);
  if (!archs)
    return make_error("", "--arch: ", archs.error().message);
  c.link.archs = std::move(*archs);
  if (auto st = check_link_options(c.link); !st)
    return make_error("", st.error().message);
  if (c.link.dry_run && !c.cache_stats && !c.prune)
    c.cache.disable = true;
  return c;
}

int run_link_command(const LinkCommand &c, ToolOutput &output) {
  // The one trust this command runs under: --sign over CUDAQ_RT_SIGN_KEY, --trust over
  // CUDAQ_RT_TRUST, passed to the cache, the link, the signing, the copy and the push.
  auto trust =
      resolve_trust(c.trust, [](const char *var) -> const char * { return std::getenv(var); });
  if (!trust)
    return output.fail(trust.error());
  std::vector<std::string> cache_warnings;
  auto cache = open_link_cache(c.cache, *trust, cache_warnings);
  if (!cache)
    return output.fail(cache.error());
  for (const std::string &w : cache_warnings)
    output.warn(w);
  if (c.link.settings.verbose && !c.link.package.empty())
    if (auto lib = process_nvjitlink(); lib)
      output.note("links with " + (*lib)->describe());
  if (c.link.settings.verbose)
    if (auto id = loaded_nvjitlink_identity(); id && id->build_id.empty())
      output.note(cat(quote(id->path), " has no build ID: cache keys name its path, size and "
                                       "modification time, so only this installation shares them"));
  if (!c.push.empty())
    return push_command(*cache, *trust, c, output);
  if (c.sign_only)
    return sign_command(*trust, c, output);
  json doc = json::object();
  if (c.push_only) {
    doc["package"] = c.link.package.string();
    if (int rc = push_to_registry(c, c.link.package, doc, output); rc != 0)
      return rc;
    if (c.json)
      output.out_json(doc);
    return 0;
  }
  if (c.link.package.empty()) {
    int rc = cache_command(*cache, c, doc, output);
    if (rc == 0 && c.json)
      output.out_json(doc);
    return rc;
  }

  // An OCI image layout another tool wrote, or a registry's package: copied and checked as a
  // pull checks it (under --trust, its signatures too), linked in the copy, and pushed from it
  // with --push. What it was copied from is never written.
  LinkOptions link = c.link;
  link.trust = *trust;
  std::optional<PackageArgument> copy;
  if (is_copied_package_argument(c.link.package.string())) {
    auto got = package_argument(c.link.package.string(), trust->trusted.get());
    if (!got)
      return output.fail(got.error());
    copy.emplace(std::move(*got));
    link.package = copy->package;
  }
  ProgressLine line(output);
  if (c.progress)
    link.progress = [&line](size_t done, size_t total, const std::string &step) {
      line.show(done, total, step);
    };
  auto report = link_package(link, *cache);
  line.clear();
  if (report && copy) {
    report->package = c.link.package;
    if (!c.oci_push && !c.link.dry_run)
      output.note(cat(escape(copy->source), "@", copy->image_manifest->short_str(),
                      ": linked from a copy, into the link cache; nothing was written to it "
                      "(--push oci://REF sends the linked package to a registry)"));
  }
  if (c.link.settings.verbose) {
    std::string why;
    if (Jobserver *js = process_jobserver(&why))
      output.note(cat("make's jobserver (MAKEFLAGS): at most ", js->peak(), " jobs at once"));
    else if (!why.empty())
      output.note(why);
  }
  if (!report)
    return output.fail(report.error());
  print_diagnostics(c, *report, output);
  // A copy's signatures matter only where it goes: to a registry with --push.
  if (!copy || c.oci_push)
    if (auto w = broken_signatures_warning(c.link.package.string(), report->unsigned_by))
      output.warn(*w);
  if (report->verified_by && c.link.settings.verbose)
    output.note(cat(escape(c.link.package.string()), ": signed by trusted key ",
                    report->verified_by->short_str()));
  if (c.json) {
    doc = {{"package", report->package.string()},
           {"bridge", report->bridge},
           {"dispatcher", report->dispatcher},
           {"lto", lto_mode_name(report->mode)},
           {"dry_run", c.link.dry_run},
           {"ok", report->ok()},
           {"nvjitlink", loaded_nvjitlink_json()},
           {"archs", json::array()}};
    if (report->verified_by)
      doc["verified_by"] = report->verified_by->hex();
    if (report->signed_by)
      doc["signed_by"] = report->signed_by->hex();
    if (!report->unsigned_by.empty()) {
      doc["signatures_broken"] = json::array();
      for (const KeyId &k : report->unsigned_by)
        doc["signatures_broken"].push_back(k.hex());
    }
    for (const ArchLink &a : report->archs)
      doc["archs"].push_back(arch_json(a));
    if (int rc = cache_command(*cache, c, doc, output); rc != 0)
      return rc;
    if (report->ok())
      if (int rc = push_to_registry(c, link.package, doc, output); rc != 0)
        return rc;
    output.out_json(doc);
  } else {
    output.out(format_report(c, *report));
    if (report->signed_by)
      output.out(cat("signed  key ", report->signed_by->short_str(), "\n"));
    if (int rc = cache_command(*cache, c, doc, output); rc != 0)
      return rc;
    if (report->ok())
      if (int rc = push_to_registry(c, link.package, doc, output); rc != 0)
        return rc;
  }
  return report->ok() ? 0 : 1;
}

} // namespace cudaq_rt
