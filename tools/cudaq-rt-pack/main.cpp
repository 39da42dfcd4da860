// cudaq-rt-pack: extract __nv_relfatbin device code from binaries into a package.
// The options go into PackArgs; the command (command/pack_command.h) checks them and does the
// rest. Options are documented in man/cudaq-rt-pack.1; keep the two in step.
#include "../common/driver.h"

#include "base/atomic_file.h"
#include "command/pack_command.h"

using namespace cudaq_rt;

namespace {
constexpr const char *tool = "cudaq-rt-pack";

void add_options(CLI::App &app, PackArgs &a) {
  app.add_option("inputs", a.inputs, "Binaries whose device code is application code (handlers)")
      ->group("Inputs");
  app.add_option("--bridge", a.bridges,
                 "A bridge's device hooks: its NAME and the FILE holding them")
      ->type_size(2)
      ->allow_extra_args(false)
      ->group("Inputs");
  app.add_option("--dispatcher", a.dispatchers, "A binary holding a custom dispatch kernel")
      ->group("Inputs");
  app.add_option("--alias", a.pack.aliases,
                 "Also answer FNV-1a(NAME) with the handler export HANDLER: NAME=HANDLER")
      ->group("Exports");
  app.add_option("-o,--output", a.output_dir, "Directory to write NAME.cudaqpkg into (default .)")
      ->group("Output");
  app.add_option("-n,--name", a.pack.name,
                 "Package name (default: the first input's file name up to its first '.')")
      ->group("Output");
  app.add_flag("-f,--force", a.pack.force, "Replace an existing package")->group("Output");
  app.add_flag("--absolute-paths", a.pack.absolute_paths,
               "Record each input's absolute path in the manifest (default: its file name, so "
               "that the same inputs pack to the same bytes anywhere)")
      ->group("Output");
  app.add_flag_function(
         "--no-compress", [&a](int64_t) { a.pack.compress = false; },
         "Store every blob as it is (default: zstd-compressed where that saves space), in a "
         "manifest an older cudaq-rt reads")
      ->group("Output");
  app.add_flag("-v,--verbose", a.verbose,
               "Say what each input contributed, and where the package went")
      ->group("Output");
  app.add_flag("--list", a.list,
               "List the one input's device code, exports and links instead of packing: a "
               "package, a binary, an OCI image layout (DIR, oci:DIR:TAG) or oci://REF")
      ->group("Inspection");
  app.add_flag("--json", a.json, "With --list: print the manifest as JSON on stdout")
      ->group("Inspection");
  app.add_option("--verify", a.verify,
                 "With --list: refuse the package unless one of these public keys (files or "
                 "directories of *.pem, *.pub) signed it")
      ->group("Inspection");
  driver::add_sign_option(app, a.sign_key, "the package");
  driver::add_optional(app, "--push", a.push,
                       "Push the package to an OCI registry once it is written: "
                       "oci://HOST[:PORT]/REPO[:TAG][#options]")
      ->group("Registry");
  driver::add_optional(app, "--pull", a.pull,
                       "Pull a package into the -o directory instead of packing: from an OCI "
                       "registry (oci://HOST[:PORT]/REPO[:TAG][#options]) or an OCI image layout "
                       "on disk (oci:DIR[:TAG])")
      ->group("Registry");
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
  PackArgs args;
  add_options(app, args);
  if (int rc = driver::parse(tool, app, argc, argv); rc >= 0)
    return rc;
  args.show_written = args.verbose || driver::stderr_is_terminal();
  const bool json = args.json;
  const std::string input =
      args.list && !args.inputs.empty() ? args.inputs.front() : args.pull.value_or("");
  StdioToolOutput output(tool);
  auto command = make_pack_command(std::move(args));
  if (!command) {
    const int rc = driver::usage(tool, command.error().message);
    return json ? json_failure(output, rc, "input", input, command.error().message) : rc;
  }
  return run_pack_command(*command, output);
}

} // namespace

int main(int argc, char **argv) {
  return driver::flushed(tool, tool_main(argc, argv));
}
