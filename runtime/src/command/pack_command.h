// cudaq-rt-pack's command: its arguments checked into one of three things to do (pack inputs into
// a package, list one input, pull a package), with the usage errors the tool prints, then done,
// everything it says going through a ToolOutput. The tool turns argv into PackArgs; this file
// holds the rest, so that tests run the command without a process.
//
// Stands on pack/ (pack, inspect), package/ (open, verify, the layout check) and oci/ (push,
// pull, and the copies of layouts and references that --list reads).
#pragma once

#include "base/tool_output.h"
#include "pack/pack.h"

#include <optional>
#include <string>
#include <vector>

namespace cudaq_rt {

// The arguments as the command line gave them.
struct PackArgs {
  PackOptions pack;                              // name, force, aliases, paths, compression
  std::vector<std::string> inputs;               // application binaries (the positional ones)
  std::vector<std::vector<std::string>> bridges; // --bridge NAME FILE
  std::vector<std::string> dispatchers;          // --dispatcher FILE
  std::string output_dir = ".";                  // -o
  bool list = false;                             // --list: the one input
  std::optional<std::string> pull;               // --pull REF
  std::optional<std::string> push;               // --push REF
  std::vector<std::string> verify;               // --verify PUB (with --list or --pull)
  std::string sign_key;                          // --sign KEY (default $CUDAQ_RT_SIGN_KEY)
  bool json = false;
  bool verbose = false;      // -v: what each input gave, and where the package went
  bool show_written = false; // the "wrote" line: -v, or a person watching stderr
};

enum class PackAction { pack, list, pull };

struct PackCommand {
  PackAction action = PackAction::pack;
  PackArgs args;
};

// The first refusal is the error; its message is the whole usage line ("no input files",
// "--list takes one package or binary and no other inputs or aliases", "--push: ...").
Expected<PackCommand> make_pack_command(PackArgs args);

// Runs the command; returns the exit status (0, 1 when anything failed, 2 for a reference that
// does not parse). With --json a failure prints an error document (schemas/error.schema.json).
int run_pack_command(const PackCommand &command, ToolOutput &output);

} // namespace cudaq_rt
