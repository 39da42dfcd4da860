// libFuzzer target for the --calls line parser (runtime/src/command/request_args.cpp): the lines come from
// a file or a pipe that may hold anything. A line that parses names a handler that is a C
// identifier and carries no more payload than the limit allows.
#include "command/request_args.h"

#include <cstdlib>
#include <string_view>

using namespace cudaq_rt;

namespace {
constexpr size_t kMaxPayload = 1000;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view line(reinterpret_cast<const char *>(data), size);
  Expected<std::optional<CallLine>> call = parse_call_line(line, 1, "fuzz", kMaxPayload);
  if (!call || !call->has_value())
    return 0;
  const CallLine &c = **call;
  if (c.payload.size() > kMaxPayload || c.handler.empty() ||
      (c.handler[0] >= '0' && c.handler[0] <= '9'))
    std::abort();
  for (char ch : c.handler)
    if (!(ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9')))
      std::abort();
  return 0;
}
