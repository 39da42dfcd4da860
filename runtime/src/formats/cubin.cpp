// A cubin is an ELF with e_machine EM_CUDA (190); nvcc 13 writes the SM number in bits 8..15 of
// e_flags (0x6005a04 for sm_90, 0x6006402 for sm_100: measured here).
#include "formats/cubin.h"

#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>

namespace cudaq_rt {

namespace {

using ObjectPtr = std::unique_ptr<llvm::object::ObjectFile>;

// The cubin as a CUDA ELF object (its bytes stay the caller's).
Expected<ObjectPtr> open_cuda_elf(std::span<const uint8_t> cubin, const std::string &subject) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(cubin.data()), cubin.size());
  auto obj = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(bytes, subject));
  if (!obj)
    return make_error(subject,
                      "linked output is not an ELF file: ", llvm::toString(obj.takeError()));
  auto *elf = llvm::dyn_cast<llvm::object::ELF64LEObjectFile>(obj->get());
  if (!elf)
    return make_error(subject, "linked output is not a 64-bit little-endian ELF file");
  if (elf->getELFFile().getHeader().e_machine != llvm::ELF::EM_CUDA)
    return make_error(subject, "linked output is not a CUDA ELF (e_machine ",
                      static_cast<unsigned>(elf->getELFFile().getHeader().e_machine), ")");
  return std::move(*obj);
}

// One defined symbol of a cubin's table (undefined ones are skipped).
struct DefinedSymbol {
  llvm::StringRef name;
  uint8_t type;     // STT_*
  uint32_t flags;   // llvm::object::BasicSymbolRef::SF_*
  uint64_t size;    // st_size
  uint64_t value;   // st_value: in a linked cubin, the offset in its section
  uint32_t section; // st_shndx
};

// Calls `each` for every defined symbol of `elf`; a symbol whose name, flags or section cannot be
// read makes the table malformed.
template <class F>
Status for_each_defined_symbol(const llvm::object::ELF64LEObjectFile &elf,
                               const std::string &subject, F each) {
  for (const llvm::object::ELFSymbolRef &sym : elf.symbols()) {
    auto name = sym.getName();
    auto flags = sym.getFlags();
    auto section = sym.getSection();
    auto value = sym.getValue();
    if (!name || !flags || !section || !value) {
      if (!name)
        llvm::consumeError(name.takeError());
      if (!flags)
        llvm::consumeError(flags.takeError());
      if (!section)
        llvm::consumeError(section.takeError());
      if (!value)
        llvm::consumeError(value.takeError());
      return make_error(subject, "linked output has a malformed symbol table");
    }
    if (*section != elf.section_end())
      each(DefinedSymbol{*name, sym.getELFType(), *flags, sym.getSize(), *value,
                         uint32_t((*section)->getIndex())});
  }
  return Status::ok();
}

} // namespace

Expected<std::vector<std::string>> strong_definitions(std::span<const uint8_t> cubin,
                                                      const std::string &subject) {
  auto obj = open_cuda_elf(cubin, subject);
  if (!obj)
    return std::move(obj).take_error();
  std::vector<std::string> out;
  using llvm::object::BasicSymbolRef;
  Status st = for_each_defined_symbol(
      *llvm::cast<llvm::object::ELF64LEObjectFile>(obj->get()), subject,
      [&](const DefinedSymbol &s) {
        const bool strong =
            (s.flags & BasicSymbolRef::SF_Global) && !(s.flags & BasicSymbolRef::SF_Weak);
        if (strong && !s.name.empty() &&
            (s.type == llvm::ELF::STT_FUNC || s.type == llvm::ELF::STT_OBJECT))
          out.push_back(s.name.str());
      });
  if (!st)
    return st.error();
  return out;
}

Expected<CubinInfo> read_cubin(std::span<const uint8_t> cubin, const std::string &subject) {
  auto obj = open_cuda_elf(cubin, subject);
  if (!obj)
    return std::move(obj).take_error();
  auto *elf = llvm::cast<llvm::object::ELF64LEObjectFile>(obj->get());
  const auto &header = elf->getELFFile().getHeader();
  CubinInfo info;
  info.arch = (header.e_flags >> 8) & 0xff;
  info.relocatable = header.e_type == llvm::ELF::ET_REL;
  Status st = for_each_defined_symbol(*elf, subject, [&](const DefinedSymbol &s) {
    if (s.type == llvm::ELF::STT_FUNC)
      info.functions.insert(s.name.str());
    else if (s.type == llvm::ELF::STT_OBJECT || s.type == llvm::ELF::STT_COMMON) {
      info.variables.insert(s.name.str());
      info.variable_symbols[s.name.str()] = {s.section, s.value, s.size};
    }
  });
  if (!st)
    return st.error();
  return info;
}

} // namespace cudaq_rt
