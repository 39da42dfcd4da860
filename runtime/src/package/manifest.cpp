// The package manifest, manifest.json: its one reader (Manifest::parse) and its one writer
// (to_json_text). man/cudaq-rt-package.5 ("The manifest") documents every field, and
// schemas/manifest.schema.json is its JSON Schema; this file is why the reader checks what it
// checks. It stands on nlohmann::json for the syntax, formats/export_records.h for what a name
// must be, formats/target.h for the link modes' names and cudaq_rt/wire.h for a wire name's
// function_id. It opens no file and reads no blob: package/package.cpp does both.
//
// Format versions (cudaq-rt-package.5, "Compatibility"). format_version changes whenever a reader
// of the old version would misread a new package, and a reader refuses a version it does not
// know rather than guess. Format 1 keeps every blob as its bytes; format 2 adds `stored`, the
// blobs kept as zstd frames under the frames' digests (eaadd2f). A manifest is written as format
// 1 whenever nothing is stored, so that a package written with --no-compress still opens with a
// cudaq-rt older than format 2, which refuses a format-2 package by its version instead of
// reading frames as blobs; `stored` in a format-1 manifest is refused. media_type must be this
// format's: a JSON file of another format that happened to share the field names is not read as
// a manifest. Members the reader does not know are ignored; the schema refuses them.
//
// What parse checks, and why. A package may come from anywhere (a registry, a copied directory),
// so the reader trusts nothing in it, never throws, and reports the first fault as one line that
// names the file and the record ("containers[3].entries[0].version: expected [major, minor]");
// tests/fuzz/fuzz_manifest.cpp holds it to that, and to reading back what it wrote.
//  - No key twice in one object: JSON leaves duplicate keys to the reader (RFC 8259, 4) and
//    nlohmann keeps the last, so one manifest could give one reader one size and the next another.
//  - Every member the schema requires, with its type (tests/unit/package/test_manifest.cpp erases
//    each, at every level), and integers within the field they stand for: kind_code 16 bits,
//    arch and function_id 32 bits, an entry's version two 16-bit numbers.
//  - What a record refers to exists, once: an origin's and an export's sources index `sources`;
//    one record per container digest; a stored form only for a blob the manifest names, in digest
//    order, one per blob, under a digest that no blob and no other stored form has (blobs/sha256/
//    holds one file per name), and never of size 0, which is no zstd frame.
//  - Closed vocabularies stay closed: a container's or an export's role (a bridge container names
//    its bridge), added_by only "cudaq-rt-link", a link's mode "cubin", "lto" or "lto-per-tu", a
//    recipe's input types as nvJitLink names them and its output "cubin" or "ptx", the stored
//    encoding "zstd"; `concurrent` and `direct` only on a handler, and only as booleans.
//  - Names that become directory names or identifiers are such: the package name, 1 to 200 of
//    [A-Za-z0-9._-] not starting with '.'; an export's name, a C identifier; an alias, as
//    check_alias rules (a second wire name of a handler export, a C identifier that no export and
//    no other alias has, whose function_id is the FNV-1a of its name and no handler's or other
//    alias's).
// What the reader cannot check is whether the package's bytes are what the manifest says: that
// each blob is there with its recorded size and digest, and that a container blob holds exactly
// the entries its record lists, Package checks when it opens the package and as it reads each
// blob (cudaq-rt-package.5, "Verification"). The digests vouch for the blobs, not for what the
// manifest says of them.
//
// Limits. The manifest reaches parse whole, read as a regular file of at most 64 MiB
// (max_manifest_bytes, package/package.h); a compressed blob may record at most 1 GiB, which
// Package enforces before it reads a frame. Paths, archive member names and a fatbin entry's
// options and name are bytes from files cudaq-rt did not write, not necessarily UTF-8: they are
// kept as they are and written with U+FFFD for each invalid byte, so that what the writer emits
// the reader always takes back. A source's path is its file name (its absolute path with
// cudaq-rt-pack --absolute-paths), a record only: nothing is ever read through it.
#include "package/manifest.h"

#include "cudaq_rt/wire.h"
#include "formats/export_records.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

using nlohmann::json;

namespace cudaq_rt {
namespace {

std::optional<Role> parse_role(const std::string &s) {
  if (s == "application")
    return Role::application;
  if (s == "bridge")
    return Role::bridge;
  if (s == "dispatcher")
    return Role::dispatcher;
  return std::nullopt;
}

// Reads fields with a path for messages; throws Bad, caught once in Manifest::parse.
struct Bad {
  std::string message;
};

const json &field(const json &j, const char *key, const std::string &path) {
  if (!j.is_object() || !j.contains(key))
    throw Bad{cat(path, ": missing \"", key, "\"")};
  return j.at(key);
}

std::string str(const json &j, const char *key, const std::string &path) {
  const json &v = field(j, key, path);
  if (!v.is_string())
    throw Bad{cat(path, ".", key, ": expected a string")};
  return v.get<std::string>();
}

uint64_t uint(const json &j, const char *key, const std::string &path, uint64_t max = UINT64_MAX) {
  const json &v = field(j, key, path);
  if (!v.is_number_unsigned())
    throw Bad{cat(path, ".", key, ": expected a non-negative integer")};
  if (v.get<uint64_t>() > max)
    throw Bad{cat(path, ".", key, ": ", v.get<uint64_t>(), " is out of range (at most ", max, ")")};
  return v.get<uint64_t>();
}

Digest digest(const json &v, const std::string &path) {
  if (!v.is_string())
    throw Bad{cat(path, ": expected a digest string")};
  auto d = Digest::parse(v.get<std::string>());
  if (!d)
    throw Bad{cat(path, ": ", quote(v.get<std::string>()), " is not a sha256:<64 hex> digest")};
  return *d;
}

const json &array(const json &j, const char *key, const std::string &path) {
  const json &v = field(j, key, path);
  if (!v.is_array())
    throw Bad{cat(path, ".", key, ": expected an array")};
  return v;
}

Role role(const json &j, const std::string &path) {
  std::string s = str(j, "role", path);
  auto r = parse_role(s);
  if (!r)
    throw Bad{cat(path, ".role: unknown role ", quote(s))};
  return *r;
}

} // namespace

const char *role_name(Role r) {
  switch (r) {
  case Role::bridge:
    return "bridge";
  case Role::dispatcher:
    return "dispatcher";
  case Role::application:
    break;
  }
  return "application";
}

bool valid_package_name(const std::string &name) {
  if (name.empty() || name[0] == '.' || name.size() > 200)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

bool ContainerRecord::has_ltoir() const {
  return std::any_of(entries.begin(), entries.end(),
                     [](const EntryRecord &e) { return e.kind == "ltoir"; });
}

const ContainerRecord *Manifest::find_container(const Digest &d) const {
  for (const ContainerRecord &c : containers)
    if (c.digest == d)
      return &c;
  return nullptr;
}

const char *blob_encoding_name(BlobEncoding e) {
  return e == BlobEncoding::zstd ? "zstd" : "identity";
}

int Manifest::format_version() const {
  return stored.empty() ? manifest_plain_format_version : manifest_format_version;
}

std::map<Digest, uint64_t> Manifest::blob_sizes() const {
  std::map<Digest, uint64_t> out;
  for (const ContainerRecord &c : containers)
    out.emplace(c.digest, c.size);
  for (const LinkRecord &l : links)
    out.emplace(l.cubin, l.cubin_size);
  if (recipe)
    for (const RecipeInput &in : recipe->inputs)
      out.emplace(in.digest, in.size);
  return out;
}

const StoredBlob *Manifest::find_stored(const Digest &d) const {
  auto it = std::lower_bound(stored.begin(), stored.end(), d,
                             [](const StoredBlob &s, const Digest &k) { return s.digest < k; });
  return it != stored.end() && it->digest == d ? &*it : nullptr;
}

std::map<Digest, BlobOnDisk> Manifest::blobs_on_disk() const {
  std::map<Digest, BlobOnDisk> out;
  for (const auto &[d, size] : blob_sizes()) {
    const StoredBlob *s = find_stored(d);
    out.emplace(d, s ? BlobOnDisk{s->stored_digest, s->stored_size, s} : BlobOnDisk{d, size});
  }
  return out;
}

json Manifest::to_json() const {
  json j;
  j["format_version"] = format_version();
  j["media_type"] = manifest_media_type;
  j["name"] = name;
  j["created_by"] = created_by;
  j["sources"] = json::array();
  for (const Source &s : sources)
    j["sources"].push_back(
        {{"path", s.path}, {"kind", s.kind}, {"size", s.size}, {"digest", s.digest.str()}});
  j["containers"] = json::array();
  for (const ContainerRecord &c : containers) {
    json jc = {{"digest", c.digest.str()}, {"size", c.size}, {"role", role_name(c.role)}};
    if (c.role == Role::bridge)
      jc["bridge"] = c.bridge;
    if (!c.added_by.empty())
      jc["added_by"] = c.added_by;
    jc["origins"] = json::array();
    for (const Origin &o : c.origins) {
      json jo = {{"source", o.source}, {"offset", o.offset}, {"index", o.index}};
      if (!o.member.empty())
        jo["member"] = o.member;
      jc["origins"].push_back(jo);
    }
    jc["entries"] = json::array();
    for (const EntryRecord &e : c.entries) {
      json je = {{"kind", e.kind},
                 {"kind_code", e.kind_code},
                 {"arch", e.arch},
                 {"version", {e.version_major, e.version_minor}},
                 {"flags", e.flags},
                 {"compression", e.compression},
                 {"payload_size", e.payload_size},
                 {"compressed_size", e.compressed_size},
                 {"uncompressed_size", e.uncompressed_size}};
      if (!e.options.empty())
        je["options"] = e.options;
      if (!e.name.empty())
        je["name"] = e.name;
      jc["entries"].push_back(je);
    }
    j["containers"].push_back(jc);
  }
  j["exports"] = json::array();
  for (const ExportEntry &e : exports) {
    json je = {{"name", e.name},
               {"kind", e.kind},
               {"function_id", e.function_id},
               {"symbol", e.symbol},
               {"role", role_name(e.role)},
               {"sources", e.sources}};
    if (e.concurrent)
      je["concurrent"] = true;
    if (e.direct)
      je["direct"] = true;
    j["exports"].push_back(std::move(je));
  }
  // Written only when there are some: a package without aliases reads as it always has.
  if (!aliases.empty()) {
    j["aliases"] = json::array();
    for (const AliasEntry &a : aliases)
      j["aliases"].push_back(
          {{"name", a.name}, {"handler", a.handler}, {"function_id", a.function_id}});
  }
  j["links"] = json::array();
  for (const LinkRecord &l : links) {
    json inputs = json::array();
    for (const Digest &d : l.inputs)
      inputs.push_back(d.str());
    j["links"].push_back({{"arch", l.arch.str()},
                          {"bridge", l.bridge},
                          {"dispatcher", l.dispatcher},
                          {"mode", linked_mode_name(l.lto)},
                          {"options", l.options},
                          {"nvjitlink_version", l.nvjitlink_version},
                          {"inputs", inputs},
                          {"cubin", {{"digest", l.cubin.str()}, {"size", l.cubin_size}}},
                          {"cache_key", l.cache_key.str()},
                          {"created", l.created},
                          {"link_ms", l.link_ms}});
  }
  if (recipe) {
    json inputs = json::array();
    for (const RecipeInput &in : recipe->inputs)
      inputs.push_back({{"type", nvjitlink_input_type_name(in.type)},
                        {"name", in.name},
                        {"digest", in.digest.str()},
                        {"size", in.size}});
    j["recipe"] = {{"options", recipe->options},
                   {"inputs", inputs},
                   {"output", recipe->output},
                   {"arch", recipe->arch},
                   {"program", recipe->program},
                   {"nvjitlink_version", recipe->nvjitlink_version},
                   {"cache_key", recipe->cache_key.str()}};
  }
  if (!stored.empty()) {
    j["stored"] = json::array();
    for (const StoredBlob &b : stored)
      j["stored"].push_back({{"digest", b.digest.str()},
                             {"encoding", blob_encoding_name(b.encoding)},
                             {"stored_digest", b.stored_digest.str()},
                             {"stored_size", b.stored_size}});
  }
  return j;
}

// Paths, archive member names and a fatbin's options string are bytes from files we did not
// write, not necessarily UTF-8: nlohmann::json would throw on them, so they are written with
// U+FFFD in place of each invalid byte. They are kept for the record only.
std::string Manifest::to_json_text() const {
  return to_json().dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {

// The manifest's records, one reader each; `p` names the record in errors ("containers[3]").
Source read_source(const json &js, const std::string &p) {
  return {str(js, "path", p), str(js, "kind", p), uint(js, "size", p),
          digest(field(js, "digest", p), p + ".digest")};
}

size_t source_index(const Manifest &m, const json &v, const std::string &p) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() >= m.sources.size())
    throw Bad{cat(p, ": not an index into sources")};
  return static_cast<size_t>(v.get<uint64_t>());
}

EntryRecord read_entry(const json &je, const std::string &pe) {
  EntryRecord e;
  e.kind = str(je, "kind", pe);
  e.kind_code = static_cast<uint16_t>(uint(je, "kind_code", pe, UINT16_MAX));
  e.arch = static_cast<uint32_t>(uint(je, "arch", pe, UINT32_MAX));
  const json &v = field(je, "version", pe);
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned() ||
      v[0].get<uint64_t>() > 0xFFFF || v[1].get<uint64_t>() > 0xFFFF)
    throw Bad{cat(pe, ".version: expected [major, minor]")};
  e.version_major = v[0].get<uint16_t>();
  e.version_minor = v[1].get<uint16_t>();
  e.flags = uint(je, "flags", pe);
  e.compression = str(je, "compression", pe);
  e.payload_size = uint(je, "payload_size", pe);
  e.compressed_size = uint(je, "compressed_size", pe);
  e.uncompressed_size = uint(je, "uncompressed_size", pe);
  if (je.contains("options"))
    e.options = str(je, "options", pe);
  if (je.contains("name"))
    e.name = str(je, "name", pe);
  return e;
}

ContainerRecord read_container(const Manifest &m, const json &jc, const std::string &p) {
  ContainerRecord c;
  c.digest = digest(field(jc, "digest", p), p + ".digest");
  c.size = uint(jc, "size", p);
  c.role = role(jc, p);
  if (c.role == Role::bridge)
    c.bridge = str(jc, "bridge", p);
  if (jc.contains("added_by")) {
    c.added_by = str(jc, "added_by", p);
    if (c.added_by != "cudaq-rt-link")
      throw Bad{cat(p, ".added_by: unknown producer ", quote(c.added_by))};
  }
  const json &origins = array(jc, "origins", p);
  for (size_t k = 0; k < origins.size(); ++k) {
    std::string po = cat(p, ".origins[", k, "]");
    Origin o;
    o.source = source_index(m, field(origins[k], "source", po), po + ".source");
    o.offset = uint(origins[k], "offset", po);
    o.index = uint(origins[k], "index", po);
    if (origins[k].contains("member"))
      o.member = str(origins[k], "member", po);
    c.origins.push_back(o);
  }
  const json &entries = array(jc, "entries", p);
  for (size_t k = 0; k < entries.size(); ++k)
    c.entries.push_back(read_entry(entries[k], cat(p, ".entries[", k, "]")));
  return c;
}

// A handler's flags: true or false, and only on a handler.
bool handler_flag(const json &je, const ExportEntry &e, const char *name, const std::string &p) {
  if (!je.contains(name))
    return false;
  const json &v = je[name];
  if (!v.is_boolean() || e.kind != export_kind_name(ExportKind::handler))
    throw Bad{cat(p, ".", name, ": only a handler has it, as true or false")};
  return v.get<bool>();
}

ExportEntry read_export(const Manifest &m, const json &je, const std::string &p) {
  ExportEntry e;
  e.name = str(je, "name", p);
  if (!is_c_identifier(e.name))
    throw Bad{cat(p, ".name: ", quote(e.name), " is not a C identifier")};
  e.kind = str(je, "kind", p);
  e.function_id = static_cast<uint32_t>(uint(je, "function_id", p, UINT32_MAX));
  e.symbol = str(je, "symbol", p);
  e.concurrent = handler_flag(je, e, "concurrent", p);
  e.direct = handler_flag(je, e, "direct", p);
  e.role = role(je, p);
  for (const json &s : array(je, "sources", p))
    e.sources.push_back(source_index(m, s, p + ".sources"));
  return e;
}

AliasEntry read_alias(const Manifest &m, const json &ja, const std::string &p) {
  AliasEntry a;
  a.name = str(ja, "name", p);
  a.handler = str(ja, "handler", p);
  a.function_id = static_cast<uint32_t>(uint(ja, "function_id", p, UINT32_MAX));
  if (auto st = check_alias(m, a); !st)
    throw Bad{cat(p, ": ", st.error().message)};
  return a;
}

LinkRecord read_link(const json &jl, const std::string &p) {
  LinkRecord l;
  auto arch = parse_arch(str(jl, "arch", p));
  if (!arch)
    throw Bad{cat(p, ".arch: ", arch.error().message)};
  l.arch = *arch;
  l.bridge = str(jl, "bridge", p);
  l.dispatcher = str(jl, "dispatcher", p);
  auto lto = parse_linked_mode(str(jl, "mode", p));
  if (!lto)
    throw Bad{cat(p, ".mode: expected \"cubin\", \"lto\" or \"lto-per-tu\"")};
  l.lto = *lto;
  for (const json &o : array(jl, "options", p)) {
    if (!o.is_string())
      throw Bad{cat(p, ".options: expected strings")};
    l.options.push_back(o.get<std::string>());
  }
  l.nvjitlink_version = str(jl, "nvjitlink_version", p);
  const json &inputs = array(jl, "inputs", p);
  for (size_t k = 0; k < inputs.size(); ++k)
    l.inputs.push_back(digest(inputs[k], cat(p, ".inputs[", k, "]")));
  const json &cubin = field(jl, "cubin", p);
  l.cubin = digest(field(cubin, "digest", p + ".cubin"), p + ".cubin.digest");
  l.cubin_size = uint(cubin, "size", p + ".cubin");
  l.cache_key = digest(field(jl, "cache_key", p), p + ".cache_key");
  l.created = str(jl, "created", p);
  const json &ms = field(jl, "link_ms", p);
  if (!ms.is_number())
    throw Bad{cat(p, ".link_ms: expected a number")};
  l.link_ms = ms.get<double>();
  return l;
}

// A stored form per compressed blob, in digest order, for a blob the manifest names, under a
// digest that is no other blob's: blobs/sha256/ holds one file per name.
void read_stored(Manifest &m, const json &js) {
  const std::map<Digest, uint64_t> sizes = m.blob_sizes();
  std::set<Digest> names;
  for (const auto &[d, size] : sizes)
    names.insert(d);
  for (size_t i = 0; i < js.size(); ++i) {
    const std::string p = cat("stored[", i, "]");
    StoredBlob b;
    b.digest = digest(field(js[i], "digest", p), p + ".digest");
    if (const std::string e = str(js[i], "encoding", p); e != "zstd")
      throw Bad{cat(p, ".encoding: ", quote(e), " is not zstd")};
    b.stored_digest = digest(field(js[i], "stored_digest", p), p + ".stored_digest");
    b.stored_size = uint(js[i], "stored_size", p);
    if (!sizes.count(b.digest))
      throw Bad{cat(p, ".digest: ", b.digest.str(), " is not a blob the manifest names")};
    if (!m.stored.empty() && !(m.stored.back().digest < b.digest))
      throw Bad{cat(p, ".digest: not after stored[", i - 1,
                    "]'s (one entry per blob, in digest "
                    "order)")};
    if (!names.insert(b.stored_digest).second)
      throw Bad{cat(p, ".stored_digest: ", b.stored_digest.str(),
                    " is also another blob's name: each file in blobs/ is one blob")};
    if (b.stored_size == 0)
      throw Bad{cat(p, ".stored_size: 0 is no zstd frame")};
    m.stored.push_back(b);
  }
}

LinkRecipe read_recipe(const json &jr, const std::string &p) {
  LinkRecipe r;
  for (const json &o : array(jr, "options", p)) {
    if (!o.is_string())
      throw Bad{cat(p, ".options: expected strings")};
    r.options.push_back(o.get<std::string>());
  }
  const json &inputs = array(jr, "inputs", p);
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::string pk = cat(p, ".inputs[", k, "]");
    RecipeInput in;
    auto type = parse_nvjitlink_input_type(str(inputs[k], "type", pk));
    if (!type)
      throw Bad{cat(pk, ".type: not an nvJitLink input type")};
    in.type = *type;
    in.name = str(inputs[k], "name", pk);
    in.digest = digest(field(inputs[k], "digest", pk), pk + ".digest");
    in.size = uint(inputs[k], "size", pk);
    r.inputs.push_back(std::move(in));
  }
  r.output = str(jr, "output", p);
  if (r.output != "cubin" && r.output != "ptx")
    throw Bad{cat(p, ".output: expected \"cubin\" or \"ptx\"")};
  r.arch = str(jr, "arch", p);
  r.program = str(jr, "program", p);
  r.nvjitlink_version = str(jr, "nvjitlink_version", p);
  r.cache_key = digest(field(jr, "cache_key", p), p + ".cache_key");
  return r;
}

// JSON leaves duplicate keys to the reader (RFC 8259 4); nlohmann keeps the last. A manifest
// whose "size" says one thing to one reader and another to the next is refused instead.
Expected<json> parse_without_duplicate_keys(const std::string &text, const std::string &subject) {
  std::vector<std::set<std::string>> keys; // one set per object being parsed
  std::optional<std::string> duplicate;
  json::parser_callback_t no_duplicates = [&](int, json::parse_event_t event, json &parsed) {
    if (event == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (event == json::parse_event_t::object_end && !keys.empty())
      keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.empty() &&
             !keys.back().insert(parsed.get<std::string>()).second && !duplicate)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text, no_duplicates, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return make_error(subject, "not valid JSON");
  if (duplicate)
    return make_error(subject, "key ", quote(*duplicate), " appears twice in one object");
  return j;
}

} // namespace

Expected<Manifest> Manifest::parse(const std::string &text, const std::string &subject) {
  auto parsed = parse_without_duplicate_keys(text, subject);
  if (!parsed)
    return std::move(parsed).take_error();
  const json &j = *parsed;
  Manifest m;
  try {
    if (!j.is_object())
      throw Bad{"manifest: expected an object"};
    uint64_t version = uint(j, "format_version", "manifest");
    if (version < manifest_plain_format_version || version > manifest_format_version)
      throw Bad{cat("format_version ", version, " is not supported (this cudaq-rt reads ",
                    manifest_plain_format_version, " to ", manifest_format_version, ")")};
    // What the file says it is: the schema requires it, and a manifest of another format that
    // happened to share the fields must not be read as this one.
    if (const std::string media = str(j, "media_type", "manifest"); media != manifest_media_type)
      throw Bad{cat("manifest.media_type: ", quote(media), " is not ", manifest_media_type)};
    m.name = str(j, "name", "manifest");
    if (!valid_package_name(m.name))
      throw Bad{cat("name ", quote(m.name), " is not a valid package name")};
    m.created_by = str(j, "created_by", "manifest");
    const json &sources = array(j, "sources", "manifest");
    for (size_t i = 0; i < sources.size(); ++i)
      m.sources.push_back(read_source(sources[i], cat("sources[", i, "]")));
    const json &containers = array(j, "containers", "manifest");
    std::map<Digest, size_t> container_index;
    for (size_t i = 0; i < containers.size(); ++i) {
      std::string p = cat("containers[", i, "]");
      ContainerRecord c = read_container(m, containers[i], p);
      if (auto [it, fresh] = container_index.emplace(c.digest, i); !fresh)
        throw Bad{cat(p, ".digest: ", c.digest.str(), " is also containers[", it->second,
                      "]'s: one record per container")};
      m.containers.push_back(std::move(c));
    }
    const json &exports = array(j, "exports", "manifest");
    for (size_t i = 0; i < exports.size(); ++i)
      m.exports.push_back(read_export(m, exports[i], cat("exports[", i, "]")));
    if (j.contains("aliases")) {
      const json &aliases = array(j, "aliases", "manifest");
      for (size_t i = 0; i < aliases.size(); ++i)
        m.aliases.push_back(read_alias(m, aliases[i], cat("aliases[", i, "]")));
    }
    const json &links = array(j, "links", "manifest");
    for (size_t i = 0; i < links.size(); ++i)
      m.links.push_back(read_link(links[i], cat("links[", i, "]")));
    if (j.contains("recipe"))
      m.recipe = read_recipe(j.at("recipe"), "recipe");
    if (j.contains("stored")) {
      if (version < manifest_format_version)
        throw Bad{cat("stored: needs format_version ", manifest_format_version, ", not ", version)};
      read_stored(m, array(j, "stored", "manifest"));
    }
  } catch (const Bad &bad) {
    return make_error(subject, bad.message);
  } catch (const json::exception &e) {
    return make_error(subject, "malformed manifest: ", e.what());
  }
  return m;
}

namespace {
// nvJitLinkInputType's values (nvJitLink.h), by name.
constexpr std::pair<uint32_t, const char *> input_types[] = {
    {1, "cubin"},  {2, "ptx"},     {3, "ltoir"}, {4, "fatbin"},
    {5, "object"}, {6, "library"}, {7, "index"}, {10, "any"}};
} // namespace

const char *nvjitlink_input_type_name(uint32_t type) {
  for (auto [value, name] : input_types)
    if (value == type)
      return name;
  return "unknown";
}

std::optional<uint32_t> parse_nvjitlink_input_type(std::string_view name) {
  for (auto [value, n] : input_types)
    if (name == n)
      return value;
  return std::nullopt;
}

Status check_alias(const Manifest &m, const AliasEntry &a) {
  auto refuse = [&](auto &&...what) { return make_error("", what...); };
  if (!is_c_identifier(a.name))
    return refuse("the wire name ", quote(a.name), " is not a C identifier");
  // A bridge's hook sets (bridge-hooks) are no names of the module: never a target or a clash.
  const auto hooks = [](const ExportEntry &e) {
    return e.kind == export_kind_name(ExportKind::bridge_hooks);
  };
  auto target = std::find_if(m.exports.begin(), m.exports.end(), [&](const ExportEntry &e) {
    return e.name == a.handler && !hooks(e);
  });
  if (target == m.exports.end())
    return refuse("no handler ", quote(a.handler), " is exported");
  if (target->kind != export_kind_name(ExportKind::handler))
    return refuse(quote(a.handler), " is a ", target->kind, ", not a handler");
  if (a.function_id != cudaq_rt_function_id(a.name.c_str()))
    return refuse("function_id ", hex(a.function_id), " is not FNV-1a of ", quote(a.name), " (",
                  hex(cudaq_rt_function_id(a.name.c_str())), ")");
  for (const ExportEntry &e : m.exports) {
    if (e.name == a.name && !hooks(e))
      return refuse("the wire name ", quote(a.name), " is already the name of a ", e.kind,
                    " export");
    if (e.kind == export_kind_name(ExportKind::handler) && e.function_id == a.function_id)
      return refuse("the wire name ", quote(a.name), " has function_id ", hex(a.function_id),
                    ", which handler ", quote(e.name), " already answers (FNV-1a collision)");
  }
  for (const AliasEntry &b : m.aliases) {
    if (b.name == a.name)
      return refuse("the wire name ", quote(a.name), " is given twice (for ", quote(b.handler),
                    " and ", quote(a.handler), ")");
    if (b.function_id == a.function_id)
      return refuse("the wire names ", quote(b.name), " and ", quote(a.name),
                    " have the same function_id ", hex(a.function_id), " (FNV-1a collision)");
  }
  return Status::ok();
}

} // namespace cudaq_rt
