// The value syntax of cudaq-rt-run: typed arguments encoded into a request's payload (--arg,
// --global, the lines of --calls) and a response's result decoded for printing (--result). The
// syntax itself is stated at the top of request_args.cpp and in cudaq-rt-run(1).
#pragma once

#include "load/global_value.h"

#include "cudaq_rt/error.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

// The numeric element types an argument or a result may hold, little-endian.
enum class ScalarType : uint8_t { i8, i16, i32, i64, u8, u16, u32, u64, f32, f64 };

// `i8`, ..., `f64`; nullopt for any other name.
std::optional<ScalarType> parse_scalar_type(std::string_view name);
const char *scalar_type_name(ScalarType type);
size_t scalar_type_size(ScalarType type);

// Appends the bytes of one argument `spec` (`i32:1,2,-3`, `f64:1.5`, `hex:0a0b`, `str:text`,
// `@file`) to `out`. Fails, leaving `out` as it was, on a bad spec or when `out` would grow past
// `max_payload` bytes (a file is never read past that bound). Errors read `argument 'SPEC': ...`.
Status append_arg(std::string_view spec, std::vector<uint8_t> &out, size_t max_payload);

// The payload of a request: every spec appended in order.
Expected<std::vector<uint8_t>> encode_args(std::span<const std::string> specs, size_t max_payload);

// How --result prints a response's result bytes.
struct ResultType {
  enum class Kind : uint8_t { scalars, hex, str, raw };
  Kind kind = Kind::hex;
  ScalarType scalar = ScalarType::u8; // for Kind::scalars only

  friend bool operator==(const ResultType &, const ResultType &) = default;
};

// A scalar type name (an array of that type), `hex`, `str` or `raw`.
Expected<ResultType> parse_result_type(std::string_view name);

// The result as text: scalars comma-separated without spaces (floats in the shortest form that
// reads back to the same value), lowercase hex, or the bytes as text with `\\` and non-printable
// bytes escaped (`\xNN`). `raw` returns the bytes as they are, for writing to stdout. Fails when
// the size is not a whole number of scalars.
Expected<std::string> decode_result(const ResultType &type, std::span<const uint8_t> result);

// `--global NAME=SPEC`: the bytes to write into the __device__ global NAME before launch
// (GlobalValue, load/server.h). NAME is a C identifier; SPEC has the syntax of one argument. Errors read `global 'TEXT': ...`.
Expected<GlobalValue> parse_global(std::string_view text, size_t max_bytes);

// One request of a --calls file: `NAME [SPEC ...] [--result TYPE]`.
struct CallLine {
  std::string handler;
  std::vector<uint8_t> payload;
  std::optional<ResultType> result;
};

// Parses line `line_number` (1-based) of the --calls input `source` (a path, or `-` for stdin).
// nullopt for a blank line or a comment. Errors have `source` as their subject and read
// `line N: ...`.
Expected<std::optional<CallLine>> parse_call_line(std::string_view line, size_t line_number,
                                                  std::string_view source, size_t max_payload);

} // namespace cudaq_rt
