#include "interpose/link_recording.h"

#include "package/package.h"

#include <system_error>

namespace fs = std::filesystem;

namespace cudaq_rt {

std::string recording_name(std::string_view program, const Digest &key) {
  std::string name;
  for (char c : program)
    name +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  while (!name.empty() && name.front() == '.')
    name.erase(name.begin());
  if (name.empty())
    name = "link";
  return name + "-" + key.hex().substr(0, 16);
}

Status write_recording(const fs::path &dir, const LinkRecipe &recipe,
                       std::span<const std::string> blobs, const SigningKey *signer) {
  fs::path program = recipe.program;
  std::string name = recording_name(program.filename().string(), recipe.cache_key);
  fs::path final_dir = dir / (name + package_suffix);
  std::error_code ec;
  if (fs::exists(final_dir, ec))
    return Status::ok();
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(dir.string(), "cannot create the recording directory: ", ec.message());
  auto writer = PackageWriter::create(final_dir, BlobEncoding::zstd);
  if (!writer)
    return std::move(writer).take_error();
  Manifest m;
  m.name = name;
  m.created_by = "libcudaq_rt_nvjitlink " CUDAQ_RT_VERSION;
  m.recipe = recipe;
  for (size_t i = 0; i < recipe.inputs.size() && i < blobs.size(); ++i)
    if (auto st = writer->add_blob(recipe.inputs[i].digest, as_bytes(blobs[i])); !st)
      return st;
  std::vector<const SigningKey *> signers;
  if (signer)
    signers.push_back(signer);
  Status st = writer->commit(m, /*replace=*/false, signers);
  // Another process that made the same link may have committed first: its recording is ours.
  if (!st && fs::exists(final_dir, ec))
    return Status::ok();
  return st;
}

} // namespace cudaq_rt
