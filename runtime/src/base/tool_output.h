// Where a tool's library call writes: stdout for what the user asked for (a report, a listing,
// the --json document), stderr for diagnostics in the one form every cudaq-rt tool uses
// (`tool: error: ...`, `tool: warning: ...`, `tool: note: ...`). The tools pass their stdio; tests
// pass strings and read what a command said without a terminal.
#pragma once

#include "cudaq_rt/error.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace cudaq_rt {

class ToolOutput {
public:
  explicit ToolOutput(std::string tool) : tool_(std::move(tool)) {}
  virtual ~ToolOutput() = default;

  // What the user asked for, on stdout; wrote_out() says whether anything went there yet.
  void out(std::string_view text) {
    wrote_out_ = wrote_out_ || !text.empty();
    write_out(text);
  }
  bool wrote_out() const { return wrote_out_; }
  virtual void err(std::string_view text) = 0;
  // A reader may be waiting for what was written so far.
  virtual void flush() = 0;

  const std::string &tool() const { return tool_; }
  // A --json document on stdout: indented, invalid UTF-8 in names replaced, one newline after.
  // Every document carries "format_version" (json_format_version, unless it has its own): the
  // version of the JSON Schemas in schemas/ it follows, raised when a field changes meaning or
  // goes away (a field added keeps it).
  static constexpr int json_format_version = 1;
  void out_json(const nlohmann::json &document);
  // One line each on stderr; fail returns the failure exit status, 1.
  int fail(const Error &e);
  // What fail() has said, in order (for a --json error document).
  const std::vector<std::string> &errors() const { return errors_; }
  void warn(std::string_view message);
  void note(std::string_view message);

protected:
  virtual void write_out(std::string_view text) = 0;

private:
  std::string tool_;
  std::vector<std::string> errors_;
  bool wrote_out_ = false;
};

// With --json, a failure that printed no document prints one on stdout:
// {"package" or "input": subject, "error": the first error's line (or `usage_error`),
// "exit_status": status} (schemas/error.schema.json), so that a script reading stdout always
// gets one document. Returns `status`.
int json_failure(ToolOutput &output, int status, const char *subject_key,
                 const std::string &subject, const std::string &usage_error = "");

// The process's stdout and stderr.
class StdioToolOutput final : public ToolOutput {
public:
  using ToolOutput::ToolOutput;
  void err(std::string_view text) override;
  void flush() override;

protected:
  void write_out(std::string_view text) override;
};

// Everything kept in two strings; `flushes` counts the points a reader could have seen it.
class StringToolOutput : public ToolOutput {
public:
  using ToolOutput::ToolOutput;
  std::string out_text, err_text;
  int flushes = 0;
  void err(std::string_view text) override { err_text += text; }
  void flush() override { ++flushes; }

protected:
  void write_out(std::string_view text) override { out_text += text; }
};

} // namespace cudaq_rt
