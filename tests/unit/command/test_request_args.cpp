#include "command/request_args.h"

#include "scratch_dir.h"
#include "unit_files.h"

#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sys/stat.h>

using namespace cudaq_rt;
using unit_files::write_file;

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kLimit = 1 << 16;

Bytes encode(const std::string &spec, size_t limit = kLimit) {
  Bytes out;
  Status s = append_arg(spec, out, limit);
  REQUIRE_MESSAGE(s, (s ? std::string() : s.error().str()));
  return out;
}

// The one-line message of a spec that must fail; `out` must come back unchanged.
std::string encode_error(const std::string &spec, size_t limit = kLimit) {
  Bytes out = {0xaa, 0xbb};
  Status s = append_arg(spec, out, limit);
  REQUIRE_FALSE(s);
  CHECK(out == Bytes{0xaa, 0xbb});
  CHECK(s.error().subject.empty());
  return s.error().str();
}

template <class T> Bytes bytes_of(std::initializer_list<T> values) {
  Bytes out;
  for (T v : values) {
    uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out.insert(out.end(), b, b + sizeof v);
  }
  return out;
}

std::string decode(const std::string &type, const Bytes &result) {
  Expected<ResultType> t = parse_result_type(type);
  REQUIRE(t);
  Expected<std::string> text = decode_result(*t, result);
  REQUIRE_MESSAGE(text, (text ? std::string() : text.error().str()));
  return *text;
}

} // namespace

TEST_CASE("integers are little-endian, at their type's width") {
  CHECK(encode("i8:-1") == Bytes{0xff});
  CHECK(encode("u8:255") == Bytes{0xff});
  CHECK(encode("i16:-2") == Bytes{0xfe, 0xff});
  CHECK(encode("u16:0x1234") == Bytes{0x34, 0x12});
  CHECK(encode("i32:1") == Bytes{1, 0, 0, 0});
  CHECK(encode("u32:0xDEADbeef") == Bytes{0xef, 0xbe, 0xad, 0xde});
  CHECK(encode("i64:-0x10") == bytes_of<int64_t>({-16}));
  CHECK(encode("u64:18446744073709551615") == Bytes(8, 0xff));
  CHECK(encode("i64:-9223372036854775808") == bytes_of<int64_t>({INT64_MIN}));
  CHECK(encode("i32:+7") == Bytes{7, 0, 0, 0});
  CHECK(encode("u8:-0") == Bytes{0});
}

TEST_CASE("integer ranges are each type's, at both ends") {
  CHECK(encode("i8:-128") == Bytes{0x80});
  CHECK(encode("i8:127") == Bytes{0x7f});
  CHECK(encode_error("i8:300") == "argument 'i8:300': 300 is out of range for i8 (-128..127)");
  CHECK(encode_error("i8:128") == "argument 'i8:128': 128 is out of range for i8 (-128..127)");
  CHECK(encode_error("i8:-129") == "argument 'i8:-129': -129 is out of range for i8 (-128..127)");
  CHECK(encode_error("i8:0xff") == "argument 'i8:0xff': 0xff is out of range for i8 (-128..127)");
  CHECK(encode_error("u8:256") == "argument 'u8:256': 256 is out of range for u8 (0..255)");
  CHECK(encode_error("u8:-1") == "argument 'u8:-1': -1 is out of range for u8 (0..255)");
  CHECK(encode_error("i16:32768") ==
        "argument 'i16:32768': 32768 is out of range for i16 (-32768..32767)");
  CHECK(encode_error("u16:65536") ==
        "argument 'u16:65536': 65536 is out of range for u16 (0..65535)");
  CHECK(encode_error("i32:2147483648") ==
        "argument 'i32:2147483648': 2147483648 is out of range for i32 (-2147483648..2147483647)");
  CHECK(encode_error("u32:4294967296") ==
        "argument 'u32:4294967296': 4294967296 is out of range for u32 (0..4294967295)");
  CHECK(encode_error("i64:9223372036854775808") ==
        "argument 'i64:9223372036854775808': 9223372036854775808 is out of range for i64 "
        "(-9223372036854775808..9223372036854775807)");
  // Past 64 bits: from_chars itself overflows.
  CHECK(encode_error("u64:18446744073709551616") ==
        "argument 'u64:18446744073709551616': 18446744073709551616 is out of range for u64 "
        "(0..18446744073709551615)");
  CHECK(encode_error("u64:-1") ==
        "argument 'u64:-1': -1 is out of range for u64 (0..18446744073709551615)");
}

TEST_CASE("malformed integers are refused, not read in part") {
  for (const char *spec : {"i32:12x", "i32:x", "i32:0x", "i32:0xg", "i32:1.5", "i32:--1", "i32:+-1",
                           "i32: 1", "i32:1 ", "u8:0b1"}) {
    const std::string value = std::string(spec).substr(std::string(spec).find(':') + 1);
    CHECK(encode_error(spec) == "argument '" + std::string(spec) + "': '" + value +
                                    "' is not an integer (decimal or 0x hex)");
  }
  CHECK(encode_error("i32:") == "argument 'i32:': no i32 value");
}

TEST_CASE("floats: round to the type, inf and nan allowed, junk and overflow refused") {
  CHECK(encode("f32:1.5") == bytes_of<float>({1.5f}));
  CHECK(encode("f32:0.1") == bytes_of<float>({0.1f}));
  CHECK(encode("f64:0.1") == bytes_of<double>({0.1}));
  CHECK(encode("f64:-2.5e-3") == bytes_of<double>({-2.5e-3}));
  CHECK(encode("f64:+3") == bytes_of<double>({3.0}));
  CHECK(encode("f32:inf") == bytes_of<float>({std::numeric_limits<float>::infinity()}));
  CHECK(encode("f64:-inf") == bytes_of<double>({-std::numeric_limits<double>::infinity()}));
  Bytes nan = encode("f64:nan");
  double d;
  REQUIRE(nan.size() == 8);
  std::memcpy(&d, nan.data(), 8);
  CHECK(std::isnan(d));
  // Subnormals are values, not underflow.
  CHECK(encode("f32:1e-40") == bytes_of<float>({1e-40f}));

  CHECK(encode_error("f32:1e39") == "argument 'f32:1e39': 1e39 is out of range for f32");
  CHECK(encode_error("f64:1e309") == "argument 'f64:1e309': 1e309 is out of range for f64");
  CHECK(encode_error("f32:1e-50") == "argument 'f32:1e-50': 1e-50 is out of range for f32");
  CHECK(encode_error("f32:1.5x") ==
        "argument 'f32:1.5x': '1.5x' is not a number (decimal, inf or nan)");
  CHECK(encode_error("f64:0x10") ==
        "argument 'f64:0x10': '0x10' is not a number (decimal, inf or nan)");
  CHECK(encode_error("f64:abc") ==
        "argument 'f64:abc': 'abc' is not a number (decimal, inf or nan)");
  CHECK(encode_error("f64:") == "argument 'f64:': no f64 value");
}

TEST_CASE("arrays: comma-separated elements, back to back") {
  CHECK(encode("i32:1,2,-3") == bytes_of<int32_t>({1, 2, -3}));
  CHECK(encode("f64:1.5,2.5,3") == bytes_of<double>({1.5, 2.5, 3.0}));
  CHECK(encode("u8:1,0x2,255") == Bytes{1, 2, 255});
  CHECK(encode("i16:-1,1") == Bytes{0xff, 0xff, 1, 0});
  CHECK(encode_error("i32:1,,2") == "argument 'i32:1,,2': element 2 is empty");
  CHECK(encode_error("i32:1,2,") == "argument 'i32:1,2,': element 3 is empty");
  CHECK(encode_error("i32:,1") == "argument 'i32:,1': element 1 is empty");
  CHECK(encode_error("u8:1,2,256") == "argument 'u8:1,2,256': 256 is out of range for u8 (0..255)");
  CHECK(encode_error("f32:1, 2") ==
        "argument 'f32:1, 2': ' 2' is not a number (decimal, inf or nan)");
}

TEST_CASE("hex: digit pairs in either case, nothing else") {
  CHECK(encode("hex:0a0b") == Bytes{0x0a, 0x0b});
  CHECK(encode("hex:DEADbeef") == Bytes{0xde, 0xad, 0xbe, 0xef});
  CHECK(encode("hex:").empty());
  CHECK(encode_error("hex:0a0") == "argument 'hex:0a0': odd number of hex digits (3)");
  CHECK(encode_error("hex:0a  0b") == "argument 'hex:0a  0b': ' ' at offset 2 is not a hex digit");
  CHECK(encode_error("hex:0x0a") == "argument 'hex:0x0a': 'x' at offset 1 is not a hex digit");
  CHECK(encode_error("hex:0g") == "argument 'hex:0g': 'g' at offset 1 is not a hex digit");
}

TEST_CASE("str: the bytes as given, no NUL") {
  CHECK(encode("str:hi") == Bytes{'h', 'i'});
  CHECK(encode("str:a:b,c") == Bytes{'a', ':', 'b', ',', 'c'});
  CHECK(encode("str: x ") == Bytes{' ', 'x', ' '});
  CHECK(encode("str:").empty());
}

TEST_CASE("unknown types and specs without a type") {
  CHECK(encode_error("int:3") ==
        "argument 'int:3': unknown type 'int' (expected i8, i16, i32, i64, u8, u16, u32, u64, "
        "f32, f64, hex, str or @FILE)");
  CHECK(encode_error("42") == "argument '42': expected TYPE:VALUE or @FILE");
  CHECK(encode_error("") == "argument '': expected TYPE:VALUE or @FILE");
}

TEST_CASE("@file: a regular file's bytes, bounded") {
  ScratchDir dir;
  const std::string bin = (dir.path / "t.bin").string();
  write_file(bin, std::string("\x00\x01\xff", 3));
  CHECK(encode("@" + bin) == Bytes{0, 1, 0xff});
  const std::string empty = (dir.path / "empty").string();
  write_file(empty, "");
  CHECK(encode("@" + empty).empty());

  // The bound is the room left in the payload, what is already there counted.
  CHECK(encode("@" + bin, 3) == Bytes{0, 1, 0xff});
  CHECK(encode_error("@" + bin, 4) ==
        "argument '@" + bin + "': '" + bin + "' is 3 bytes; only 2 fit");

  CHECK(encode_error("@" + dir.path.string()) ==
        "argument '@" + dir.path.string() + "': '" + dir.path.string() + "' is not a regular file");
  const std::string fifo = (dir.path / "fifo").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(encode_error("@" + fifo) ==
        "argument '@" + fifo + "': '" + fifo + "' is not a regular file");
  const std::string missing = (dir.path / "missing").string();
  CHECK(encode_error("@" + missing) ==
        "argument '@" + missing + "': cannot open '" + missing + "': No such file or directory");
  CHECK(encode_error("@") == "argument '@': no file name after '@'");
}

TEST_CASE("the payload limit counts every argument") {
  Bytes out;
  REQUIRE(append_arg("i32:1", out, 8));
  REQUIRE(append_arg("u16:2", out, 8));
  Status s = append_arg("u16:3,4", out, 8);
  REQUIRE_FALSE(s);
  CHECK(s.error().str() ==
        "argument 'u16:3,4': the payload would be 10 bytes, over the limit of 8");
  CHECK(out == Bytes{1, 0, 0, 0, 2, 0});
  REQUIRE(append_arg("hex:0304", out, 8));
  CHECK(out.size() == 8);
}

TEST_CASE("encode_args concatenates in order and names the first bad spec") {
  const std::vector<std::string> specs = {"f32:2", "hex:ff", "str:ab", "i16:-1"};
  Expected<Bytes> payload = encode_args(specs, kLimit);
  REQUIRE(payload);
  Bytes expected = bytes_of<float>({2.0f});
  expected.insert(expected.end(), {0xff, 'a', 'b', 0xff, 0xff});
  CHECK(*payload == expected);

  const std::vector<std::string> bad = {"i32:1", "i8:300", "u8:-1"};
  Expected<Bytes> failed = encode_args(bad, kLimit);
  REQUIRE_FALSE(failed);
  CHECK(failed.error().str() == "argument 'i8:300': 300 is out of range for i8 (-128..127)");
  CHECK(encode_args(std::vector<std::string>{}, kLimit)->empty());
}

TEST_CASE("result types") {
  CHECK(parse_result_type("hex")->kind == ResultType::Kind::hex);
  CHECK(parse_result_type("str")->kind == ResultType::Kind::str);
  CHECK(parse_result_type("raw")->kind == ResultType::Kind::raw);
  CHECK(*parse_result_type("u16") == ResultType{ResultType::Kind::scalars, ScalarType::u16});
  CHECK(*parse_result_type("f64") == ResultType{ResultType::Kind::scalars, ScalarType::f64});
  // Every name is a type of its own.
  std::vector<ResultType> types;
  for (const char *name :
       {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f32", "f64", "hex", "str", "raw"}) {
    auto t = parse_result_type(name);
    REQUIRE(t);
    CHECK(std::find(types.begin(), types.end(), *t) == types.end());
    types.push_back(*t);
  }
  Expected<ResultType> bad = parse_result_type("int");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().str() == "unknown result type 'int' (expected i8, i16, i32, i64, u8, u16, "
                             "u32, u64, f32, f64, hex, str or raw)");
}

TEST_CASE("decoding scalars: signedness, width, arrays without spaces") {
  CHECK(decode("i8", {0xff, 0x7f, 0x80}) == "-1,127,-128");
  CHECK(decode("u8", {0xff, 0x7f, 0x80}) == "255,127,128");
  CHECK(decode("i16", {0xfe, 0xff}) == "-2");
  CHECK(decode("u16", {0xfe, 0xff}) == "65534");
  CHECK(decode("i32", bytes_of<int32_t>({1, -2, INT32_MIN})) == "1,-2,-2147483648");
  CHECK(decode("u32", {0xef, 0xbe, 0xad, 0xde}) == "3735928559");
  CHECK(decode("i64", bytes_of<int64_t>({-5, INT64_MAX})) == "-5,9223372036854775807");
  CHECK(decode("u64", Bytes(8, 0xff)) == "18446744073709551615");
  CHECK(decode("i32", {}) == "");
}

TEST_CASE("decoding floats: the shortest text that reads back to the same value") {
  CHECK(decode("f64", bytes_of<double>({0.1, 1.5, -3})) == "0.1,1.5,-3");
  CHECK(decode("f32", bytes_of<float>({0.1f, 16777216.0f})) == "0.1,16777216");
  CHECK(decode("f64", bytes_of<double>({1.0 / 3})) == "0.3333333333333333");
  CHECK(decode("f32", bytes_of<float>({1.0f / 3})) == "0.33333334");
  CHECK(decode("f64", bytes_of<double>({std::numeric_limits<double>::infinity()})) == "inf");
  // What is printed reads back bit for bit.
  for (double v : {0.1, 1e-310, 6.02214076e23, -1.7976931348623157e308}) {
    const std::string text = decode("f64", bytes_of<double>({v}));
    CHECK(encode("f64:" + text) == bytes_of<double>({v}));
  }
}

TEST_CASE("decoding: a size that is not whole elements is an error") {
  Expected<std::string> r = decode_result(*parse_result_type("i32"), Bytes(10, 0));
  REQUIRE_FALSE(r);
  CHECK(r.error().str() ==
        "the result's 10 bytes are not a whole number of i32 values (4 bytes each)");
  CHECK_FALSE(decode_result(*parse_result_type("f64"), Bytes(4, 0)));
  CHECK_FALSE(decode_result(*parse_result_type("u16"), Bytes(1, 0)));
}

TEST_CASE("decoding hex, str and raw") {
  CHECK(decode("hex", {0x0a, 0xff, 0x00}) == "0aff00");
  CHECK(decode("hex", {}) == "");
  CHECK(decode("str", {'h', 'i', ' ', '~'}) == "hi ~");
  CHECK(decode("str", {'a', 0, '\n', 0x7f, 0x80, 0xff, '\\', 'b'}) ==
        "a\\x00\\x0a\\x7f\\x80\\xff\\\\b");
  const Bytes raw = {0, 'x', 0xff, '\n'};
  CHECK(decode("raw", raw) == std::string("\0x\xff\n", 4));
}

TEST_CASE("globals: NAME=SPEC") {
  Expected<GlobalValue> g = parse_global("cudaq_rt_example_lut=u8:1,2,3", 256);
  REQUIRE(g);
  CHECK(g->name == "cudaq_rt_example_lut");
  CHECK(g->bytes == Bytes{1, 2, 3});
  // Only the first '=' separates: the value may hold more.
  g = parse_global("_x9=str:a=b", 256);
  REQUIRE(g);
  CHECK(g->name == "_x9");
  CHECK(g->bytes == Bytes{'a', '=', 'b'});

  ScratchDir dir;
  const std::string table = (dir.path / "table.bin").string();
  write_file(table, std::string(5, 'z'));
  g = parse_global("lut=@" + table, 5);
  REQUIRE(g);
  CHECK(g->bytes == Bytes(5, 'z'));
  Expected<GlobalValue> big = parse_global("lut=@" + table, 4);
  REQUIRE_FALSE(big);
  CHECK(big.error().str() == "global 'lut=@" + table + "': '" + table + "' is 5 bytes; only 4 fit");

  CHECK(parse_global("lut", 8).error().str() ==
        "global 'lut': expected NAME=TYPE:VALUE or NAME=@FILE");
  CHECK(parse_global("9lut=u8:1", 8).error().str() ==
        "global '9lut=u8:1': '9lut' is not a C identifier");
  CHECK(parse_global("a-b=u8:1", 8).error().str() ==
        "global 'a-b=u8:1': 'a-b' is not a C identifier");
  CHECK(parse_global("=u8:1", 8).error().str() == "global '=u8:1': '' is not a C identifier");
  CHECK(parse_global("x=i8:300", 8).error().str() ==
        "global 'x=i8:300': 300 is out of range for i8 (-128..127)");
  // What the user typed is escaped: a newline or a control character keeps the message one line,
  // and a quote in it cannot end the quoting (before b95327a: `--global $'x\nq=hex:00'` printed three).
  CHECK(parse_global("x\nq=hex:00", 8).error().str() ==
        "global 'x\\nq=hex:00': 'x\\nq' is not a C identifier");
  CHECK(parse_global("x=i8:1\x1b[2J", 8).error().str() ==
        "global 'x=i8:1\\x1b[2J': '1\\x1b[2J' is not an integer (decimal or 0x hex)");
  CHECK(parse_global("it's", 8).error().str() ==
        "global 'it\\'s': expected NAME=TYPE:VALUE or NAME=@FILE");
  std::vector<uint8_t> out;
  CHECK(append_arg("hex:4\r1", out, 16).error().str() ==
        "argument 'hex:4\\r1': odd number of hex digits (3)");
  CHECK(append_arg("bogus\t:1", out, 16)
            .error()
            .str()
            .starts_with("argument 'bogus\\t:1': unknown type 'bogus\\t' (expected"));
}

TEST_CASE("--calls lines: name, arguments, quotes, --result") {
  Expected<std::optional<CallLine>> c =
      parse_call_line("sum_i32 i32:1,2 i32:3", 1, "calls.txt", kLimit);
  REQUIRE(c);
  REQUIRE(c->has_value());
  CHECK((*c)->handler == "sum_i32");
  CHECK((*c)->payload == bytes_of<int32_t>({1, 2, 3}));
  CHECK_FALSE((*c)->result.has_value());

  c = parse_call_line("  echo\t'str:hello world'  --result str # greeting", 2, "calls.txt", kLimit);
  REQUIRE(c);
  REQUIRE(c->has_value());
  CHECK((*c)->handler == "echo");
  CHECK((*c)->payload == Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  REQUIRE((*c)->result.has_value());
  CHECK(*(*c)->result == ResultType{ResultType::Kind::str});

  // Quotes join with the text around them, as in a shell; "..." knows \" and \\.
  c = parse_call_line(R"(echo str:"a \"b\" \\"'#x'  str:'' )", 3, "-", kLimit);
  REQUIRE(c);
  CHECK((*c)->payload == Bytes{'a', ' ', '"', 'b', '"', ' ', '\\', '#', 'x'});
  // A '#' inside a token is not a comment.
  c = parse_call_line("echo str:a#b\r", 4, "-", kLimit);
  REQUIRE(c);
  CHECK((*c)->payload == Bytes{'a', '#', 'b'});
  // --result before the arguments, and a handler with none.
  c = parse_call_line("parity --result u8 hex:03", 5, "-", kLimit);
  REQUIRE(c);
  CHECK((*c)->payload == Bytes{3});
  CHECK(*(*c)->result == ResultType{ResultType::Kind::scalars, ScalarType::u8});
  c = parse_call_line("ok", 6, "-", kLimit);
  REQUIRE(c);
  CHECK((*c)->handler == "ok");
  CHECK((*c)->payload.empty());
}

TEST_CASE("--calls lines: blanks and comments are skipped") {
  for (const char *line : {"", "   ", "\t\r", "# echo str:x", "   # indented comment"}) {
    Expected<std::optional<CallLine>> c = parse_call_line(line, 1, "calls.txt", kLimit);
    REQUIRE(c);
    CHECK_FALSE(c->has_value());
  }
}

TEST_CASE("--calls lines: errors name the source and line") {
  const auto error = [](const char *line) {
    Expected<std::optional<CallLine>> c = parse_call_line(line, 7, "calls.txt", kLimit);
    REQUIRE_FALSE(c);
    CHECK(c.error().subject == "calls.txt");
    return c.error().str();
  };
  CHECK(error("echo i8:300") ==
        "'calls.txt': line 7: argument 'i8:300': 300 is out of range for i8 (-128..127)");
  CHECK(error("echo 'str:open") == "'calls.txt': line 7: unterminated ' quote at column 6");
  CHECK(error("echo str:\"open") == "'calls.txt': line 7: unterminated \" quote at column 10");
  CHECK(error("echo-2 str:x") ==
        "'calls.txt': line 7: 'echo-2' is not a handler name (a C identifier)");
  CHECK(error("'' str:x") == "'calls.txt': line 7: '' is not a handler name (a C identifier)");
  CHECK(error("echo str:x --result") == "'calls.txt': line 7: --result needs a type");
  CHECK(error("echo --result hex --result str") == "'calls.txt': line 7: --result given twice");
  CHECK(error("echo --result int") ==
        "'calls.txt': line 7: unknown result type 'int' (expected i8, i16, i32, i64, u8, u16, u32, "
        "u64, f32, f64, hex, str or raw)");
  CHECK(error("echo --arg str:x") ==
        "'calls.txt': line 7: unknown option '--arg' (only --result TYPE may follow NAME)");
  CHECK(error("echo 42") == "'calls.txt': line 7: argument '42': expected TYPE:VALUE or @FILE");
}

TEST_CASE("--calls lines: the payload limit applies to the whole line") {
  Expected<std::optional<CallLine>> c = parse_call_line("echo hex:0102 hex:0304", 1, "-", 3);
  REQUIRE_FALSE(c);
  CHECK(c.error().str() ==
        "'-': line 1: argument 'hex:0304': the payload would be 4 bytes, over the limit of 3");
}
