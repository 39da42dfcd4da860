#include "formats/export_records.h"

#include "cudaq_rt/exports.h"

#include <cstring>

namespace cudaq_rt {

const char *export_kind_name(ExportKind k) {
  switch (k) {
  case ExportKind::handler:
    return "handler";
  case ExportKind::dispatch_kernel:
    return "dispatch-kernel";
  case ExportKind::global:
    return "global";
  case ExportKind::bridge_hooks:
    return "bridge-hooks";
  }
  return "?";
}

bool is_c_identifier(std::string_view name) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (name.empty() || !alpha(name[0]))
    return false;
  for (char c : name)
    if (!alpha(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

std::string handler_symbol(const std::string &name) {
  return CUDAQ_RT_HANDLER_SYMBOL_PREFIX + name;
}

std::string handler_call_symbol(const std::string &name) {
  return CUDAQ_RT_HANDLER_CALL_PREFIX + name;
}

Expected<std::vector<ExportRecord>> parse_export_records(std::span<const uint8_t> section,
                                                         const std::string &subject) {
  std::vector<ExportRecord> out;
  constexpr size_t size = sizeof(cudaq_rt_export_record);
  size_t at = 0;
  while (at < section.size()) {
    size_t remain = section.size() - at;
    uint32_t magic = 0;
    if (remain >= 4)
      std::memcpy(&magic, section.data() + at, 4);
    if (magic != CUDAQ_RT_EXPORT_MAGIC) {
      // The linker may pad between translation units' records; padding is zero.
      if (section[at] != 0)
        return make_error(subject,
                          "section " CUDAQ_RT_EXPORTS_SECTION ": no export record at "
                          "offset ",
                          hex(at), " (bad magic)");
      ++at;
      continue;
    }
    std::string where = cat("section " CUDAQ_RT_EXPORTS_SECTION ": record at offset ", hex(at));
    if (remain < size)
      return make_error(subject, where, " is truncated: ", remain, " of ", size, " bytes");
    cudaq_rt_export_record r;
    std::memcpy(&r, section.data() + at, size);
    if (r.version < CUDAQ_RT_EXPORT_OLDEST_VERSION || r.version > CUDAQ_RT_EXPORT_VERSION)
      return make_error(subject, where, " has version ", r.version, "; this cudaq-rt reads ",
                        "versions ", CUDAQ_RT_EXPORT_OLDEST_VERSION, " to ",
                        CUDAQ_RT_EXPORT_VERSION);
    if (r.name_size == 0 || r.name_size >= CUDAQ_RT_EXPORT_NAME_CAPACITY ||
        r.name[r.name_size] != '\0' || std::strlen(r.name) != r.name_size ||
        !is_c_identifier(std::string_view(r.name, r.name_size)))
      return make_error(subject, where, " has a malformed name");
    ExportRecord e;
    e.name.assign(r.name, r.name_size);
    if (r.kind == CUDAQ_RT_EXPORT_HANDLER_KIND ||
        r.kind == CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND) {
      e.kind = ExportKind::handler;
      e.concurrent = r.kind == CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND;
      e.direct = r.version >= 2;
      e.function_id = cudaq_rt_function_id(e.name.c_str());
      if (r.function_id != e.function_id)
        return make_error(subject, where, ": handler '", e.name, "' records function_id ",
                          hex(r.function_id), " but FNV-1a of its name is ", hex(e.function_id));
    } else if (r.kind == CUDAQ_RT_EXPORT_DISPATCH_KERNEL_KIND) {
      e.kind = ExportKind::dispatch_kernel;
    } else if (r.kind == CUDAQ_RT_EXPORT_GLOBAL_KIND) {
      e.kind = ExportKind::global;
    } else if (r.kind == CUDAQ_RT_EXPORT_BRIDGE_HOOKS_KIND) {
      e.kind = ExportKind::bridge_hooks;
    } else {
      return make_error(subject, where, " has unknown kind ", r.kind);
    }
    out.push_back(std::move(e));
    at += size;
  }
  return out;
}

} // namespace cudaq_rt
