// ELF sections through LLVM libObject: section headers survive `strip`, so everything we need
// (__nv_relfatbin, .nv_fatbin, .cudaq_rt_exports) is found by section name, never by symbol.
#include "formats/input_file.h"

#include "base/atomic_file.h"
#include "formats/fatbin.h"

#include <llvm/Object/Archive.h>
#include <llvm/Object/Binary.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

namespace cudaq_rt {
namespace {

constexpr llvm::StringLiteral relfatbin_section = "__nv_relfatbin";
constexpr llvm::StringLiteral nv_fatbin_section = ".nv_fatbin";
constexpr llvm::StringLiteral exports_section = ".cudaq_rt_exports";

std::string take_message(llvm::Error e) {
  return llvm::toString(std::move(e));
}

std::span<const uint8_t> as_span(llvm::StringRef s) {
  return {reinterpret_cast<const uint8_t *>(s.data()), s.size()};
}

// Fills `unit` from one ELF image.
Status read_elf(const llvm::object::ELFObjectFileBase &elf, const std::string &name,
                CodeUnit &unit) {
  for (const llvm::object::SectionRef &sec : elf.sections()) {
    llvm::Expected<llvm::StringRef> sec_name = sec.getName();
    if (!sec_name)
      return make_error(name, "malformed ELF: ", take_message(sec_name.takeError()));
    bool relfatbin = *sec_name == relfatbin_section, exports = *sec_name == exports_section;
    if (*sec_name == nv_fatbin_section)
      unit.has_nv_fatbin = true;
    if (!relfatbin && !exports)
      continue;
    llvm::Expected<llvm::StringRef> contents = sec.getContents();
    if (!contents)
      return make_error(name, "section ", sec_name->str(), ": ",
                        take_message(contents.takeError()));
    if (relfatbin) {
      unit.has_relfatbin = true;
      unit.relfatbin = as_span(*contents);
    } else {
      unit.exports = as_span(*contents);
    }
  }
  return Status::ok();
}

InputKind elf_kind(const llvm::object::ELFObjectFileBase &elf) {
  switch (elf.getEType()) {
  case llvm::ELF::ET_EXEC:
    return InputKind::executable;
  case llvm::ELF::ET_DYN:
    // PIE executables are ET_DYN too; they name a program interpreter, libraries do not.
    for (const llvm::object::SectionRef &sec : elf.sections())
      if (auto name = sec.getName(); name && *name == ".interp")
        return InputKind::executable;
      else if (!name)
        llvm::consumeError(name.takeError());
    return InputKind::shared_library;
  default:
    return InputKind::object;
  }
}

} // namespace

const char *input_kind_name(InputKind k) {
  switch (k) {
  case InputKind::executable:
    return "executable";
  case InputKind::shared_library:
    return "shared-library";
  case InputKind::object:
    return "object";
  case InputKind::archive:
    return "archive";
  case InputKind::fatbin:
    return "fatbin";
  }
  return "object";
}

struct InputFile::Mapping {
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  // Keep parsed binaries alive: their section views point into `buffer`.
  std::unique_ptr<llvm::object::Binary> binary;
  std::vector<std::unique_ptr<llvm::object::Binary>> members;
};

InputFile::InputFile(InputFile &&) noexcept = default;
InputFile &InputFile::operator=(InputFile &&) noexcept = default;
InputFile::~InputFile() = default;

std::span<const uint8_t> InputFile::bytes() const {
  return as_span(map_->buffer->getBuffer());
}

std::string InputFile::unit_name(const CodeUnit &u) const {
  return u.member.empty() ? path_ : cat(path_, "(", u.member, ")");
}

Expected<InputFile> InputFile::open(const std::string &path) {
  // Only a regular file has an end to read to: a FIFO would block the open, a pipe or /dev/zero
  // would be read into memory without bound.
  auto file = RegularFile::open(path, {.follow_symlinks = true});
  if (!file)
    return std::move(file).take_error();
  if (!*file)
    return make_error(path, "cannot open: ", std::strerror(ENOENT));
  std::error_code ec;
  // Taken before the mapping, so that a write in between shows as a changed mtime later.
  auto mtime = std::filesystem::last_write_time(path, ec);
  // IsVolatile=false lets LLVM mmap the file; RequiresNullTerminator=false avoids a copy.
  auto buf = llvm::MemoryBuffer::getOpenFile((*file)->fd(), path, (*file)->size(),
                                             /*RequiresNullTerminator=*/false,
                                             /*IsVolatile=*/false);
  if (!buf)
    return make_error(path, "cannot read: ", buf.getError().message());

  InputFile in;
  in.path_ = path;
  in.mtime_ = mtime;
  in.map_ = std::make_unique<Mapping>();
  in.map_->buffer = std::move(*buf);
  llvm::MemoryBufferRef ref = in.map_->buffer->getMemBufferRef();
  auto data = as_span(ref.getBuffer());

  if (data.size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, data.data(), 4);
    if (magic == fatbin_magic) {
      in.kind_ = InputKind::fatbin;
      CodeUnit u;
      u.relfatbin = data;
      u.has_relfatbin = true;
      in.units_.push_back(u);
      return in;
    }
  }
  if (data.size() < 4 || std::memcmp(data.data(),
                                     "\x7f"
                                     "ELF",
                                     4) != 0) {
    if (data.size() < 8 || std::memcmp(data.data(), "!<arch>\n", 8) != 0)
      return make_error(path, "not an ELF file, a static archive or a fatbin");
  }

  auto bin = llvm::object::createBinary(ref);
  if (!bin) {
    std::string why = take_message(bin.takeError());
    return make_error(path, "truncated or malformed ", data[0] == 0x7f ? "ELF" : "archive",
                      " file: ", why);
  }
  in.map_->binary = std::move(*bin);

  if (auto *archive = llvm::dyn_cast<llvm::object::Archive>(in.map_->binary.get())) {
    in.kind_ = InputKind::archive;
    // Members may share a name (`ar q` appends, it does not replace): those are named NAME#N,
    // N counting the members of that name from 1 in archive order (as `ar N` counts them), so
    // that each unit has a name of its own.
    std::map<std::string, size_t> seen;
    std::vector<size_t> occurrence; // parallel to units_
    llvm::Error err = llvm::Error::success();
    for (const llvm::object::Archive::Child &child : archive->children(err)) {
      auto name = child.getName();
      auto member = child.getMemoryBufferRef();
      if (!name || !member) {
        std::string why = !name ? take_message(name.takeError()) : take_message(member.takeError());
        if (!name && member)
          llvm::consumeError(member.takeError());
        return make_error(path, "malformed archive member: ", why);
      }
      size_t nth = ++seen[name->str()];
      auto mbin = llvm::object::createBinary(*member);
      if (!mbin) {
        // Archives may carry non-object members (documentation, LLVM bitcode); skip those.
        llvm::consumeError(mbin.takeError());
        continue;
      }
      auto *elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(mbin->get());
      if (!elf)
        continue;
      CodeUnit u;
      u.member = name->str();
      if (auto st = read_elf(*elf, cat(path, "(", u.member, ")"), u); !st)
        return std::move(st).take_error();
      in.units_.push_back(u);
      occurrence.push_back(nth);
      in.map_->members.push_back(std::move(*mbin));
    }
    if (err)
      return make_error(path, "malformed archive: ", take_message(std::move(err)));
    for (size_t i = 0; i < in.units_.size(); ++i)
      if (seen[in.units_[i].member] > 1)
        in.units_[i].member += cat("#", occurrence[i]);
    return in;
  }

  auto *elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(in.map_->binary.get());
  if (!elf)
    return make_error(path, "not an ELF file, a static archive or a fatbin");
  in.kind_ = elf_kind(*elf);
  CodeUnit u;
  if (auto st = read_elf(*elf, path, u); !st)
    return std::move(st).take_error();
  in.units_.push_back(u);
  return in;
}

} // namespace cudaq_rt
