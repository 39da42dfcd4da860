// Errors are values: library functions return Expected<T> and only the tool drivers print, once,
// as `tool: error: 'subject': message`.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace cudaq_rt {

// What went wrong, and about what. `subject` is usually a path (quoted when printed); `message`
// says what a user can act on, with the section and offset where they apply.
struct Error {
  std::string subject;
  std::string message;

  // The one-line form the tools print after `tool: error: `.
  std::string str() const { return subject.empty() ? message : "'" + subject + "': " + message; }
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
