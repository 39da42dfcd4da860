// cudaq-rt-run's session (command/run_command.h) where no GPU is needed: --grid, the option checks in
// their order and with their texts, the request --bench sends by default, serve's default bridge,
// the refusals a load report decides, how answers are shown, and a failure to start serving as
// text and as a --json document. The tool's own runs: tests/integration/test_run.py (usage, no
// driver) and tests/gpu/test_run.py.
#include "command/run_command.h"

#include <doctest/doctest.h>

#include "fake_gpu.h"
#include "scratch_dir.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace cudaq_rt;

namespace {

// What a session wrote, by stream.
struct StringOutput final : StringToolOutput {
  StringOutput() : StringToolOutput("cudaq-rt-run") {}
};

RunArgs call_args(const std::string &handler = "echo") {
  RunArgs a;
  a.package = "p.cudaqpkg";
  a.call = handler;
  return a;
}

// The usage message make_run_options refuses `args` with; empty when it accepts them.
std::string refusal(const RunArgs &args) {
  auto options = make_run_options(args);
  return options ? std::string() : options.error().str();
}

Reply reply(int32_t status, std::vector<uint8_t> result) {
  Reply r;
  r.response.status = status;
  r.response.request_id = 7;
  r.response.result = std::move(result);
  r.latency_us = 2.5;
  return r;
}

} // namespace

TEST_CASE("--grid: two positive numbers, refused with one message") {
  auto g = parse_grid("4,128");
  REQUIRE(g);
  CHECK(g->blocks == 4);
  CHECK(g->threads == 128);
  g = parse_grid("1,1");
  REQUIRE(g);
  CHECK((g->blocks == 1 && g->threads == 1));
  g = parse_grid("4294967295,1024");
  REQUIRE(g);
  CHECK(g->blocks == 4294967295u);
  for (const char *bad : {"1", "0,1", "1,0", "1,2,3", "a,b", "1,2x", "-1,2", "1,-2", "+1,2", "",
                          ",", "1,", ",1", " 1,2", "4294967296,1", "1.5,2"}) {
    CAPTURE(bad);
    auto r = parse_grid(bad);
    REQUIRE(!r);
    CHECK(r.error().str() ==
          std::string("--grid: '") + bad + "' is not BLOCKS,THREADS (two positive numbers)");
  }
  CHECK(parse_grid("a'\n,1").error().str() ==
        "--grid: 'a\\'\\n,1' is not BLOCKS,THREADS (two positive numbers)");
}

TEST_CASE("options: each refusal's text") {
  RunArgs none;
  none.package = "p.cudaqpkg";
  CHECK(refusal(none) ==
        "nothing to do: give --call NAME, --calls FILE, --bench N, --serve or --list");

  RunArgs a = call_args();
  a.count = 5;
  CHECK(refusal(a) == "--count needs --serve");
  a = call_args();
  a.duration_s = 1;
  CHECK(refusal(a) == "--duration needs --serve");
  a = call_args();
  a.stats_interval_s = 1;
  CHECK(refusal(a) == "--stats-interval needs --serve");

  RunArgs serve;
  serve.package = "p.cudaqpkg";
  serve.serve = true;
  a = serve;
  a.count = 0;
  CHECK(refusal(a) == "--count: must be at least 1");
  a = serve;
  a.duration_s = 0;
  CHECK(refusal(a) == "--duration: must be more than 0 seconds");
  a = serve;
  a.stats_interval_s = -1;
  CHECK(refusal(a) == "--stats-interval: must be more than 0 seconds");
  a = call_args();
  a.watch_s = 1;
  CHECK(refusal(a) == "--watch needs --serve");
  for (double bad : {0.0, -1.0, 86401.0}) {
    a = serve;
    a.watch_s = bad;
    CHECK(refusal(a) == "--watch: the interval must be above 0 and at most 86400 seconds");
  }
  a = serve;
  a.watch_s = 0.5;
  a.globals = {"g=u8:1"};
  auto watched = make_run_options(a);
  REQUIRE(watched);
  CHECK(watched->watch_s == 0.5);
  CHECK(watched->global_specs == std::vector<std::string>{"g=u8:1"});

  a = RunArgs{};
  a.list = true;
  a.args = {"i32:1"};
  CHECK(refusal(a) == "--arg needs --call");

  a = call_args();
  a.device = "0,1";
  CHECK(refusal(a) == "--device 0,1: several GPUs need --serve");
  a = call_args();
  a.call.reset();
  a.bench = 5;
  a.device = "all";
  CHECK(refusal(a) == "--device all: several GPUs need --serve");
  a = serve;
  a.device = "0,1,0";
  CHECK(refusal(a) == "--device: GPU 0 is listed twice");
  a = serve;
  a.device = "x";
  CHECK(refusal(a) ==
        "--device: 'x' is not a GPU ordinal, a comma-separated list of them, or 'all'");

  a = call_args();
  a.result = "i128";
  CHECK(refusal(a) == "--result: unknown result type 'i128' (expected i8, i16, i32, i64, u8, "
                      "u16, u32, u64, f32, f64, hex, str or raw)");
  a = call_args();
  a.result = "raw";
  a.json = true;
  CHECK(refusal(a) == "--result raw writes bytes to stdout: not with --json or --calls");
  a = RunArgs{};
  a.calls_file = "calls.txt";
  a.result = "raw";
  CHECK(refusal(a) == "--result raw writes bytes to stdout: not with --json or --calls");

  a = call_args();
  a.grid = "1,0";
  CHECK(refusal(a) == "--grid: '1,0' is not BLOCKS,THREADS (two positive numbers)");

  a = RunArgs{};
  a.bench = 0;
  CHECK(refusal(a) == "--bench: the number of requests must be at least 1");
  a = RunArgs{};
  a.bench = 5;
  a.inflight = 0;
  CHECK(refusal(a) == "--inflight: must be at least 1");
  a = call_args();
  a.timeout_s = 0;
  CHECK(refusal(a) == "--timeout: must be more than 0 seconds");
  a = call_args();
  a.load.stop_timeout_s = -1;
  CHECK(refusal(a) == "--stop-timeout: must be 0 seconds or more");
  a = call_args();
  a.load.stop_timeout_s = 0;
  CHECK(refusal(a) == "");

  a = call_args();
  a.globals = {"1lut=u8:1"};
  CHECK(refusal(a) == "global '1lut=u8:1': '1lut' is not a C identifier");
  a = call_args();
  a.args = {"i32:1", "i8:300"};
  CHECK(refusal(a) == "argument 'i8:300': 300 is out of range for i8 (-128..127)");
}

TEST_CASE("options: the first refusal in the tool's order wins") {
  RunArgs a = call_args();
  a.count = 0;      // --count needs --serve, before its value
  a.device = "0,1"; // before --device
  a.bench = 0;      // and --bench 0
  CHECK(refusal(a) == "--count needs --serve");
  a.count.reset();
  CHECK(refusal(a) == "--device 0,1: several GPUs need --serve");
  a.device = "0";
  a.result = "nosuch";
  a.grid = "x";
  CHECK(refusal(a).starts_with("--result: unknown result type 'nosuch'"));
  a.result = "hex";
  CHECK(refusal(a) == "--grid: 'x' is not BLOCKS,THREADS (two positive numbers)");
  a.grid.reset();
  a.globals = {"=u8:1"};
  CHECK(refusal(a) == "--bench: the number of requests must be at least 1");
  a.bench = 3;
  a.args = {"hex:abc"};
  CHECK(refusal(a) == "global '=u8:1': '' is not a C identifier");
  a.globals.clear();
  CHECK(refusal(a) == "argument 'hex:abc': odd number of hex digits (3)");
}

TEST_CASE("options: what to do, and with what") {
  RunArgs a = call_args("sum_i32");
  a.args = {"i32:1,2", "hex:ff"};
  a.result = "i64";
  a.grid = "2,64";
  a.globals = {"lut=u8:1,2"};
  a.lto = "whole";
  a.no_link = true;
  a.device = "3";
  auto o = make_run_options(a);
  REQUIRE(o);
  CHECK(o->action == RunAction::call);
  REQUIRE(o->call);
  CHECK(o->call->handler == "sum_i32");
  CHECK(o->call->payload == std::vector<uint8_t>{1, 0, 0, 0, 2, 0, 0, 0, 0xff});
  CHECK(o->call->result == ResultType{ResultType::Kind::scalars, ScalarType::i64});
  CHECK(o->load.package == "p.cudaqpkg");
  CHECK(o->load.device == 3);
  REQUIRE(o->load.shape);
  CHECK((o->load.shape->blocks == 2 && o->load.shape->threads == 64));
  REQUIRE(o->load.globals.size() == 1);
  CHECK(o->load.globals[0].name == "lut");
  CHECK(o->load.globals[0].bytes == std::vector<uint8_t>{1, 2});
  CHECK(o->load.link.lto_mode == LtoMode::whole);
  CHECK(!o->load.policy.allow_link);
  CHECK(o->load.link.bridge == ""); // the load path's default
  CHECK(!o->all_devices);

  a = call_args();
  CHECK(!make_run_options(a)->load.shape);
  CHECK(!make_run_options(a)->load.link.lto_mode);
  CHECK(make_run_options(a)->load.policy.allow_link);

  a = call_args();
  a.bench = 50;
  a.inflight = 4;
  o = make_run_options(a);
  REQUIRE(o);
  CHECK(o->action == RunAction::bench); // --call with --bench benchmarks that call
  CHECK(o->call->handler == "echo");
  CHECK(o->bench_requests == 50);
  CHECK(o->inflight == 4);

  a = RunArgs{};
  a.bench = 9;
  o = make_run_options(a);
  CHECK(o->action == RunAction::bench);
  CHECK(!o->call);

  a = RunArgs{};
  a.calls_file = "-";
  a.result = "str";
  o = make_run_options(a);
  CHECK(o->action == RunAction::calls);
  CHECK(o->calls_file == "-");
  CHECK(o->result == ResultType{ResultType::Kind::str});
  CHECK(!o->call);

  a = RunArgs{};
  a.list = true;
  a.json = true;
  a.verbose = true;
  o = make_run_options(a);
  CHECK(o->action == RunAction::list);
  CHECK(o->json);
  CHECK(o->verbose);
}

TEST_CASE("--serve: udp unless --bridge names one; devices and bounds") {
  RunArgs a;
  a.package = "p.cudaqpkg";
  a.serve = true;
  a.device = "2,0";
  a.count = 100;
  a.duration_s = 1.5;
  a.stats_interval_s = 0.25;
  auto o = make_run_options(a);
  REQUIRE(o);
  CHECK(o->action == RunAction::serve);
  CHECK(o->load.link.bridge == "udp");
  CHECK(o->serve.devices == std::vector<int>{2, 0});
  CHECK(!o->all_devices);
  CHECK(o->serve.count == 100);
  CHECK(o->serve.duration_s == 1.5);
  CHECK(o->serve.stats_interval_s == 0.25);

  a.load.link.bridge = "loopback";
  a.device = "all";
  o = make_run_options(a);
  REQUIRE(o);
  CHECK(o->load.link.bridge == "loopback");
  CHECK(o->all_devices);
  CHECK(o->serve.devices.empty());

  RunArgs unbounded;
  unbounded.serve = true;
  o = make_run_options(unbounded);
  CHECK(o->serve.count == 0);
  CHECK(o->serve.duration_s == 0);
  CHECK(o->serve.devices == std::vector<int>{0});
}

TEST_CASE("--bench without --call: echo with 8 bytes, else the first handler with none") {
  auto r = default_bench_request({"parity", "echo", "sum_i32"}, "p.cudaqpkg");
  REQUIRE(r);
  CHECK(r->handler == "echo");
  CHECK(r->payload == std::vector<uint8_t>(8, 0));
  r = default_bench_request({"parity", "sum_i32"}, "p.cudaqpkg");
  REQUIRE(r);
  CHECK(r->handler == "parity");
  CHECK(r->payload.empty());
  r = default_bench_request({}, "dir/p.cudaqpkg");
  REQUIRE(!r);
  CHECK(r.error().str() == "'dir/p.cudaqpkg': exports no handler to benchmark");
}

TEST_CASE("refusals against the loaded package: unknown handler, payload past a slot") {
  LoadReport report;
  report.package = "p.cudaqpkg";
  report.handlers = {"echo", "sum_i32"};
  report.aliases = {AliasEntry{"rt_echo", "echo", 0}};
  report.slot_size = 64;
  RunRequest r{"nosuch", {}, {}};
  auto e = refuse_request(report, r);
  REQUIRE(e);
  CHECK(e->str() == "'p.cudaqpkg': no handler 'nosuch': the package exports echo, sum_i32, "
                    "rt_echo (alias of echo)");
  r.handler = "rt_echo";
  CHECK(!refuse_request(report, r));
  r.handler = "sum_i32";
  r.payload.assign(40, 1); // 64 less the header
  CHECK(!refuse_request(report, r));
  r.payload.push_back(1);
  e = refuse_request(report, r);
  REQUIRE(e);
  CHECK(e->str() == "'p.cudaqpkg': the arguments of 'sum_i32' are 41 bytes, but the bridge's "
                    "slots hold 40 (slot_size 64 less the 24-byte header)");

  LoadReport empty;
  empty.package = "q.cudaqpkg";
  empty.slot_size = 64;
  CHECK(refuse_request(empty, RunRequest{"x\n", {}, {}})->str() ==
        "'q.cudaqpkg': no handler 'x\\n': the package exports none");
}

TEST_CASE("answers as text: status, result, exit status") {
  const ResultType hex{ResultType::Kind::hex};
  StringOutput o;
  CHECK(show_answer({"echo", {}, hex}, reply(0, {0x2a, 0x17}), o, nullptr) == 0);
  CHECK(o.out_text == "ok: 2a17\n");
  CHECK(o.err_text == "");
  CHECK(o.flushes == 1);

  o = {};
  CHECK(show_answer({"echo", {}, hex}, reply(0, {}), o, nullptr) == 0);
  CHECK(o.out_text == "ok\n");

  o = {};
  CHECK(show_answer({"sum_i32", {}, hex}, reply(1, {}), o, nullptr) == 3);
  CHECK(o.out_text == "handler error 1\n");
  o = {};
  CHECK(show_answer({"sum_i32", {}, hex}, reply(5, {0x01}), o, nullptr) == 3);
  CHECK(o.out_text == "handler error 5: 01\n");

  o = {};
  CHECK(show_answer({"nosuch", {}, hex}, reply(-1, {}), o, nullptr) == 4);
  CHECK(o.out_text == "unknown function or bad magic\n");
  o = {};
  CHECK(show_answer({"echo", {}, hex}, reply(-2, {0x01}), o, nullptr) == 4);
  CHECK(o.out_text == "payload too large\n"); // a protocol error's bytes are not a result

  o = {};
  const ResultType i32{ResultType::Kind::scalars, ScalarType::i32};
  CHECK(show_answer({"sum_i32", {}, i32}, reply(0, {6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}), o,
                    nullptr) == 0);
  CHECK(o.out_text == "ok: 6,-1\n");

  // A result that does not decode as asked: a usage error, unless the status is worse.
  o = {};
  CHECK(show_answer({"sum_i32", {}, i32}, reply(0, {1, 2, 3}), o, nullptr) == 2);
  CHECK(o.out_text ==
        "ok: (the result's 3 bytes are not a whole number of i32 values (4 bytes each))\n");
  o = {};
  CHECK(show_answer({"sum_i32", {}, i32}, reply(2, {1, 2, 3}), o, nullptr) == 3);

  // raw: the bytes as they are on stdout, the status on stderr.
  o = {};
  const ResultType raw{ResultType::Kind::raw};
  CHECK(show_answer({"echo", {}, raw}, reply(0, {'a', 0, '\n'}), o, nullptr) == 0);
  CHECK(o.out_text == std::string("a\0\n", 3));
  CHECK(o.err_text == "ok\n");
}

TEST_CASE("answers in --json: one entry each in \"calls\", nothing on stdout") {
  StringOutput o;
  nlohmann::json calls = nlohmann::json::array();
  const ResultType i32{ResultType::Kind::scalars, ScalarType::i32};
  CHECK(show_answer({"sum_i32", {}, i32}, reply(0, {6, 0, 0, 0}), o, &calls) == 0);
  CHECK(show_answer({"sum_i32", {}, i32}, reply(0, {6, 0}), o, &calls) == 2);
  CHECK(show_answer({"echo", {}, ResultType{ResultType::Kind::raw}}, reply(1, {0xab}), o, &calls) ==
        3);
  CHECK(o.out_text == "");
  CHECK(o.err_text == "");
  REQUIRE(calls.size() == 3);
  CHECK(calls[0] == nlohmann::json{{"handler", "sum_i32"},
                                   {"request_id", 7},
                                   {"status", 0},
                                   {"status_name", "ok"},
                                   {"result_hex", "06000000"},
                                   {"latency_us", 2.5},
                                   {"result", "6"}});
  CHECK(calls[1]["decode_error"] ==
        "the result's 2 bytes are not a whole number of i32 values (4 bytes each)");
  CHECK(!calls[1].contains("result"));
  CHECK(calls[2]["status_name"] == "handler error");
  CHECK(calls[2]["result_hex"] == "ab");
  CHECK(!calls[2].contains("result")); // raw has no text form
  CHECK(!calls[2].contains("decode_error"));
}

TEST_CASE("a session that cannot start serving: one error line, with --json one document") {
  ::unsetenv("CUDA_MODULE_LOADING");
  RunArgs a;
  a.package = "p.cudaqpkg";
  a.serve = true;
  a.device = "all";
  auto options = make_run_options(a);
  REQUIRE(options);
  CountingGpu none(0); // serving with --device all asks nothing else before it fails
  const std::atomic<bool> stop{false};
  StringOutput text;
  RunOutcome r = run(*options, text, stop, none);
  CHECK(r.status == 1);
  CHECK(!r.exit_at_once);
  CHECK(text.out_text == "");
  CHECK(text.err_text == "cudaq-rt-run: error: --device all: this machine has no GPU\n");
  // Everything this process loads, loads eagerly.
  REQUIRE(std::getenv("CUDA_MODULE_LOADING") != nullptr);
  CHECK(std::string(std::getenv("CUDA_MODULE_LOADING")) == "EAGER");

  options->json = true;
  StringOutput json;
  r = run(*options, json, stop, none);
  CHECK(r.status == 1);
  CHECK(json.out_text == "{\n"
                         "  \"error\": \"--device all: this machine has no GPU\",\n"
                         "  \"exit_status\": 1,\n"
                         "  \"format_version\": 1,\n"
                         "  \"package\": \"p.cudaqpkg\"\n"
                         "}\n");
  CHECK(json.err_text == text.err_text);

  // A setting of the user's own is kept.
  ::setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  StringOutput again;
  (void)run(*options, again, stop, none);
  CHECK(std::string(std::getenv("CUDA_MODULE_LOADING")) == "LAZY");
  ::unsetenv("CUDA_MODULE_LOADING");
}

TEST_CASE("--watch's fingerprint: the package's manifest, an OCI layout's index, the globals' "
          "bytes") {
  ScratchDir dir{"cudaq_rt_test_fingerprint"};
  auto write = [](const std::filesystem::path &p, const std::string &text) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  };
  RunOptions o;
  o.load.package = dir.path / "app.cudaqpkg";
  auto fp = [&] { return run_fingerprint(o); };
  CHECK(!fp()); // no manifest yet: a poll that saw nothing
  write(dir.path / "app.cudaqpkg" / "manifest.json", "{\"a\": 1}");
  auto one = fp();
  REQUIRE_MESSAGE(one, (one ? "" : one.error().str()));
  CHECK(*fp() == *one);
  write(dir.path / "app.cudaqpkg" / "manifest.json", "{\"a\": 2}");
  CHECK(*fp() != *one);
  // A --global file read again.
  const auto before = *fp();
  write(dir.path / "table.bin", "\x01\x02");
  o.global_specs = {"table=@" + (dir.path / "table.bin").string()};
  const auto with_table = *fp();
  CHECK(with_table != before);
  write(dir.path / "table.bin", "\x01\x03");
  CHECK(*fp() != with_table);
  // An OCI layout: its index, which a moved tag changes.
  o.global_specs.clear();
  o.load.package = "oci:" + (dir.path / "layout").string() + ":1";
  write(dir.path / "layout" / "index.json", "{\"manifests\": []}");
  const auto layout = fp();
  REQUIRE_MESSAGE(layout, (layout ? "" : layout.error().str()));
  write(dir.path / "layout" / "index.json", "{\"manifests\": [1]}");
  CHECK(*fp() != *layout);
}
