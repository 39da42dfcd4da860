// A tool's package argument: a package, an OCI image layout or a registry reference
// (package_argument.h).
#include "oci/package_argument.h"

#include "oci/layout_source.h"
#include "oci/reference.h"
#include "oci/registry.h"
#include "oci/transfer.h"

#include <cstdlib>
#include <memory>

namespace fs = std::filesystem;

namespace cudaq_rt {

bool is_copied_package_argument(const std::string &text) {
  return is_oci_reference(text) || is_layout_reference(text) || is_foreign_layout(text);
}

Expected<PackageArgument> package_argument(const std::string &text, const TrustedKeys *trusted) {
  PackageArgument arg;
  std::unique_ptr<ImageSource> source;
  if (is_oci_reference(text)) {
    auto ref = RegistryRef::parse(text);
    if (!ref)
      return make_error("", ref.error().message);
    auto registry =
        Registry::open(*ref, [](const char *var) -> const char * { return std::getenv(var); });
    if (!registry)
      return std::move(registry).take_error();
    source = std::move(*registry);
  } else if (is_layout_reference(text) || is_foreign_layout(text)) {
    auto ref = is_layout_reference(text) ? LayoutRef::parse(text)
                                         : Expected<LayoutRef>(LayoutRef{fs::path(text), ""});
    if (!ref)
      return std::move(ref).take_error();
    auto layout = LayoutSource::open(std::move(*ref));
    if (!layout)
      return std::move(layout).take_error();
    source = std::move(*layout);
  } else {
    arg.package = text;
    return arg;
  }
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec)
    tmp = "/tmp";
  auto copy = TempDir::create_beside(tmp / "cudaq-rt-copy");
  if (!copy)
    return std::move(copy).take_error();
  auto pulled = pull_package(*source, copy->path(), false, nullptr, trusted);
  if (!pulled)
    return std::move(pulled).take_error();
  arg.package = pulled->dir;
  arg.source = source->name();
  arg.image_manifest = pulled->manifest;
  arg.copy.emplace(std::move(*copy));
  return arg;
}

} // namespace cudaq_rt
