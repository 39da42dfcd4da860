// Tool output (tool_output.h).
#include "base/tool_output.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace cudaq_rt {

int ToolOutput::fail(const Error &e) {
  errors_.push_back(e.str());
  err(cat(tool_, ": error: ", e.str(), "\n"));
  return 1;
}

void ToolOutput::out_json(const nlohmann::json &document) {
  nlohmann::json versioned = document;
  if (versioned.is_object() && !versioned.contains("format_version"))
    versioned["format_version"] = json_format_version;
  out(versioned.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void ToolOutput::warn(std::string_view message) {
  err(cat(tool_, ": warning: ", message, "\n"));
}

void ToolOutput::note(std::string_view message) {
  err(cat(tool_, ": note: ", message, "\n"));
}

int json_failure(ToolOutput &output, int status, const char *subject_key,
                 const std::string &subject, const std::string &usage_error) {
  if (status == 0 || output.wrote_out())
    return status;
  nlohmann::json doc = {{"error", usage_error.empty() && !output.errors().empty()
                                      ? output.errors().front()
                                      : usage_error},
                        {"exit_status", status}};
  if (!subject.empty())
    doc[subject_key] = subject;
  output.out_json(doc);
  return status;
}

void StdioToolOutput::write_out(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

void StdioToolOutput::err(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stderr);
}

void StdioToolOutput::flush() {
  std::fflush(stdout);
  std::fflush(stderr);
}

} // namespace cudaq_rt
