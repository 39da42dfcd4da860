// The containers of an input file as a manifest describes them: cudaq-rt-pack reads its inputs
// this way, and cudaq-rt-link reads an installed bridge library's hooks the same way.
#pragma once

#include "formats/fatbin.h"
#include "formats/input_file.h"
#include "package/manifest.h"

#include <vector>

namespace cudaq_rt {

EntryRecord entry_record(const Entry &e);
// No origins yet. `digest` is the container's SHA-256, which the caller has computed already.
ContainerRecord container_record(const Container &c, const Digest &digest, Role role,
                                 const std::string &bridge);

struct UnitContainer {
  Container container;    // views the input's mapping
  ContainerRecord record; // with its one origin: source `source`, this unit, its index
};

// Splits one code unit's __nv_relfatbin (or a raw .fatbin file) into containers by their header
// sizes. Nothing is hashed yet: a header that claims more than the file holds is found first.
Expected<std::vector<Container>> split_unit(const InputFile &file, const CodeUnit &unit);
// Hashes a container and describes it, with its origin: input `source` (the index in the
// manifest's sources), archive `member`, position `index` in its section.
ContainerRecord describe_container(const Container &c, size_t source, const std::string &member,
                                   size_t index, Role role, const std::string &bridge);
// Both, for one unit.
Expected<std::vector<UnitContainer>> read_unit_containers(const InputFile &file,
                                                          const CodeUnit &unit, size_t source,
                                                          Role role, const std::string &bridge);

} // namespace cudaq_rt
