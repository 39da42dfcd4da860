#include "package/containers.h"

#include "base/digest.h"

namespace cudaq_rt {

EntryRecord entry_record(const Entry &e) {
  EntryRecord r;
  r.kind = entry_kind_name(e.kind);
  r.kind_code = e.kind;
  r.arch = e.arch;
  r.version_major = e.version_major;
  r.version_minor = e.version_minor;
  r.flags = e.flags;
  r.compression = compression_name(e.compression);
  r.payload_size = e.payload_size;
  r.compressed_size = e.compressed_size;
  r.uncompressed_size = e.uncompressed_size;
  r.options = e.options;
  r.name = e.name;
  return r;
}

ContainerRecord container_record(const Container &c, const Digest &digest, Role role,
                                 const std::string &bridge) {
  ContainerRecord r;
  r.digest = digest;
  r.size = c.bytes.size();
  r.role = role;
  r.bridge = bridge;
  for (const Entry &e : c.entries)
    r.entries.push_back(entry_record(e));
  return r;
}

Expected<std::vector<Container>> split_unit(const InputFile &file, const CodeUnit &unit) {
  const char *what = file.kind() == InputKind::fatbin ? "fatbin" : "section __nv_relfatbin";
  return split_containers(unit.relfatbin, file.unit_name(unit), what);
}

ContainerRecord describe_container(const Container &c, size_t source, const std::string &member,
                                   size_t index, Role role, const std::string &bridge) {
  ContainerRecord r = container_record(c, sha256(c.bytes), role, bridge);
  r.origins.push_back({source, member, c.offset, index});
  return r;
}

Expected<std::vector<UnitContainer>> read_unit_containers(const InputFile &file,
                                                          const CodeUnit &unit, size_t source,
                                                          Role role, const std::string &bridge) {
  auto containers = split_unit(file, unit);
  if (!containers)
    return std::move(containers).take_error();
  std::vector<UnitContainer> out;
  out.reserve(containers->size());
  for (size_t k = 0; k < containers->size(); ++k) {
    const Container &c = (*containers)[k];
    out.push_back({c, describe_container(c, source, unit.member, k, role, bridge)});
  }
  return out;
}

} // namespace cudaq_rt
