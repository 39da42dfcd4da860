// cudaq-rt-pack's command (pack_command.h).
#include "command/pack_command.h"

#include "oci/layout_source.h"
#include "oci/package_argument.h"
#include "oci/transfer.h"
#include "package/package.h"
#include "package/signatures.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

namespace fs = std::filesystem;

namespace cudaq_rt {

namespace {

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
    if (!ref)
      return output.fail(make_error("", "--pull: ", ref.error().message));
    auto layout = LayoutSource::open(std::move(*ref));
    if (!layout)
      return output.fail(layout.error());
    source = std::move(*layout);
  } else {
    auto ref = RegistryRef::parse(text);
    if (!ref)
      return output.fail(make_error("", "--pull: ", ref.error().message,
                                    " (or oci:DIR[:TAG], an OCI image layout)"));
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

// Packing: the inputs into a package, signed and pushed when asked.
int pack_inputs(const PackArgs &args, ToolOutput &output) {
  PackOptions opts = args.pack;
  for (const std::string &p : args.inputs)
    opts.inputs.push_back({p, Role::application, ""});
  for (const auto &b : args.bridges)
    opts.inputs.push_back({b[1], Role::bridge, b[0]});
  for (const std::string &p : args.dispatchers)
    opts.inputs.push_back({p, Role::dispatcher, ""});
  opts.output_dir = args.output_dir;
  auto signer = resolve_signer(args.sign_key,
                               [](const char *var) -> const char * { return std::getenv(var); });
  if (!signer)
    return output.fail(signer.error());
  opts.signer = std::move(*signer);
  std::optional<RegistryRef> push;
  if (args.push)
    push = *RegistryRef::parse(*args.push); // checked by make_pack_command

  auto result = pack(opts);
  if (!result)
    return output.fail(result.error());
  for (const std::string &w : result->inspection.warnings)
    output.warn(w);
  if (args.verbose)
    for (const std::string &line : describe_inputs(result->inspection.manifest))
      output.note(line);
  if (push) {
    auto pushed = push_package_to(result->dir, *push);
    if (!pushed)
      return output.fail(pushed.error());
    output.err(format_push(*push, *pushed));
  }
  if (args.show_written) {
    const Manifest &m = result->inspection.manifest;
    output.err(cat(output.tool(), ": wrote ", escape(result->dir.string()), ": ",
                   m.containers.size(), " container(s), ", m.exports.size(), " export(s)",
                   opts.signer ? ", signed by key " + opts.signer->id().short_str() : "", "\n"));
  }
  return 0;
}

} // namespace

Expected<PackCommand> make_pack_command(PackArgs args) {
  PackCommand c;
  const bool inputs = !args.inputs.empty() || !args.bridges.empty() || !args.dispatchers.empty();
  if (args.list) {
    if (args.inputs.size() != 1 || !args.bridges.empty() || !args.dispatchers.empty() ||
        !args.pack.aliases.empty())
      return make_error("", "--list takes one package or binary and no other inputs or aliases");
    if (!args.sign_key.empty())
      return make_error("", "--sign packs: it does not go with --list");
    if (args.pull || args.push)
      return make_error("", "--list does not go with --pull or --push");
    c.action = PackAction::list;
  } else if (args.pull) {
    if (inputs || !args.pack.aliases.empty() || args.push || !args.sign_key.empty())
      return make_error("", "--pull takes a reference and -o, -f: no inputs");
    if (is_layout_reference(*args.pull)) {
      if (auto ref = LayoutRef::parse(*args.pull); !ref)
        return make_error("", "--pull: ", ref.error().message);
    } else if (auto ref = RegistryRef::parse(*args.pull); !ref) {
      return make_error("", "--pull: ", ref.error().message,
                        " (or oci:DIR[:TAG], an OCI image layout)");
    }
    c.action = PackAction::pull;
  } else {
    if (args.json || !args.verify.empty())
      return make_error("", args.json ? "--json" : "--verify", " goes with --list");
    if (!inputs)
      return make_error("", "no input files");
    if (args.push)
      if (auto ref = RegistryRef::parse(*args.push); !ref)
        return make_error("", "--push: ", ref.error().message);
  }
  c.args = std::move(args);
  return c;
}

int run_pack_command(const PackCommand &c, ToolOutput &output) {
  const PackArgs &a = c.args;
  switch (c.action) {
  case PackAction::list: {
    const int rc = list(a.inputs.front(), a.json, a.verify, output);
    return a.json ? json_failure(output, rc, "input", a.inputs.front()) : rc;
  }
  case PackAction::pull: {
    const int rc = pull(*a.pull, a.output_dir, a.pack.force, a.json, a.verify, output);
    return a.json ? json_failure(output, rc, "input", *a.pull) : rc;
  }
  case PackAction::pack:
    break;
  }
  return pack_inputs(a, output);
}

} // namespace cudaq_rt
