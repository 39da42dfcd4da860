// Reads the inputs of cudaq-rt-pack: executables, shared libraries, relocatable objects, static
// archives (every member) and raw .fatbin files. Files are memory-mapped; every span below views
// the mapping, so a section's bytes are copied at most once, when a blob is written.
#pragma once

#include "cudaq_rt/error.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace cudaq_rt {

enum class InputKind { executable, shared_library, object, archive, fatbin };
const char *input_kind_name(InputKind k);

// One ELF image (the file itself, or one archive member), or a raw fatbin file.
struct CodeUnit {
  std::string member;                 // archive member name (NAME#N where names repeat); empty
                                      // for the file itself
  std::span<const uint8_t> relfatbin; // __nv_relfatbin contents (the whole file for .fatbin)
  bool has_relfatbin = false;         // an empty section still counts as present
  bool has_nv_fatbin = false;         // whole-program device code (built without -rdc)
  std::span<const uint8_t> exports;   // .cudaq_rt_exports contents
};

class InputFile {
public:
  static Expected<InputFile> open(const std::string &path);
  InputFile(InputFile &&) noexcept;
  InputFile &operator=(InputFile &&) noexcept;
  ~InputFile();

  const std::string &path() const { return path_; }
  InputKind kind() const { return kind_; }
  std::span<const uint8_t> bytes() const;
  // When the file was last written, as seen when it was opened.
  std::filesystem::file_time_type mtime() const { return mtime_; }
  const std::vector<CodeUnit> &units() const { return units_; }
  // "path" or "path(member)", the way messages and manifests name a unit.
  std::string unit_name(const CodeUnit &u) const;

private:
  struct Mapping;
  InputFile() = default;
  std::string path_;
  InputKind kind_ = InputKind::object;
  std::filesystem::file_time_type mtime_;
  std::unique_ptr<Mapping> map_;
  std::vector<CodeUnit> units_;
};

} // namespace cudaq_rt
