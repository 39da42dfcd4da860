// cudaq-rt-pack: extract __nv_relfatbin device code from binaries into a package.
// Options are documented in man/cudaq-rt-pack.1; keep the two in step.
#include "../common/driver.h"

#include "base/atomic_file.h"
#include "base/tool_output.h"
#include "oci/layout_source.h"
#include "oci/package_argument.h"
#include "oci/transfer.h"
#include "pack/pack.h"
#include "package/package.h"
#include "package/signatures.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

namespace fs = std::filesystem;
using namespace cudaq_rt;

namespace {
constexpr const char *tool = "cudaq-rt-pack";

// --verify's keys: none when it was not given.
Expected<std::optional<TrustedKeys>> verify_keys(const std::vector<std::string> &verify) {
  if (verify.empty())
    return std::optional<TrustedKeys>();
  auto keys = TrustedKeys::load({verify.begin(), verify.end()});
  if (!keys)
    return make_error("", "--verify: ", keys.error().str());
  return std::optional<TrustedKeys>(std::move(*keys));
}

int list(const std::string &path, bool json, const std::vector<std::string> &verify,
         ToolOutput &output) {
  Manifest m;
  std::vector<std::string> warnings;
  std::string what;
  std::error_code ec;
  auto keys = verify_keys(verify);
  if (!keys)
    return output.fail(keys.error());
  const std::optional<TrustedKeys> &trusted = *keys;
  std::string signed_by;
  // A layout another tool wrote, or a registry's package: copied, checked, and listed as it is.
  auto arg = package_argument(path);
  if (!arg)
    return output.fail(arg.error());
  if (arg->copied() || fs::is_directory(path, ec)) {
    auto pkg = Package::open(arg->package);
    if (!pkg)
      return output.fail(pkg.error());
    if (trusted) {
      auto key = verify_package(*pkg, *trusted);
      if (!key)
        return output.fail(key.error());
      signed_by = key->short_str();
    }
    for (const Digest &d : pkg->referenced_blobs())
      if (auto blob = pkg->read_blob(d); !blob)
        return output.fail(blob.error());
    auto layout = pkg->check_layout();
    if (!layout)
      return output.fail(layout.error());
    if (*layout == Package::Layout::none)
      output.note("no OCI image layout yet (a package written before them): its next write adds "
                  "one");
    if (*layout == Package::Layout::stale)
      output.warn(cat(escape(path), ": index.json names an earlier image manifest of this "
                                    "package (a signature filed by hand?): an OCI client copying "
                                    "the layout would miss the change; the next write "
                                    "(cudaq-rt-link PKG --sign KEY, or a link) brings it up to "
                                    "date"));
    m = pkg->manifest();
    warnings = code_warnings(m);
    what = "package " + m.name;
    if (arg->copied())
      what += cat(" (", arg->source, "@", arg->image_manifest->str(), ")");
  } else if (trusted) {
    return output.fail(make_error(path, "--verify checks a package's signatures: this is not a "
                                        "package directory"));
  } else {
    auto in = inspect({PackInput{path}}, "");
    if (!in)
      return output.fail(in.error());
    m = std::move(in->manifest);
    warnings = std::move(in->warnings);
    what = path;
  }
  for (const std::string &w : warnings)
    output.warn(w);
  output.out(json ? m.to_json_text() : format_listing(m, what));
  if (!signed_by.empty() && !json)
    output.out(cat("verified: signed by trusted key ", signed_by, "\n"));
  return 0;
}
// --pull: the package a registry holds, written as a pack would write it; with --verify it must
// verify after the pull, or it is removed again.
int pull(const std::string &text, const std::string &output_dir, bool force, bool json,
         const std::vector<std::string> &verify, ToolOutput &output) {
  // A registry's reference, or an OCI image layout on disk (oci:DIR[:TAG]).
  std::unique_ptr<ImageSource> source;
  if (is_layout_reference(text)) {
    auto ref = LayoutRef::parse(text);
    if (!ref) {
      output.fail(make_error("", "--pull: ", ref.error().message));
      return driver::exit_usage;
    }
    auto layout = LayoutSource::open(std::move(*ref));
    if (!layout)
      return output.fail(layout.error());
    source = std::move(*layout);
  } else {
    auto ref = RegistryRef::parse(text);
    if (!ref) {
      output.fail(make_error("", "--pull: ", ref.error().message,
                             " (or oci:DIR[:TAG], an OCI image layout)"));
      return driver::exit_usage;
    }
    auto registry =
        Registry::open(*ref, [](const char *var) -> const char * { return std::getenv(var); });
    if (!registry)
      return output.fail(registry.error());
    source = std::move(*registry);
  }
  auto trusted = verify_keys(verify);
  if (!trusted)
    return output.fail(trusted.error());
  auto pulled = pull_package(*source, output_dir, force, nullptr, *trusted ? &**trusted : nullptr);
  if (!pulled)
    return output.fail(pulled.error());
  // A reference by digest names the digest already.
  const std::string name = source->name();
  const std::string pulled_as =
      name.ends_with(pulled->manifest.str()) ? name : cat(name, "@", pulled->manifest.str());
  if (json)
    output.out_json({{"reference", name},
                     {"digest", pulled->manifest.str()},
                     {"package", pulled->dir.string()},
                     {"blobs", pulled->blobs},
                     {"bytes", pulled->bytes}});
  else
    output.out(cat("pulled  ", pulled_as, ": ", pulled->blobs, " blobs (", pulled->bytes,
                   " bytes) into ", escape(pulled->dir.string()), "\n"));
  if (pulled->verified_by && !json)
    output.out(cat("verified: signed by trusted key ", pulled->verified_by->short_str(), "\n"));
  return 0;
}

// -v: one line per source, what it contributed.
std::vector<std::string> describe_inputs(const Manifest &m) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < m.sources.size(); ++i) {
    size_t containers = 0, exports = 0;
    uint64_t bytes = 0;
    for (const ContainerRecord &c : m.containers)
      for (const Origin &o : c.origins)
        if (o.source == i) {
          ++containers;
          bytes += c.size;
        }
    for (const ExportEntry &e : m.exports)
      exports += std::count(e.sources.begin(), e.sources.end(), i);
    const Source &s = m.sources[i];
    lines.push_back(cat(escape(s.path), ": ", escape(s.kind), ", ", s.size, " bytes: ", containers,
                        " container(s) (", bytes, " bytes), ", exports, " export(s)"));
  }
  return lines;
}

// The tool; main() adds the check that its output was written.
int tool_main(int argc, char **argv) {
  remove_temporaries_on_signals();
  CLI::App app{"Extract relocatable device code (__nv_relfatbin) from executables, shared "
               "libraries, objects, static archives and fatbins into a package NAME.cudaqpkg/.",
               tool};
  driver::add_version_flag(app, tool);
  app.footer("Environment: CUDAQ_RT_SIGN_KEY.\nSee cudaq-rt-pack(1) and, for the package format, "
             "cudaq-rt-package(5).");

  PackOptions opts;
  std::vector<std::string> app_inputs;
  std::vector<std::vector<std::string>> bridges;
  std::vector<std::string> dispatchers;
  bool json = false;
  std::string output_dir = ".";

  app.add_option("inputs", app_inputs, "Binaries whose device code is application code (handlers)")
      ->group("Inputs");
  app.add_option("--bridge", bridges, "A bridge's device hooks: its NAME and the FILE holding them")
      ->type_size(2)
      ->allow_extra_args(false)
      ->group("Inputs");
  app.add_option("--dispatcher", dispatchers, "A binary holding a custom dispatch kernel")
      ->group("Inputs");
  app.add_option("--alias", opts.aliases,
                 "Also answer FNV-1a(NAME) with the handler export HANDLER: NAME=HANDLER")
      ->group("Exports");
  app.add_option("-o,--output", output_dir, "Directory to write NAME.cudaqpkg into (default .)")
      ->group("Output");
  app.add_option("-n,--name", opts.name,
                 "Package name (default: the first input's file name up to its first '.')")
      ->group("Output");
  app.add_flag("-f,--force", opts.force, "Replace an existing package")->group("Output");
  app.add_flag("--absolute-paths", opts.absolute_paths,
               "Record each input's absolute path in the manifest (default: its file name, so "
               "that the same inputs pack to the same bytes anywhere)")
      ->group("Output");
  app.add_flag_function(
         "--no-compress", [&](int64_t) { opts.compress = false; },
         "Store every blob as it is (default: zstd-compressed where that saves space), in a "
         "manifest an older cudaq-rt reads")
      ->group("Output");
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose,
               "Say what each input contributed, and where the package went")
      ->group("Output");
  bool listing = false;
  app.add_flag("--list", listing,
               "List the one input's device code, exports and links instead of packing: a "
               "package, a binary, an OCI image layout (DIR, oci:DIR:TAG) or oci://REF")
      ->group("Inspection");
  app.add_flag("--json", json, "With --list: print the manifest as JSON on stdout")
      ->group("Inspection");
  std::vector<std::string> verify;
  app.add_option("--verify", verify,
                 "With --list: refuse the package unless one of these public keys (files or "
                 "directories of *.pem, *.pub) signed it")
      ->group("Inspection");
  TrustRequest trust;
  driver::add_sign_option(app, trust, "the package");
  std::string push_ref, pull_ref;
  app.add_option("--push", push_ref,
                 "Push the package to an OCI registry once it is written: "
                 "oci://HOST[:PORT]/REPO[:TAG][#options]")
      ->group("Registry");
  auto *pull_opt = app.add_option("--pull", pull_ref,
                                  "Pull a package into the -o directory instead of packing: from "
                                  "an OCI registry (oci://HOST[:PORT]/REPO[:TAG][#options]) or an "
                                  "OCI image layout on disk (oci:DIR[:TAG])")
                       ->group("Registry");

  if (int rc = driver::parse(tool, app, argc, argv); rc >= 0)
    return rc;
  StdioToolOutput output(tool);

  if (listing) {
    if (app_inputs.size() != 1 || !bridges.empty() || !dispatchers.empty() || !opts.aliases.empty())
      return driver::usage(tool, "--list takes one package or binary and no other inputs or "
                                 "aliases");
    const std::string list_path = app_inputs.front();
    if (!trust.sign_key.empty()) {
      std::fprintf(stderr, "%s: error: --sign packs: it does not go with --list\n", tool);
      return driver::exit_usage;
    }
    int rc = list(list_path, json, verify, output);
    return json ? driver::json_failure(output, rc, "input", list_path) : rc;
  }
  if (*pull_opt) {
    if (!app_inputs.empty() || !bridges.empty() || !dispatchers.empty() || !opts.aliases.empty() ||
        !push_ref.empty() || !trust.sign_key.empty()) {
      std::fprintf(stderr, "%s: error: --pull takes a reference and -o, -f: no inputs\n", tool);
      return driver::exit_usage;
    }
    int rc = pull(pull_ref, output_dir, opts.force, json, verify, output);
    return json ? driver::json_failure(output, rc, "input", pull_ref) : rc;
  }
  if (json || !verify.empty()) {
    std::fprintf(stderr, "%s: error: %s goes with --list\n", tool, json ? "--json" : "--verify");
    return driver::exit_usage;
  }
  for (const std::string &p : app_inputs)
    opts.inputs.push_back({p, Role::application, ""});
  for (const auto &b : bridges)
    opts.inputs.push_back({b[1], Role::bridge, b[0]});
  for (const std::string &p : dispatchers)
    opts.inputs.push_back({p, Role::dispatcher, ""});
  if (opts.inputs.empty()) {
    std::fprintf(stderr, "%s: error: no input files\nRun '%s --help' for usage.\n", tool, tool);
    return driver::exit_usage;
  }
  std::optional<RegistryRef> push;
  if (!push_ref.empty()) {
    auto ref = RegistryRef::parse(push_ref);
    if (!ref)
      return driver::usage(tool, "--push: " + ref.error().message);
    push = std::move(*ref);
  }
  opts.output_dir = output_dir;
  auto signer = resolve_signer(trust.sign_key,
                               [](const char *var) -> const char * { return std::getenv(var); });
  if (!signer)
    return output.fail(signer.error());
  opts.signer = std::move(*signer);

  auto result = pack(opts);
  if (!result)
    return output.fail(result.error());
  for (const std::string &w : result->inspection.warnings)
    output.warn(w);
  if (verbose)
    for (const std::string &line : describe_inputs(result->inspection.manifest))
      output.note(line);
  if (push) {
    auto pushed = push_package_to(result->dir, *push);
    if (!pushed)
      return output.fail(pushed.error());
    output.err(format_push(*push, *pushed));
  }
  if (verbose || driver::stderr_is_terminal()) {
    const Manifest &m = result->inspection.manifest;
    output.err(cat(tool, ": wrote ", escape(result->dir.string()), ": ", m.containers.size(),
                   " container(s), ", m.exports.size(), " export(s)",
                   opts.signer ? ", signed by key " + opts.signer->id().short_str() : "", "\n"));
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  return driver::flushed(tool, tool_main(argc, argv));
}
