// libFuzzer target for the .cudaq_rt_exports record parser
// (runtime/src/formats/export_records.cpp): the section comes from binaries we did not write. Every
// record it accepts must name a handler whose function_id is the FNV-1a of its name, or a dispatch
// kernel.
#include "cudaq_rt/exports.h"
#include "formats/export_records.h"

#include <cstdlib>

using namespace cudaq_rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  auto records = parse_export_records({data, size}, "fuzz");
  if (!records)
    return 0;
  for (const ExportRecord &r : *records) {
    if (r.name.empty() || r.name.size() >= CUDAQ_RT_EXPORT_NAME_CAPACITY ||
        r.name.find('\0') != std::string::npos)
      std::abort();
    if (r.kind == ExportKind::handler && r.function_id != cudaq_rt_function_id(r.name.c_str()))
      std::abort();
  }
  return 0;
}
