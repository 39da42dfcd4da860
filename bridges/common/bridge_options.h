// A bridge instance's options: the KEY=VALUE[,KEY=VALUE...] text that cudaq_rt_bridge_ops::create
// and instance_config take (--bridge-arg), parsed the same way by every bridge of this tree. Keys
// keep the order they were given in and are given once; a value may be empty and may hold '='
// (the first '=' ends the key); nothing is trimmed; "" is no options.
//
// Header-only and needing nothing but the C++ library and bridge_plugin.h: the bridges are
// shared libraries built without the runtime (bench/ builds variants of them from their sources
// alone), and each compiles this in with its own hidden symbols.
#ifndef CUDAQ_RT_BRIDGE_OPTIONS_H
#define CUDAQ_RT_BRIDGE_OPTIONS_H

#include "cudaq_rt/bridge_plugin.h"

#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cudaq_rt {

struct BridgeOption {
  std::string key;
  std::string value;
};

class BridgeOptions {
public:
  // Parses `text` into these options (replacing what they held); returns why it cannot, in one
  // line, or empty.
  std::string parse(std::string_view text) {
    constexpr const char *syntax = ": options are KEY=VALUE[,KEY=VALUE...]";
    items_.clear();
    if (text.empty())
      return {};
    for (;;) {
      const size_t comma = text.find(',');
      const std::string_view item = text.substr(0, comma);
      const size_t eq = item.find('=');
      std::string why;
      if (item.empty())
        why = std::string("empty option (a comma too many)") + syntax;
      else if (eq == std::string_view::npos)
        why = "option '" + std::string(item) + "' has no '='" + syntax;
      else if (eq == 0)
        why = "option '" + std::string(item) + "' has no key" + syntax;
      else if (find(item.substr(0, eq)))
        why = "option '" + std::string(item.substr(0, eq)) + "' is given twice";
      if (!why.empty()) {
        items_.clear();
        return why;
      }
      items_.push_back({std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))});
      if (comma == std::string_view::npos)
        return {};
      text.remove_prefix(comma + 1);
    }
  }

  const std::vector<BridgeOption> &items() const { return items_; }

  // The value of `key`, or nullptr.
  const std::string *find(std::string_view key) const {
    for (const BridgeOption &o : items_)
      if (o.key == key)
        return &o.value;
    return nullptr;
  }

  // Replaces the value of `key` where it stands, or appends key=value. The value holds no ','.
  void set(std::string_view key, std::string value) {
    for (BridgeOption &o : items_)
      if (o.key == key) {
        o.value = std::move(value);
        return;
      }
    items_.push_back({std::string(key), std::move(value)});
  }

  // The options as text, in their order: what parse() reads back into the same options.
  std::string text() const {
    std::string out;
    for (const BridgeOption &o : items_)
      out += (out.empty() ? "" : ",") + o.key + "=" + o.value;
    return out;
  }

private:
  std::vector<BridgeOption> items_;
};

// Hands `text` to the launcher through instance_config's buffer: the text and its NUL when they
// fit in `capacity` bytes, else AGAIN with `out` untouched; *needed is their size either way.
inline cudaq_rt_bridge_result write_instance_config(const std::string &text, char *out,
                                                    size_t capacity, size_t *needed) {
  *needed = text.size() + 1;
  if (capacity < *needed)
    return CUDAQ_RT_BRIDGE_AGAIN;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return CUDAQ_RT_BRIDGE_OK;
}

} // namespace cudaq_rt

#endif // CUDAQ_RT_BRIDGE_OPTIONS_H
