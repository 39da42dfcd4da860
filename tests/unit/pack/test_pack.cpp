// pack's library on inputs nvcc built (the example app, the loopback bridge's hooks, the pack
// tests' handlers): the package it writes and nothing else beside it, the manifest's sources,
// containers and exports, the clash rules, aliases, warnings and listing, and that a pack that
// fails, at any step, leaves the output directory as it found it.
#include "pack/pack.h"

#include "base/digest.h"
#include "cudaq_rt/wire.h"
#include "package/package.h"

#include <doctest/doctest.h>

#include "scratch_dir.h"
#include "unit_files.h"

#include <algorithm>
#include <atomic>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <set>
#include <sys/stat.h>
#include <thread>

namespace fs = std::filesystem;
using namespace cudaq_rt;
using unit_files::entries;
using unit_files::read_file;

namespace {

const std::string inputs = CUDAQ_RT_TEST_UNIT_INPUTS;
const std::string example_app = CUDAQ_RT_TEST_EXAMPLE_APP;
const std::string loopback = CUDAQ_RT_TEST_LOOPBACK_BRIDGE;
const std::string in(const std::string &name) {
  return inputs + "/" + name;
}

// Every file under `dir` with its bytes' digest, to tell that nothing changed.
std::map<std::string, std::string> snapshot(const fs::path &dir) {
  std::map<std::string, std::string> out;
  for (const auto &e : fs::recursive_directory_iterator(dir))
    out[fs::relative(e.path(), dir).string()] =
        e.is_regular_file() ? sha256(read_file(e.path())).hex() : "dir";
  return out;
}

PackOptions options(const fs::path &out, std::vector<PackInput> ins, const std::string &name = "") {
  PackOptions o;
  o.inputs = std::move(ins);
  o.output_dir = out;
  o.name = name;
  return o;
}

std::string canonical_path(const std::string &path) {
  return fs::weakly_canonical(fs::absolute(path)).string();
}

std::string error_of(const Expected<PackResult> &r) {
  return r ? std::string("(packed)") : r.error().str();
}
std::string error_of(const Expected<Inspection> &r) {
  return r ? std::string("(inspected)") : r.error().str();
}

const std::set<std::string> example_handlers = {"axpy_f32", "echo", "lut_decode", "parity",
                                                "sum_i32"};

} // namespace

TEST_CASE("pack writes NAME.cudaqpkg whole: every container a blob, the manifest, nothing else") {
  ScratchDir s;
  auto r = pack(
      options(s.path, {{example_app, Role::application, ""}, {loopback, Role::bridge, "loopback"}},
              "example"));
  REQUIRE_MESSAGE(r, error_of(r));
  const fs::path dir = s.path / "example.cudaqpkg";
  CHECK(r->dir == dir);
  CHECK(entries(s.path) == std::vector<std::string>{"example.cudaqpkg"}); // no temporary left
  CHECK(entries(dir) ==
        std::vector<std::string>{"blobs", "index.json", "manifest.json", "oci-layout"});

  const Manifest &m = r->inspection.manifest;
  CHECK(m.name == "example");
  CHECK(m.created_by.rfind("cudaq-rt-pack ", 0) == 0);
  REQUIRE(m.sources.size() == 2);
  CHECK(m.sources[0].path == canonical_path(example_app));
  CHECK(m.sources[0].kind == "executable");
  CHECK(m.sources[0].size == fs::file_size(example_app));
  CHECK(m.sources[0].digest == sha256(read_file(example_app)));
  CHECK(m.sources[1].path == canonical_path(loopback));
  CHECK(m.sources[1].kind == "shared-library");
  CHECK(m.sources[1].digest == sha256(read_file(loopback)));

  // One blob per container, named by its digest (or, kept compressed, by its frame's), holding
  // exactly its bytes.
  auto opened = Package::open(dir);
  REQUIRE(opened);
  std::set<std::string> blob_names;
  for (const ContainerRecord &c : m.containers) {
    auto bytes = opened->read_blob(c.digest);
    REQUIRE(bytes);
    CHECK(sha256(*bytes) == c.digest);
    CHECK(bytes->size() == c.size);
    blob_names.insert(opened->stored_name(c.digest).hex());
    REQUIRE(c.origins.size() == 1);
    CHECK(c.role == (c.origins[0].source == 0 ? Role::application : Role::bridge));
    CHECK(c.bridge == (c.origins[0].source == 0 ? "" : "loopback"));
  }
  // And the OCI layout's two: the config (manifest.json's bytes) and the image manifest.
  blob_names.insert(sha256(read_file(dir / "manifest.json")).hex());
  auto image = opened->image_manifest();
  REQUIRE(image);
  blob_names.insert(sha256(image->to_json_text()).hex());
  const std::vector<std::string> blobs = entries(dir / "blobs" / "sha256");
  CHECK(std::set<std::string>(blobs.begin(), blobs.end()) == blob_names);
  CHECK(blobs.size() == m.containers.size() + 2);

  // Exports: the handlers under their FNV-1a ids and pointer globals, and the host-set global;
  // and the bridge's lone forms (CUDAQ_RT_EXPORT_BRIDGE_HOOKS(lone) and (warp_lone) in
  // loopback_device.cu).
  std::set<std::string> handlers, hooks;
  for (const ExportEntry &e : m.exports) {
    CAPTURE(e.name);
    if (e.kind == "bridge-hooks") {
      CHECK(e.sources == std::vector<size_t>{1});
      CHECK(e.role == Role::bridge);
      hooks.insert(e.name);
      continue;
    }
    CHECK(e.sources == std::vector<size_t>{0});
    CHECK(e.role == Role::application);
    if (e.kind == "handler") {
      handlers.insert(e.name);
      CHECK(e.function_id == cudaq_rt_function_id(e.name.c_str()));
      CHECK(e.symbol == "cudaq_rt_handler__" + e.name);
      CHECK(e.concurrent); // CUDAQ_RT_EXPORT_HANDLER_CONCURRENT
    } else {
      CHECK(e.kind == "global");
      CHECK(e.name == "cudaq_rt_example_lut");
    }
  }
  CHECK(handlers == example_handlers);
  CHECK(hooks == std::set<std::string>{"lone", "warp_lone"});
  CHECK(m.exports.size() == example_handlers.size() + 3);
  CHECK(r->inspection.warnings.empty()); // every container has LTO-IR

  // What was written is what pack said it wrote, and reads back verified.
  auto p = Package::open(dir);
  REQUIRE_MESSAGE(p, (p ? "" : p.error().str()));
  CHECK(p->manifest().to_json_text() == r->written.to_json_text());
  // The same manifest, but for each input recorded by its file name, and with how each blob is
  // stored.
  Manifest named = m;
  for (Source &src : named.sources)
    src.path = fs::path(src.path).filename().string();
  named.stored = r->written.stored;
  CHECK(r->written.to_json_text() == named.to_json_text());
  for (const ContainerRecord &c : m.containers)
    CHECK(p->read_blob(c.digest));
}

TEST_CASE("the default name is the first application input's file name up to its first '.'") {
  ScratchDir s;
  fs::copy_file(example_app, s.path / "my.app.v2");
  auto i = inspect({{loopback, Role::bridge, "loopback"},
                    {(s.path / "my.app.v2").string(), Role::application, ""}},
                   "");
  REQUIRE_MESSAGE(i, error_of(i));
  CHECK(i->manifest.name == "my");
  auto only_bridge = inspect({{loopback, Role::bridge, "loopback"}}, "");
  REQUIRE(only_bridge);
  CHECK(only_bridge->manifest.name == "libcudaq_rt_bridge_loopback");

  CHECK(error_of(inspect({{example_app, Role::application, ""}}, "bad/name")) ==
        "'bad/name': is not a valid package name (letters, digits, '.', '_', '-')");
  CHECK(error_of(inspect({}, "")) == "no input files");

  // A name that cannot be a directory stops pack, not inspect (a listing needs no name).
  fs::copy_file(example_app, s.path / ".hidden");
  const fs::path out = s.path / "out";
  fs::create_directory(out);
  CHECK(error_of(pack(options(out, {{(s.path / ".hidden").string(), Role::application, ""}}))) ==
        "'" + (s.path / ".hidden").string() +
            "': gives no valid package name (''): name the package with --name");
  CHECK(entries(out).empty());
}

TEST_CASE("an input given twice, also through a symbolic link, is refused") {
  ScratchDir s;
  CHECK(
      error_of(inspect({{example_app, Role::application, ""}, {example_app, Role::application, ""}},
                       "x")) == "'" + example_app + "': is given twice");
  const std::string link = (s.path / "app_link").string();
  fs::create_symlink(example_app, link);
  CHECK(error_of(inspect({{example_app, Role::application, ""}, {link, Role::application, ""}},
                         "x")) == "'" + link + "': is given twice");
}

TEST_CASE("the same code in two inputs is one container with two origins, one export") {
  // The stripped copy holds the same containers and exports as the app.
  auto i = inspect(
      {{example_app, Role::application, ""}, {in("app_stripped"), Role::application, ""}}, "x");
  REQUIRE_MESSAGE(i, error_of(i));
  auto alone = inspect({{example_app, Role::application, ""}}, "x");
  REQUIRE(alone);
  REQUIRE(i->manifest.containers.size() == alone->manifest.containers.size());
  CHECK(i->container_bytes.size() == i->manifest.containers.size());
  for (const ContainerRecord &c : i->manifest.containers) {
    REQUIRE(c.origins.size() == 2);
    CHECK(c.origins[0].source == 0);
    CHECK(c.origins[1].source == 1);
    CHECK(c.origins[0].index == c.origins[1].index);
  }
  for (const ExportEntry &e : i->manifest.exports)
    CHECK(e.sources == std::vector<size_t>{0, 1});
}

TEST_CASE(
    "clash rules: one name for two functions, two names for one id, one container two roles") {
  CHECK(error_of(inspect(
            {{in("clash_a.o"), Role::application, ""}, {in("clash_b.o"), Role::application, ""}},
            "x")) == "'" + in("clash_b.o") + "': handler 'twin' is also exported by '" +
                         in("clash_a.o") + "' with different code: export names must be unique");
  CHECK(cudaq_rt_function_id("glbvs") == cudaq_rt_function_id("yacxa"));
  CHECK(error_of(inspect({{in("collide.o"), Role::application, ""}}, "x")) ==
        "'" + in("collide.o") + "': handlers 'glbvs' (in '" + in("collide.o") +
            "') and 'yacxa' have the same function_id 0xa1bc9a4f (FNV-1a collision): rename one "
            "of them");
  CHECK(error_of(inspect(
            {{example_app, Role::application, ""}, {in("app_stripped"), Role::bridge, "loopback"}},
            "x")) == "'" + in("app_stripped") +
                         "': section __nv_relfatbin: container 0 at offset 0x0 is also "
                         "packed as application code from '" +
                         canonical_path(example_app) + "': one container cannot play two roles");
}

TEST_CASE("a dispatcher input must export a dispatch kernel") {
  CHECK(error_of(inspect({{example_app, Role::dispatcher, ""}}, "x")) ==
        "'" + example_app +
            "': exports no dispatch kernel: mark the kernel with "
            "CUDAQ_RT_EXPORT_DISPATCH_KERNEL(name)");
  auto i = inspect(
      {{example_app, Role::application, ""}, {in("dispatcher.o"), Role::dispatcher, ""}}, "x");
  REQUIRE_MESSAGE(i, error_of(i));
  auto k = std::find_if(i->manifest.exports.begin(), i->manifest.exports.end(),
                        [](const ExportEntry &e) { return e.name == "test_custom_dispatch"; });
  REQUIRE(k != i->manifest.exports.end());
  CHECK(k->kind == "dispatch-kernel");
  CHECK(k->role == Role::dispatcher);
  CHECK(k->symbol == "test_custom_dispatch");
  CHECK(k->sources == std::vector<size_t>{1});
}

TEST_CASE("inputs without relocatable device code") {
  CHECK(error_of(inspect({{in("nordc.o"), Role::application, ""}}, "x")) ==
        "'" + in("nordc.o") +
            "': no __nv_relfatbin section, only .nv_fatbin: it was built without relocatable "
            "device code (rebuild with -rdc=true)");
  CHECK(error_of(inspect({{in("libnordc.a"), Role::application, ""}}, "x")) ==
        "'" + in("libnordc.a") +
            "': no member has __nv_relfatbin section, only .nv_fatbin: it was built without "
            "relocatable device code (rebuild with -rdc=true)");
  // The empty section is found when the containers are split.
  CHECK(error_of(inspect({{in("empty_relfatbin.o"), Role::application, ""}}, "x")) ==
        "'" + in("empty_relfatbin.o") + "': section __nv_relfatbin is empty");
}

TEST_CASE("code without LTO-IR is packed with one warning per input and kind of shortfall") {
  auto i = inspect({{in("nolto.o"), Role::application, ""}}, "x");
  REQUIRE_MESSAGE(i, error_of(i));
  REQUIRE(i->manifest.containers.size() == 1);
  const ContainerRecord &c = i->manifest.containers[0];
  CHECK_FALSE(c.has_ltoir());
  CHECK(i->warnings ==
        std::vector<std::string>{
            "'" + canonical_path(in("nolto.o")) + "': container 0 (" + c.digest.short_str() +
            ") has no LTO-IR: it can only be linked for sm_80 from its cubins; "
            "build it with -gencode arch=compute_NN,code=lto_NN"});
  CHECK(code_warnings(i->manifest) == i->warnings);

  // Hand-made: two containers of one input short in the same way give one warning; PTX, and
  // nothing at all, are said as such.
  Manifest m;
  m.sources = {{"/in/lib.a", "archive", 0, {}}, {"/in/ptx.o", "object", 0, {}}};
  auto record = [](size_t source, std::string member, size_t index,
                   std::vector<std::pair<std::string, uint32_t>> kinds) {
    ContainerRecord c;
    c.digest = sha256(cat(source, member, index));
    c.origins = {{source, member, 0, index}};
    for (auto &[kind, arch] : kinds) {
      EntryRecord e;
      e.kind = kind;
      e.kind_code = kind == "ltoir" ? 8 : kind == "cubin" ? 2 : 1;
      e.arch = arch;
      c.entries.push_back(e);
    }
    return c;
  };
  m.containers = {record(0, "a.o", 0, {{"cubin", 90}, {"cubin", 80}}),
                  record(0, "a.o", 1, {{"cubin", 80}, {"cubin", 90}}),
                  record(0, "a.o", 2, {{"ltoir", 80}}), record(1, "", 0, {{"ptx", 80}}),
                  record(1, "", 1, {})};
  CHECK(code_warnings(m) ==
        std::vector<std::string>{
            "'/in/lib.a(a.o)': 2 containers have no LTO-IR: they can only be linked for "
            "sm_80,sm_90 from their cubins; build them with -gencode arch=compute_NN,code=lto_NN",
            "'/in/ptx.o': container 0 (" + m.containers[3].digest.short_str() +
                ") has no LTO-IR: it can only be linked from PTX; build it with -gencode "
                "arch=compute_NN,code=lto_NN",
            "'/in/ptx.o': container 1 (" + m.containers[4].digest.short_str() +
                ") has no LTO-IR: it can only be linked nowhere (no PTX or cubin either); build "
                "it with -gencode arch=compute_NN,code=lto_NN"});
}

TEST_CASE("aliases: NAME=HANDLER, sorted by name, all or none") {
  auto i = inspect({{example_app, Role::application, ""}}, "x");
  REQUIRE(i);
  Manifest m = i->manifest;
  REQUIRE(add_aliases(m, {"zed=echo", "add_them=sum_i32"}));
  REQUIRE(m.aliases.size() == 2);
  CHECK(m.aliases[0].name == "add_them");
  CHECK(m.aliases[0].handler == "sum_i32");
  CHECK(m.aliases[0].function_id == cudaq_rt_function_id("add_them"));
  CHECK(m.aliases[1].name == "zed");
  CHECK(m.aliases[1].handler == "echo");

  Manifest before = m;
  Status bad = add_aliases(m, {"other=parity", "no_equals"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().str() == "alias 'no_equals': expected NAME=HANDLER");
  CHECK(m.aliases.size() == before.aliases.size()); // "other" was good, and is not added either
  bad = add_aliases(m, {"x=not_exported"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().str() == "alias 'x=not_exported': no handler 'not_exported' is exported");
  bad = add_aliases(m, {"zed=parity"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().str() ==
        "alias 'zed=parity': the wire name 'zed' is given twice (for 'echo' and 'parity')");

  // Through pack: into the package's manifest; a bad one stops the pack.
  ScratchDir s;
  PackOptions o = options(s.path, {{example_app, Role::application, ""}}, "aliased");
  o.aliases = {"add_them=sum_i32"};
  auto r = pack(o);
  REQUIRE_MESSAGE(r, error_of(r));
  auto p = Package::open(r->dir);
  REQUIRE(p);
  REQUIRE(p->manifest().aliases.size() == 1);
  CHECK(p->manifest().aliases[0].name == "add_them");
}

TEST_CASE("a pack that fails leaves no package and no temporary directory behind") {
  ScratchDir s;
  const fs::path out = s.path / "out";
  fs::create_directory(out);
  fs::path notes = s.path / "notes.txt";
  std::ofstream(notes) << "not a binary\n";

  // A bad second input, after the first was read and hashed.
  CHECK(error_of(pack(options(
            out, {{example_app, Role::application, ""}, {notes.string(), Role::application, ""}},
            "example"))) ==
        "'" + notes.string() + "': not an ELF file, a static archive or a fatbin");
  CHECK(entries(out).empty());
  // An alias refused after the inputs were all read.
  PackOptions aliased = options(out, {{example_app, Role::application, ""}}, "example");
  aliased.aliases = {"echo=sum_i32"};
  CHECK(error_of(pack(aliased)) ==
        "alias 'echo=sum_i32': the wire name 'echo' is already the name of a handler export");
  CHECK(entries(out).empty());
  // An output directory that is not there is made, and taken back when the pack fails.
  CHECK(error_of(
            pack(options(s.path / "missing" / "deeper", {{notes, Role::application, ""}}, "e"))) ==
        "'" + notes.string() + "': not an ELF file, a static archive or a fatbin");
  CHECK_FALSE(fs::exists(s.path / "missing"));
  auto made =
      pack(options(s.path / "made" / "deeper", {{example_app, Role::application, ""}}, "e"));
  REQUIRE_MESSAGE(made, error_of(made));
  CHECK(made->dir == s.path / "made" / "deeper" / "e.cudaqpkg");
  CHECK(fs::is_directory(made->dir));
  // A file where the directory would be is refused.
  std::ofstream(s.path / "a_file") << "x";
  CHECK(error_of(pack(options(s.path / "a_file", {{example_app, Role::application, ""}}, "e"))) ==
        "'" + (s.path / "a_file").string() + "': is not a directory");

  // An existing package: refused without force, and left as it was.
  auto first = pack(options(out, {{example_app, Role::application, ""}}, "example"));
  REQUIRE_MESSAGE(first, error_of(first));
  const auto packed = snapshot(first->dir);
  CHECK(error_of(pack(options(out, {{in("nolto.o"), Role::application, ""}}, "example"))) ==
        "'" + (out / "example.cudaqpkg").string() +
            "': already exists (use --force to replace it)");
  CHECK(snapshot(first->dir) == packed);
  CHECK(entries(out) == std::vector<std::string>{"example.cudaqpkg"});

  // --force onto something that is not a package: refused, untouched.
  const fs::path other = out / "other.cudaqpkg";
  fs::create_directory(other);
  std::ofstream(other / "precious.txt") << "mine\n";
  PackOptions force = options(out, {{example_app, Role::application, ""}}, "other");
  force.force = true;
  CHECK(error_of(pack(force)) == "'" + other.string() +
                                     "': is not a package (no manifest.json): --force replaces "
                                     "only a package; move it away or pack under another name");
  CHECK(entries(other) == std::vector<std::string>{"precious.txt"});

  // --force onto a package replaces it whole; what is left is the package and the lock file.
  PackOptions replace = options(out, {{in("nolto.o"), Role::application, ""}}, "example");
  replace.force = true;
  auto replaced = pack(replace);
  REQUIRE_MESSAGE(replaced, error_of(replaced));
  auto p = Package::open(out / "example.cudaqpkg");
  REQUIRE(p);
  CHECK(p->manifest().sources.size() == 1);
  CHECK(p->manifest().sources[0].path == "nolto.o");
  CHECK(entries(out / "example.cudaqpkg" / "blobs" / "sha256").size() == 1 + 2); // + the layout's
  for (const std::string &e : entries(out))
    CHECK((e == "example.cudaqpkg" || e == "other.cudaqpkg" || e == ".example.cudaqpkg.lock" ||
           e == ".other.cudaqpkg.lock"));
}

TEST_CASE("the listing: counts, sources, containers with their entries, exports, aliases") {
  auto i = inspect({{in("nolto.o"), Role::application, ""}}, "x");
  REQUIRE(i);
  Manifest m = i->manifest;
  REQUIRE(add_aliases(m, {"also=cubin_only"}));
  const ContainerRecord &c = m.containers[0];
  const std::string text = format_listing(m, "nolto\n.o");
  const std::string id = hex(cudaq_rt_function_id("cubin_only"));
  REQUIRE(c.entries.size() == 1);
  const EntryRecord &e = c.entries[0];
  const std::string compressed =
      e.compression == "none"
          ? ""
          : cat(" ", e.compression, " (", e.uncompressed_size, " uncompressed)");
  const std::string expected = cat(
      "nolto\\n.o: 1 source(s), 1 container(s) (", c.size, " bytes), 1 export(s), 0 link(s)\n",
      "sources:\n", "  [0] ", canonical_path(in("nolto.o")), "  object, ",
      fs::file_size(in("nolto.o")), " bytes, ", m.sources[0].digest.short_str(), "\n",
      "containers:\n", "  ", c.digest.short_str(), "  ", c.size, " bytes  application  [0]#0@0x0\n",
      "    cubin sm_80  ", e.payload_size, " bytes", compressed, "\n",
      "archs by kind:  cubin sm_80\n", "exports:\n", "  handler cubin_only  function_id ", id,
      "  application", m.exports[0].direct ? "  direct" : "", "\n", "aliases:\n",
      "  also -> cubin_only  function_id ", hex(cudaq_rt_function_id("also")), "\n");
  CHECK(text == expected);
}

TEST_CASE("an input rewritten while it is packed: refused after the temporary package was made, "
          "which is removed") {
  ScratchDir s;
  const fs::path app = s.path / "app", out = s.path / "out";
  fs::copy_file(example_app, app);
  fs::create_directory(out);
  // Another thread keeps giving the file a new mtime, as a writer would: any change between the
  // open and the last check before the blobs are written is caught.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int64_t ns = 1; !done; ++ns) {
      const struct timespec times[2] = {{0, UTIME_OMIT},
                                        {1000000000 + ns / 1000000000, ns % 1000000000}};
      ::utimensat(AT_FDCWD, app.c_str(), times, 0);
    }
  });
  std::string error;
  for (int attempt = 0; attempt < 50 && error.empty(); ++attempt) {
    auto r = pack(options(out, {{app.string(), Role::application, ""}}, "example"));
    if (r)
      fs::remove_all(r->dir);
    else
      error = r.error().str();
    CHECK(entries(out).empty());
  }
  done = true;
  writer.join();
  CHECK(error == "'" + app.string() + "': changed while it was being packed");
}
