// libFuzzer target for the manifest reader (runtime/src/package/manifest.cpp), the one parser of
// untrusted JSON the tools have: a package can come from anywhere. Besides "no crash, no
// sanitizer report, no exception", it checks what the reader promises: an error is one line
// naming the file; a manifest it accepts writes out as JSON that it reads back to the same
// manifest, with every index in range and one record per container.
#include "package/manifest.h"

#include <cstdlib>
#include <set>
#include <string>

using namespace cudaq_rt;

namespace {

void require(bool ok) {
  if (!ok)
    std::abort();
}

void check_indices(const Manifest &m) {
  std::set<Digest> digests;
  for (const ContainerRecord &c : m.containers) {
    require(digests.insert(c.digest).second);
    for (const Origin &o : c.origins)
      require(o.source < m.sources.size());
  }
  for (const ExportEntry &e : m.exports)
    for (size_t s : e.sources)
      require(s < m.sources.size());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  auto m = Manifest::parse(text, "fuzz/manifest.json");
  if (!m) {
    std::string line = m.error().str();
    require(line.rfind("'fuzz/manifest.json': ", 0) == 0);
    require(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
    return 0;
  }
  check_indices(*m);
  // Written out and read back, it is the same manifest: the writer never produces what the
  // reader refuses (invalid UTF-8 becomes U+FFFD on the first write, so compare from there).
  std::string once = m->to_json_text();
  auto again = Manifest::parse(once, "fuzz/manifest.json");
  require(bool(again));
  require(again->to_json_text() == once);
  return 0;
}
