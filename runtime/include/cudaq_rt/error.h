// Errors are values: library functions return Expected<T> and only the tool drivers print, once,
// as `tool: error: 'subject': message`.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace cudaq_rt {

// Names in messages and listings (paths, archive members, names read from manifests) are bytes
// from users and from files we did not write. Printed raw, a newline would split a one-line
// message and a terminal escape sequence would be obeyed rather than shown. escape() keeps
// printable ASCII and well-formed UTF-8 as they are and writes everything else as C escapes:
// \\, \n, \r, \t, and \xHH for other control characters (C1 ones too, byte by byte) and for
// bytes that are not UTF-8.
// The length of the well-formed UTF-8 sequence at s[i] (its lead byte's length, continuation
// bytes, no overlong forms, no surrogates, nothing past U+10FFFF: RFC 3629), or 0.
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80)
    return 1;
  size_t n = c >= 0xc2 && c <= 0xdf   ? 2
             : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4
                                      : 0;
  bool ok = n != 0 && i + n <= s.size();
  for (size_t k = 1; ok && k < n; ++k)
    ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
  if (ok && n > 2) {
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0) && !(c == 0xf0 && c1 < 0x90) &&
         !(c == 0xf4 && c1 >= 0x90);
  }
  return ok ? n : 0;
}

inline bool valid_utf8(std::string_view s) {
  for (size_t i = 0, n; i < s.size(); i += n)
    if ((n = utf8_sequence_length(s, i)) == 0)
      return false;
  return true;
}

inline std::string escape(std::string_view s, char quote_char = 0) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  auto byte = [&](unsigned char c) {
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\\' || (quote_char && c == static_cast<unsigned char>(quote_char)))
        out += {'\\', static_cast<char>(c)};
      else if (c == '\n')
        out += "\\n";
      else if (c == '\r')
        out += "\\r";
      else if (c == '\t')
        out += "\\t";
      else if (c < 0x20 || c == 0x7f)
        byte(c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    const bool ok = n != 0;
    bool c1_control = ok && n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0;
    if (!ok) {
      byte(c);
      ++i;
    } else if (c1_control) {
      byte(c);
      byte(static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

// A name in single quotes, escaped as above, a quote inside it as \'.
inline std::string quote(std::string_view s) {
  return "'" + escape(s, '\'') + "'";
}

// What went wrong, and about what. `subject` is usually a path (quoted and escaped when printed);
// `message` says what a user can act on, with the section and offset where they apply; names
// inside it go through quote().
struct Error {
  std::string subject;
  std::string message;

  // The one-line form the tools print after `tool: error: `.
  std::string str() const { return subject.empty() ? message : quote(subject) + ": " + message; }
};

// Streams its arguments into one string (g++ 12 has no <format>).
template <class... Args> std::string cat(Args &&...args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// 0x-prefixed lowercase hex, for offsets in messages.
inline std::string hex(uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

template <class... Args> Error make_error(std::string subject, Args &&...message) {
  return Error{std::move(subject), cat(std::forward<Args>(message)...)};
}

// A value or an Error, in the spirit of llvm::Expected but copyable and without the
// must-check-in-debug machinery.
template <class T> class [[nodiscard]] Expected {
public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  explicit operator bool() const { return v_.index() == 0; }
  T &operator*() & { return std::get<0>(v_); }
  const T &operator*() const & { return std::get<0>(v_); }
  T &&operator*() && { return std::get<0>(std::move(v_)); }
  T *operator->() { return &std::get<0>(v_); }
  const T *operator->() const { return &std::get<0>(v_); }
  const Error &error() const { return std::get<1>(v_); }
  Error take_error() && { return std::get<1>(std::move(v_)); }

private:
  std::variant<T, Error> v_;
};

// For functions that return nothing but can fail.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(Error error) : e_(std::move(error)) {}
  static Status ok() { return {}; }
  explicit operator bool() const { return !e_; }
  const Error &error() const { return *e_; }
  Error take_error() && { return std::move(*e_); }

private:
  std::optional<Error> e_;
};

} // namespace cudaq_rt
