// cudaq-rt-pack's command: the usage errors make_pack_command gives, and run_pack_command packing,
// listing and refusing, written into strings. The tool's own behaviour end to end is the
// integration tests' (test_pack.py, test_oci.py).
#include "command/pack_command.h"

#include "scratch_dir.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

using namespace cudaq_rt;
namespace fs = std::filesystem;

namespace {

std::string usage_error(PackArgs args) {
  auto c = make_pack_command(std::move(args));
  REQUIRE_FALSE(c);
  CHECK(c.error().subject.empty());
  return c.error().message;
}

PackArgs inputs(std::vector<std::string> files) {
  PackArgs a;
  a.inputs = std::move(files);
  return a;
}

} // namespace

TEST_CASE("make_pack_command: which options go together, said as the usage line") {
  CHECK(usage_error({}) == "no input files");
  PackArgs a = inputs({"a", "b"});
  a.list = true;
  CHECK(usage_error(a) == "--list takes one package or binary and no other inputs or aliases");
  a = inputs({"a"});
  a.list = true;
  a.pack.aliases = {"x=echo"};
  CHECK(usage_error(a) == "--list takes one package or binary and no other inputs or aliases");
  a.pack.aliases.clear();
  a.sign_key = "k.pem";
  CHECK(usage_error(a) == "--sign packs: it does not go with --list");
  a = inputs({"a"});
  a.pull = "oci://127.0.0.1:5000/x:1";
  CHECK(usage_error(a) == "--pull takes a reference and -o, -f: no inputs");
  a = {};
  a.pull = "registry/x";
  CHECK(usage_error(a).starts_with("--pull: "));
  CHECK(usage_error(a).ends_with(" (or oci:DIR[:TAG], an OCI image layout)"));
  a.pull = "oci:";
  CHECK(usage_error(a).starts_with("--pull: 'oci:': no directory"));
  a = inputs({"a"});
  a.json = true;
  CHECK(usage_error(a) == "--json goes with --list");
  a.json = false;
  a.verify = {"k.pub"};
  CHECK(usage_error(a) == "--verify goes with --list");
  a.verify.clear();
  a.push = "http://x";
  CHECK(usage_error(a).starts_with("--push: "));

  a = inputs({"a"});
  a.list = true;
  auto c = make_pack_command(a);
  REQUIRE(c);
  CHECK(c->action == PackAction::list);
  a = {};
  a.pull = "oci:layout:1";
  c = make_pack_command(a);
  REQUIRE(c);
  CHECK(c->action == PackAction::pull);
  c = make_pack_command(inputs({"a"}));
  REQUIRE(c);
  CHECK(c->action == PackAction::pack);
}

TEST_CASE("run_pack_command: pack, then list the binary and the package, and a failure as JSON") {
  ScratchDir dir;
  PackArgs a = inputs({CUDAQ_RT_TEST_EXAMPLE_APP});
  a.output_dir = dir.path.string();
  a.pack.name = "app";
  a.show_written = true;
  StringToolOutput out("cudaq-rt-pack");
  auto c = make_pack_command(a);
  REQUIRE(c);
  REQUIRE(run_pack_command(*c, out) == 0);
  const fs::path pkg = dir.path / "app.cudaqpkg";
  CHECK(fs::is_regular_file(pkg / "manifest.json"));
  CHECK(out.err_text.starts_with("cudaq-rt-pack: wrote "));
  CHECK(out.out_text.empty());
  // A second pack without -f refuses, and says so once.
  StringToolOutput again("cudaq-rt-pack");
  CHECK(run_pack_command(*c, again) == 1);
  CHECK(again.errors().size() == 1);
  CHECK(again.errors().front().find("already exists") != std::string::npos);

  for (const std::string &input : {std::string(CUDAQ_RT_TEST_EXAMPLE_APP), pkg.string()}) {
    CAPTURE(input);
    PackArgs l = inputs({input});
    l.list = true;
    l.json = true;
    StringToolOutput listed("cudaq-rt-pack");
    REQUIRE(run_pack_command(*make_pack_command(l), listed) == 0);
    const auto doc = nlohmann::json::parse(listed.out_text);
    CHECK(doc.at("exports").size() >= 5);
  }
  // --json: a failure is one error document on stdout, naming the input.
  PackArgs missing = inputs({(dir.path / "nope.cudaqpkg").string()});
  missing.list = true;
  missing.json = true;
  StringToolOutput failed("cudaq-rt-pack");
  CHECK(run_pack_command(*make_pack_command(missing), failed) == 1);
  const auto doc = nlohmann::json::parse(failed.out_text);
  CHECK(doc.at("input") == missing.inputs.front());
  CHECK(doc.at("exit_status") == 1);
  CHECK(doc.at("error") == failed.errors().front());
}
