#include "package/oci_layout.h"

#include "package/signatures.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace cudaq_rt {
namespace {

using json = nlohmann::json;

// Key ids are hex, role and mode names are fixed words; bridge and dispatcher names come from the
// manifest, which checked them as identifiers.
std::string annotation(std::string_view name) {
  return cat(annotation_prefix, name);
}

json descriptor_json(const OciDescriptor &d) {
  json j = {{"mediaType", d.media_type}, {"digest", d.digest.str()}, {"size", d.size}};
  if (!d.annotations.empty())
    j["annotations"] = d.annotations;
  return j;
}

Expected<OciDescriptor> parse_descriptor(const json &j, const std::string &subject,
                                         std::string_view where) {
  if (!j.is_object())
    return make_error(subject, where, " is not a descriptor (a JSON object)");
  OciDescriptor d;
  auto media = j.find("mediaType");
  auto digest = j.find("digest");
  auto size = j.find("size");
  if (media == j.end() || !media->is_string() || digest == j.end() || !digest->is_string() ||
      size == j.end() || !size->is_number_unsigned())
    return make_error(subject, where, " lacks mediaType, digest or size");
  d.media_type = media->get<std::string>();
  auto parsed = Digest::parse(digest->get<std::string>());
  if (!parsed)
    return make_error(subject, where, "'s digest ", quote(digest->get<std::string>()),
                      " is not sha256:<64 lowercase hex digits>");
  d.digest = *parsed;
  d.size = size->get<uint64_t>();
  if (auto a = j.find("annotations"); a != j.end()) {
    if (!a->is_object())
      return make_error(subject, where, "'s annotations are not an object");
    for (const auto &[k, v] : a->items()) {
      if (!v.is_string())
        return make_error(subject, where, "'s annotation ", quote(k), " is not a string");
      d.annotations[k] = v.get<std::string>();
    }
  }
  return d;
}

} // namespace

std::string OciImageManifest::to_json_text() const {
  json layers_json = json::array();
  for (const OciDescriptor &l : layers)
    layers_json.push_back(descriptor_json(l));
  json j = {{"schemaVersion", 2},
            {"mediaType", oci_image_manifest_media_type},
            {"artifactType", artifact_type},
            {"config", descriptor_json(config)},
            {"layers", std::move(layers_json)}};
  if (!annotations.empty())
    j["annotations"] = annotations;
  return j.dump();
}

Expected<OciImageManifest> OciImageManifest::parse(std::string_view text,
                                                   const std::string &subject) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(subject, "not an image manifest: not a JSON object");
  if (j.value("schemaVersion", 0) != 2)
    return make_error(subject, "not an image manifest: schemaVersion is not 2");
  if (auto mt = j.find("mediaType");
      mt != j.end() && (!mt->is_string() || *mt != oci_image_manifest_media_type))
    return make_error(subject, "not an OCI image manifest: its mediaType is ",
                      quote(mt->is_string() ? mt->get<std::string>() : mt->dump()));
  OciImageManifest m;
  if (auto at = j.find("artifactType"); at != j.end() && at->is_string())
    m.artifact_type = at->get<std::string>();
  auto config = j.find("config");
  if (config == j.end())
    return make_error(subject, "not an image manifest: no config");
  auto c = parse_descriptor(*config, subject, "config");
  if (!c)
    return std::move(c).take_error();
  m.config = std::move(*c);
  if (m.config.media_type != manifest_media_type)
    return make_error(subject, "not a cudaq-rt package: its config's media type is ",
                      quote(m.config.media_type), ", not ", manifest_media_type);
  if (!m.artifact_type.empty() && m.artifact_type != package_artifact_type)
    return make_error(subject, "not a cudaq-rt package: its artifactType is ",
                      quote(m.artifact_type), ", not ", package_artifact_type);
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array())
    return make_error(subject, "not an image manifest: no layers array");
  for (size_t i = 0; i < layers->size(); ++i) {
    auto l = parse_descriptor((*layers)[i], subject, cat("layer ", i));
    if (!l)
      return std::move(l).take_error();
    m.layers.push_back(std::move(*l));
  }
  if (auto a = j.find("annotations"); a != j.end() && a->is_object())
    for (const auto &[k, v] : a->items())
      if (v.is_string())
        m.annotations[k] = v.get<std::string>();
  return m;
}

OciImageManifest
package_image_manifest(const Manifest &m, std::string_view manifest_text,
                       const std::vector<std::pair<std::string, std::string>> &signatures) {
  OciImageManifest im;
  im.artifact_type = package_artifact_type;
  im.config = {manifest_media_type, sha256(manifest_text), manifest_text.size(), {}};
  im.annotations = {{"org.opencontainers.image.title", m.name}, {annotation("package"), m.name}};
  // A blob is one layer, under its first use: a cubin two link records share is listed once,
  // with the first record's annotations (the config has all of them).
  // A compressed blob is its stored form: the zstd frame, under the frame's digest, its media
  // type suffixed +zstd (as OCI's own layer types are), the blob's own digest in an annotation.
  std::vector<Digest> seen;
  auto add = [&](OciDescriptor d) {
    if (const StoredBlob *s = m.find_stored(d.digest)) {
      d.annotations[annotation("uncompressed-digest")] = d.digest.str();
      d.media_type += "+zstd";
      d.digest = s->stored_digest;
      d.size = s->stored_size;
    }
    if (std::find(seen.begin(), seen.end(), d.digest) != seen.end())
      return;
    seen.push_back(d.digest);
    im.layers.push_back(std::move(d));
  };
  for (const ContainerRecord &c : m.containers) {
    OciDescriptor d{container_layer_media_type, c.digest, c.size, {}};
    d.annotations[annotation("role")] = role_name(c.role);
    if (!c.bridge.empty())
      d.annotations[annotation("bridge")] = c.bridge;
    if (!c.added_by.empty())
      d.annotations[annotation("added-by")] = c.added_by;
    add(std::move(d));
  }
  for (const LinkRecord &l : m.links) {
    OciDescriptor d{cubin_layer_media_type, l.cubin, l.cubin_size, {}};
    d.annotations[annotation("arch")] = l.arch.str();
    d.annotations[annotation("bridge")] = l.bridge.empty() ? "none" : l.bridge;
    d.annotations[annotation("dispatcher")] = l.dispatcher;
    d.annotations[annotation("mode")] = l.lto ? lto_mode_name(*l.lto) : "none";
    add(std::move(d));
  }
  if (m.recipe)
    for (const RecipeInput &in : m.recipe->inputs)
      add({link_input_layer_media_type,
           in.digest,
           in.size,
           {{annotation("input-type"), nvjitlink_input_type_name(in.type)}}});
  for (const auto &[name, text] : signatures)
    add({signature_layer_media_type,
         sha256(text),
         text.size(),
         {{annotation("key-id"), name.substr(0, name.size() - std::string_view(".json").size())}}});
  return im;
}

std::string layout_index_text(std::string_view image_manifest_text) {
  json manifest = {{"mediaType", oci_image_manifest_media_type},
                   {"digest", sha256(image_manifest_text).str()},
                   {"size", image_manifest_text.size()},
                   {"artifactType", package_artifact_type},
                   {"annotations", {{oci_ref_name_annotation, layout_tag}}}};
  json j = {{"schemaVersion", 2},
            {"mediaType", oci_image_index_media_type},
            {"manifests", json::array({std::move(manifest)})}};
  return j.dump() + "\n";
}

Expected<std::vector<OciDescriptor>> parse_image_index(std::string_view text,
                                                       const std::string &subject) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(subject, "not an image index: not a JSON object");
  auto manifests = j.find("manifests");
  if (j.value("schemaVersion", 0) != 2 || manifests == j.end() || !manifests->is_array())
    return make_error(subject, "not an image index: no schemaVersion 2 and manifests array");
  std::vector<OciDescriptor> out;
  for (size_t i = 0; i < manifests->size(); ++i) {
    auto d = parse_descriptor((*manifests)[i], subject, cat("manifests[", i, "]"));
    if (!d)
      return std::move(d).take_error();
    out.push_back(std::move(*d));
  }
  return out;
}

Expected<OciDescriptor> parse_layout_index(std::string_view text, const std::string &subject) {
  auto manifests = parse_image_index(text, subject);
  if (!manifests)
    return std::move(manifests).take_error();
  if (manifests->size() != 1)
    return make_error(subject, "names ", manifests->size(),
                      " manifests: a package's layout names exactly one");
  OciDescriptor &d = manifests->front();
  if (d.media_type != oci_image_manifest_media_type)
    return make_error(subject, "manifests[0] is a ", quote(d.media_type),
                      ", not an OCI image manifest");
  return std::move(d);
}

std::string signature_layer_file_name(const OciDescriptor &layer) {
  auto it = layer.annotations.find(annotation("key-id"));
  if (it == layer.annotations.end())
    return "";
  std::string name = it->second + ".json";
  return is_signature_file_name(name) ? name : "";
}

} // namespace cudaq_rt
