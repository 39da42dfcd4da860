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

} // namespace

Expected<std::vector<std::string>> strong_definitions(std::span<const uint8_t> cubin,
                                                      const std::string &subject) {
  auto obj = open_cuda_elf(cubin, subject);
  if (!obj)
    return std::move(obj).take_error();
  auto *elf = llvm::cast<llvm::object::ELF64LEObjectFile>(obj->get());
  std::vector<std::string> out;
  for (const llvm::object::ELFSymbolRef &sym : elf->symbols()) {
    auto name = sym.getName();
    auto flags = sym.getFlags();
    auto section = sym.getSection();
    if (!name || !flags || !section) {
      if (!name)
        llvm::consumeError(name.takeError());
      if (!flags)
        llvm::consumeError(flags.takeError());
      if (!section)
        llvm::consumeError(section.takeError());
      return make_error(subject, "malformed symbol table");
    }
    using llvm::object::BasicSymbolRef;
    const bool strong = (*flags & BasicSymbolRef::SF_Global) && !(*flags & BasicSymbolRef::SF_Weak);
    const uint8_t type = sym.getELFType();
    if (strong && *section != elf->section_end() && !name->empty() &&
        (type == llvm::ELF::STT_FUNC || type == llvm::ELF::STT_OBJECT))
      out.push_back(name->str());
  }
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
