// Typed values on the command line, and results printed back: the syntax of cudaq-rt-run's --arg,
// --global, --calls and --result.
//
// Arguments
// ---------
// A request's payload is the concatenation of its arguments' bytes, in order, with no padding or
// length prefixes: a handler sees exactly the bytes the user wrote, as a C struct of packed
// fields would lay them out. Every multi-byte value is little-endian (the wire format's order).
//
//   TYPE:V[,V...]  TYPE is i8 i16 i32 i64 u8 u16 u32 u64 f32 f64; several comma-separated values
//                  make an array (`i32:1,2,-3`, `f64:1.5,2.5,3`), with no spaces and no empty
//                  elements.
//                  Integers are decimal or 0x-prefixed hex, with an optional sign (`-` for the
//                  signed types only: `u8:-1` is out of range). A value is a number, not a bit
//                  pattern: `i8:0xff` is 255, out of range for i8 (-128..127); write `i8:-1`.
//                  Floats are what strtod reads in the C locale, decimal only (no hex floats),
//                  and must be consumed whole: `f32:1.5x` is an error. `inf`, `-inf` and `nan`
//                  are accepted, since a handler's handling of them is worth testing. A value too
//                  large for the type, or so small that it would round to zero, is out of range;
//                  subnormals are kept.
//   hex:HEX        raw bytes: an even number of hex digits, either case, nothing between them
//                  (`hex:0a0B`); `hex:` is zero bytes.
//   str:TEXT       the bytes of TEXT as given, no NUL added; `str:` is zero bytes.
//   @PATH          the bytes of a regular file, read whole. Refused for anything that is not a
//                  regular file (a FIFO or a device could block or never end) and for files larger
//                  than the room left in the payload, so a mistaken path cannot make the tool read
//                  gigabytes into memory.
//
// Results
// -------
// --result TYPE prints the result as an array of TYPE (a size that is not a whole number of
// elements is an error, not a silently dropped tail), `hex` (lowercase, the default), `str` (the
// bytes as text: printable ASCII as is, `\\` for a backslash, `\xNN` for any other byte) or `raw`
// (the bytes unchanged). Floats print in the shortest form that reads back to the same value
// (std::to_chars), so `f64:0.1` round-trips as `0.1`, not 0.10000000000000001.
//
// --global NAME=SPEC: NAME is a C identifier (a __device__ global with C linkage); SPEC has the
// syntax of one argument.
//
// --calls lines
// -------------
// `NAME [SPEC ...] [--result TYPE]`: tokens separated by blanks; within a token, '...' quotes
// everything literally and "..." everything but `\"` and `\\`, so `echo 'str:hello world'` and
// `echo str:"a \"b\""` are one argument each. A `#` that starts a token starts a comment; blank
// and comment-only lines are skipped. @PATH is relative to the working directory, as on the
// command line.
#include "command/request_args.h"

#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace cudaq_rt {

static_assert(std::endian::native == std::endian::little,
              "arguments are copied as host bytes, which must be the wire's little-endian");

namespace {

struct ScalarInfo {
  ScalarType type;
  const char *name;
  size_t size;
  bool is_signed;
  bool is_float;
};

constexpr ScalarInfo kScalars[] = {
    {ScalarType::i8, "i8", 1, true, false},    {ScalarType::i16, "i16", 2, true, false},
    {ScalarType::i32, "i32", 4, true, false},  {ScalarType::i64, "i64", 8, true, false},
    {ScalarType::u8, "u8", 1, false, false},   {ScalarType::u16, "u16", 2, false, false},
    {ScalarType::u32, "u32", 4, false, false}, {ScalarType::u64, "u64", 8, false, false},
    {ScalarType::f32, "f32", 4, true, true},   {ScalarType::f64, "f64", 8, true, true},
};

const ScalarInfo &info(ScalarType type) {
  return kScalars[static_cast<size_t>(type)];
}

// The failures below carry only a message; the caller says which argument, global or line it is
// about.
Error fail(std::string message) {
  return Error{"", std::move(message)};
}

// The largest value of an integer type, and the magnitude of its smallest.
uint64_t integer_max(const ScalarInfo &t) {
  const unsigned value_bits = unsigned(t.size * 8) - (t.is_signed ? 1 : 0);
  return value_bits == 64 ? std::numeric_limits<uint64_t>::max() : (uint64_t(1) << value_bits) - 1;
}
uint64_t integer_min_magnitude(const ScalarInfo &t) {
  return t.is_signed ? integer_max(t) + 1 : 0;
}

// "-128..127" for i8, "0..255" for u8.
std::string integer_range(const ScalarInfo &t) {
  return t.is_signed ? cat("-", integer_min_magnitude(t), "..", integer_max(t))
                     : cat("0..", integer_max(t));
}

// One integer element, written as t.size little-endian bytes at `out`.
Status encode_integer(std::string_view text, const ScalarInfo &t, uint8_t *out) {
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
    negative = digits[0] == '-';
    digits.remove_prefix(1);
  }
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    base = 16;
    digits.remove_prefix(2);
  }
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  if (digits.empty() || end != digits.data() + digits.size() || ec == std::errc::invalid_argument)
    return fail(cat(quote(text), " is not an integer (decimal or 0x hex)"));
  if (ec == std::errc::result_out_of_range ||
      magnitude > (negative ? integer_min_magnitude(t) : integer_max(t)))
    return fail(cat(text, " is out of range for ", t.name, " (", integer_range(t), ")"));
  // Two's complement of the magnitude; the low t.size bytes are the value.
  const uint64_t bits_of_value = negative ? uint64_t(0) - magnitude : magnitude;
  std::memcpy(out, &bits_of_value, t.size);
  return {};
}

template <class F> Status encode_float(std::string_view text, const ScalarInfo &t, uint8_t *out) {
  std::string_view number = text;
  // from_chars refuses a leading '+'; strtod, whose syntax this follows, takes one.
  if (!number.empty() && number[0] == '+' && number.size() > 1 && number[1] != '-')
    number.remove_prefix(1);
  F value{};
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec == std::errc::invalid_argument || end != number.data() + number.size())
    return fail(cat(quote(text), " is not a number (decimal, inf or nan)"));
  if (ec == std::errc::result_out_of_range)
    return fail(cat(text, " is out of range for ", t.name));
  std::memcpy(out, &value, sizeof value);
  return {};
}

Status encode_scalars(std::string_view values, const ScalarInfo &t, std::vector<uint8_t> &out) {
  size_t index = 0;
  for (size_t start = 0;; ++index) {
    const size_t comma = values.find(',', start);
    const std::string_view element =
        values.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (element.empty())
      return fail(values.empty() ? cat("no ", t.name, " value")
                                 : cat("element ", index + 1, " is empty"));
    const size_t at = out.size();
    out.resize(at + t.size);
    Status s = !t.is_float                 ? encode_integer(element, t, out.data() + at)
               : t.type == ScalarType::f32 ? encode_float<float>(element, t, out.data() + at)
                                           : encode_float<double>(element, t, out.data() + at);
    if (!s)
      return s;
    if (comma == std::string_view::npos)
      return {};
    start = comma + 1;
  }
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

Status encode_hex(std::string_view digits, std::vector<uint8_t> &out) {
  if (digits.size() % 2 != 0)
    return fail(cat("odd number of hex digits (", digits.size(), ")"));
  for (size_t i = 0; i < digits.size(); i += 2) {
    const int hi = hex_digit_value(digits[i]), lo = hex_digit_value(digits[i + 1]);
    if (hi < 0 || lo < 0) {
      const size_t bad = hi < 0 ? i : i + 1;
      return fail(cat(quote(digits.substr(bad, 1)), " at offset ", bad, " is not a hex digit"));
    }
    out.push_back(uint8_t(hi << 4 | lo));
  }
  return {};
}

// Appends the file's bytes, reading at most `room` bytes of it.
Status append_file(const std::string &path, size_t room, std::vector<uint8_t> &out) {
  if (path.empty())
    return fail("no file name after '@'");
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat could
  // tell it is not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return fail(cat("cannot open ", quote(path), ": ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(cat("cannot stat ", quote(path), ": ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode))
    return fail(cat(quote(path), " is not a regular file"));
  if (uintmax_t(st.st_size) > room)
    return fail(cat(quote(path), " is ", uintmax_t(st.st_size), " bytes; only ", room, " fit"));
  const size_t size = size_t(st.st_size), at = out.size();
  // One byte more than fstat said, so that a file that grew meanwhile is caught, not cut short.
  out.resize(at + size + 1);
  size_t got = 0;
  while (got < size + 1) {
    const ssize_t n = ::read(fd, out.data() + at + got, size + 1 - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      out.resize(at);
      return fail(cat("cannot read ", quote(path), ": ", std::strerror(errno)));
    }
    if (n == 0)
      break;
    got += size_t(n);
  }
  if (got != size) {
    out.resize(at);
    return fail(cat(quote(path), " changed size while it was read"));
  }
  out.resize(at + size);
  return {};
}

// The bytes of one value in argument syntax, appended to `out`; `out` is unchanged on failure.
Status append_value(std::string_view spec, std::vector<uint8_t> &out, size_t max_payload) {
  const size_t before = out.size();
  if (before > max_payload)
    return fail(cat("the payload is already ", before, " bytes, over the limit of ", max_payload));
  if (!spec.empty() && spec[0] == '@')
    return append_file(std::string(spec.substr(1)), max_payload - before, out);
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos)
    return fail("expected TYPE:VALUE or @FILE");
  const std::string_view type = spec.substr(0, colon), value = spec.substr(colon + 1);
  Status s;
  if (type == "hex") {
    s = encode_hex(value, out);
  } else if (type == "str") {
    out.insert(out.end(), value.begin(), value.end());
  } else if (std::optional<ScalarType> scalar = parse_scalar_type(type)) {
    s = encode_scalars(value, info(*scalar), out);
  } else {
    s = fail(cat("unknown type ", quote(type),
                 " (expected i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, hex, str or @FILE)"));
  }
  if (s && out.size() > max_payload)
    s = fail(cat("the payload would be ", out.size(), " bytes, over the limit of ", max_payload));
  if (!s)
    out.resize(before);
  return s;
}

bool is_c_identifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9'))
    return false;
  for (char c : name)
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
      return false;
  return true;
}

template <class T> T load(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void append_scalar_text(ScalarType type, const uint8_t *p, std::string &text) {
  char buf[64];
  std::to_chars_result r{};
  char *const end = buf + sizeof buf;
  switch (type) {
  case ScalarType::i8:
    r = std::to_chars(buf, end, load<int8_t>(p));
    break;
  case ScalarType::i16:
    r = std::to_chars(buf, end, load<int16_t>(p));
    break;
  case ScalarType::i32:
    r = std::to_chars(buf, end, load<int32_t>(p));
    break;
  case ScalarType::i64:
    r = std::to_chars(buf, end, load<int64_t>(p));
    break;
  case ScalarType::u8:
    r = std::to_chars(buf, end, load<uint8_t>(p));
    break;
  case ScalarType::u16:
    r = std::to_chars(buf, end, load<uint16_t>(p));
    break;
  case ScalarType::u32:
    r = std::to_chars(buf, end, load<uint32_t>(p));
    break;
  case ScalarType::u64:
    r = std::to_chars(buf, end, load<uint64_t>(p));
    break;
  case ScalarType::f32:
    r = std::to_chars(buf, end, load<float>(p));
    break;
  case ScalarType::f64:
    r = std::to_chars(buf, end, load<double>(p));
    break;
  }
  text.append(buf, r.ptr);
}

// Splits a --calls line into tokens, with quotes removed; stops at a comment.
Expected<std::vector<std::string>> split_call_line(std::string_view line) {
  std::vector<std::string> tokens;
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  size_t i = 0;
  while (true) {
    while (i < line.size() && blank(line[i]))
      ++i;
    if (i == line.size() || line[i] == '#')
      return tokens;
    std::string token;
    while (i < line.size() && !blank(line[i])) {
      const char c = line[i++];
      if (c != '\'' && c != '"') {
        token += c;
        continue;
      }
      const size_t opened = i - 1;
      while (i < line.size() && line[i] != c) {
        if (c == '"' && line[i] == '\\' && i + 1 < line.size() &&
            (line[i + 1] == '"' || line[i + 1] == '\\'))
          ++i;
        token += line[i++];
      }
      if (i == line.size())
        return fail(cat("unterminated ", c, " quote at column ", opened + 1));
      ++i;
    }
    tokens.push_back(std::move(token));
  }
}

} // namespace

std::optional<ScalarType> parse_scalar_type(std::string_view name) {
  for (const ScalarInfo &t : kScalars)
    if (name == t.name)
      return t.type;
  return std::nullopt;
}

const char *scalar_type_name(ScalarType type) {
  return info(type).name;
}

size_t scalar_type_size(ScalarType type) {
  return info(type).size;
}

Status append_arg(std::string_view spec, std::vector<uint8_t> &out, size_t max_payload) {
  Status s = append_value(spec, out, max_payload);
  if (!s)
    return make_error("", "argument ", quote(spec), ": ", s.error().message);
  return {};
}

Expected<std::vector<uint8_t>> encode_args(std::span<const std::string> specs, size_t max_payload) {
  std::vector<uint8_t> payload;
  for (const std::string &spec : specs)
    if (Status s = append_arg(spec, payload, max_payload); !s)
      return std::move(s).take_error();
  return payload;
}

Expected<ResultType> parse_result_type(std::string_view name) {
  if (name == "hex")
    return ResultType{ResultType::Kind::hex};
  if (name == "str")
    return ResultType{ResultType::Kind::str};
  if (name == "raw")
    return ResultType{ResultType::Kind::raw};
  if (std::optional<ScalarType> scalar = parse_scalar_type(name))
    return ResultType{ResultType::Kind::scalars, *scalar};
  return make_error("", "unknown result type ", quote(name),
                    " (expected i8, i16, i32, i64, u8, u16, u32, u64, f32, f64, hex, str or raw)");
}

Expected<std::string> decode_result(const ResultType &type, std::span<const uint8_t> result) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string text;
  switch (type.kind) {
  case ResultType::Kind::raw:
    text.assign(result.begin(), result.end());
    break;
  case ResultType::Kind::hex:
    for (uint8_t b : result) {
      text += kHexDigits[b >> 4];
      text += kHexDigits[b & 15];
    }
    break;
  case ResultType::Kind::str:
    for (uint8_t b : result) {
      if (b == '\\') {
        text += "\\\\";
      } else if (b >= 0x20 && b < 0x7f) {
        text += char(b);
      } else {
        text += "\\x";
        text += kHexDigits[b >> 4];
        text += kHexDigits[b & 15];
      }
    }
    break;
  case ResultType::Kind::scalars: {
    const ScalarInfo &t = info(type.scalar);
    if (result.size() % t.size != 0)
      return make_error("", "the result's ", result.size(), " bytes are not a whole number of ",
                        t.name, " values (", t.size, " bytes each)");
    for (size_t at = 0; at < result.size(); at += t.size) {
      if (at != 0)
        text += ',';
      append_scalar_text(type.scalar, result.data() + at, text);
    }
    break;
  }
  }
  return text;
}

Expected<GlobalValue> parse_global(std::string_view text, size_t max_bytes) {
  const size_t equals = text.find('=');
  const std::string_view name = text.substr(0, equals);
  if (equals == std::string_view::npos)
    return make_error("", "global ", quote(text), ": expected NAME=TYPE:VALUE or NAME=@FILE");
  if (!is_c_identifier(name))
    return make_error("", "global ", quote(text), ": ", quote(name), " is not a C identifier");
  GlobalValue global{std::string(name), {}};
  if (Status s = append_value(text.substr(equals + 1), global.bytes, max_bytes); !s)
    return make_error("", "global ", quote(text), ": ", s.error().message);
  return global;
}

Expected<std::optional<CallLine>> parse_call_line(std::string_view line, size_t line_number,
                                                  std::string_view source, size_t max_payload) {
  const auto line_error = [&](const std::string &message) {
    return make_error(std::string(source), "line ", line_number, ": ", message);
  };
  Expected<std::vector<std::string>> tokens = split_call_line(line);
  if (!tokens)
    return line_error(tokens.error().message);
  if (tokens->empty())
    return std::optional<CallLine>();
  CallLine call;
  call.handler = (*tokens)[0];
  if (!is_c_identifier(call.handler))
    return line_error(cat(quote(call.handler), " is not a handler name (a C identifier)"));
  for (size_t i = 1; i < tokens->size(); ++i) {
    const std::string &token = (*tokens)[i];
    if (token == "--result") {
      if (call.result)
        return line_error("--result given twice");
      if (i + 1 == tokens->size())
        return line_error("--result needs a type");
      Expected<ResultType> type = parse_result_type((*tokens)[++i]);
      if (!type)
        return line_error(type.error().message);
      call.result = *type;
    } else if (!token.empty() && token[0] == '-') {
      return line_error(cat("unknown option '", token, "' (only --result TYPE may follow NAME)"));
    } else if (Status s = append_arg(token, call.payload, max_payload); !s) {
      return line_error(s.error().message);
    }
  }
  return std::optional<CallLine>(std::move(call));
}

} // namespace cudaq_rt
