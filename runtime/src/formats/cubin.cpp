// A cubin is an ELF with e_machine EM_CUDA (190); nvcc 13 writes the SM number in bits 8..15 of
// e_flags (0x6005a04 for sm_90, 0x6006402 for sm_100: measured here).
#include "formats/cubin.h"

#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/MemoryBuffer.h>

namespace cudaq_rt {

Expected<CubinInfo> read_cubin(std::span<const uint8_t> cubin, const std::string &subject) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(cubin.data()), cubin.size());
  auto obj = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(bytes, subject));
  if (!obj)
    return make_error(subject,
                      "linked output is not an ELF file: ", llvm::toString(obj.takeError()));
  auto *elf = llvm::dyn_cast<llvm::object::ELF64LEObjectFile>(obj->get());
  if (!elf)
    return make_error(subject, "linked output is not a 64-bit little-endian ELF file");
  const auto &header = elf->getELFFile().getHeader();
  if (header.e_machine != llvm::ELF::EM_CUDA)
    return make_error(subject, "linked output is not a CUDA ELF (e_machine ",
                      static_cast<unsigned>(header.e_machine), ")");
  CubinInfo info;
  info.arch = (header.e_flags >> 8) & 0xff;
  info.relocatable = header.e_type == llvm::ELF::ET_REL;
  for (const llvm::object::ELFSymbolRef &sym : elf->symbols()) {
    auto name = sym.getName();
    auto type = sym.getType();
    auto section = sym.getSection();
    if (!name || !type || !section) {
      if (!name)
        llvm::consumeError(name.takeError());
      if (!type)
        llvm::consumeError(type.takeError());
      if (!section)
        llvm::consumeError(section.takeError());
      return make_error(subject, "linked output has a malformed symbol table");
    }
    if (*section == elf->section_end()) // undefined
      continue;
    if (*type == llvm::object::SymbolRef::ST_Function)
      info.functions.insert(name->str());
    else if (*type == llvm::object::SymbolRef::ST_Data)
      info.variables.insert(name->str());
  }
  return info;
}

} // namespace cudaq_rt
