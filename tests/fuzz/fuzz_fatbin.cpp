// libFuzzer target for the fatbin container and entry walker (runtime/src/formats/fatbin.cpp): the
// bytes of a __nv_relfatbin section come from files we did not write. Besides "no crash, no
// sanitizer report", it checks what the splitter promises: containers lie inside the input, in
// order, each one parses again on its own to the same entries, and every entry lies inside its
// container.
#include "formats/fatbin.h"

#include <cstdlib>

using namespace cudaq_rt;

namespace {

void require(bool ok) {
  if (!ok)
    std::abort();
}

bool same_entries(const Container &a, const Container &b) {
  if (a.entries.size() != b.entries.size())
    return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const Entry &x = a.entries[i], &y = b.entries[i];
    if (x.offset != y.offset || x.kind != y.kind || x.header_size != y.header_size ||
        x.payload_size != y.payload_size || x.arch != y.arch || x.flags != y.flags ||
        x.options != y.options || x.name != y.name)
      return false;
  }
  return true;
}

void check_container(const Container &c) {
  uint64_t end = 0;
  for (const Entry &e : c.entries) {
    require(e.offset >= end);
    require(e.header_size >= entry_base_header_size);
    end = e.offset + e.header_size + e.payload_size;
    require(end <= c.bytes.size());
    require(e.options.size() < e.header_size && e.name.size() < e.header_size);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto split = split_containers(bytes, "fuzz", "section __nv_relfatbin");
  if (split) {
    require(!split->empty());
    uint64_t end = 0;
    for (const Container &c : *split) {
      require(c.offset >= end && c.bytes.data() == data + c.offset);
      end = c.offset + c.bytes.size();
      require(end <= size);
      check_container(c);
      auto again = parse_container(c.bytes, "fuzz", "fatbin");
      require(bool(again) && same_entries(*again, c));
    }
  } else {
    require(!split.error().message.empty());
  }
  auto one = parse_container(bytes, "fuzz", "fatbin");
  if (one) {
    require(one->bytes.size() == size);
    check_container(*one);
  }
  return 0;
}
