#include "cudaq_rt/exports.h"
#include "formats/export_records.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

using namespace cudaq_rt;

namespace {

using Bytes = std::vector<uint8_t>;

cudaq_rt_export_record record(uint16_t kind, const char *name) {
  cudaq_rt_export_record r;
  std::memset(&r, 0, sizeof r);
  r.magic = CUDAQ_RT_EXPORT_MAGIC;
  r.version = CUDAQ_RT_EXPORT_VERSION;
  r.kind = kind;
  r.function_id =
      kind == CUDAQ_RT_EXPORT_HANDLER_KIND || kind == CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND
          ? cudaq_rt_function_id(name)
          : 0;
  r.name_size = uint32_t(std::strlen(name));
  std::memcpy(r.name, name, r.name_size);
  return r;
}

void append(Bytes &b, const cudaq_rt_export_record &r) {
  const uint8_t *p = reinterpret_cast<const uint8_t *>(&r);
  b.insert(b.end(), p, p + sizeof r);
}

Bytes section(std::initializer_list<cudaq_rt_export_record> rs) {
  Bytes b;
  for (const auto &r : rs)
    append(b, r);
  return b;
}

std::string error_of(const Bytes &b) {
  auto r = parse_export_records(b, "app");
  return r ? "" : r.error().str();
}

const std::string at0 = "'app': section .cudaq_rt_exports: record at offset 0x0";

} // namespace

TEST_CASE("handler and dispatch-kernel records are read in order, across zero padding") {
  Bytes b = section({record(CUDAQ_RT_EXPORT_HANDLER_KIND, "add_one")});
  b.resize(b.size() + 24, 0); // padding between translation units
  append(b, record(CUDAQ_RT_EXPORT_DISPATCH_KERNEL_KIND, "my_dispatch"));
  append(b, record(CUDAQ_RT_EXPORT_HANDLER_KIND, "echo"));
  b.resize(b.size() + 8, 0);

  auto r = parse_export_records(b, "app");
  REQUIRE(r);
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].kind == ExportKind::handler);
  CHECK((*r)[0].name == "add_one");
  CHECK((*r)[0].function_id == cudaq_rt_function_id("add_one"));
  CHECK((*r)[0].function_id != 0);
  CHECK((*r)[1].kind == ExportKind::dispatch_kernel);
  CHECK((*r)[1].name == "my_dispatch");
  CHECK((*r)[1].function_id == 0);
  CHECK((*r)[2].name == "echo");
  CHECK((*r)[2].function_id == cudaq_rt_function_id("echo"));
}

TEST_CASE("a global record names a host-set __device__ global") {
  auto r = parse_export_records(section({record(CUDAQ_RT_EXPORT_GLOBAL_KIND, "decoder_table"),
                                         record(CUDAQ_RT_EXPORT_HANDLER_KIND, "decode")}),
                                "app");
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].kind == ExportKind::global);
  CHECK((*r)[0].name == "decoder_table");
  CHECK((*r)[0].function_id == 0);
  CHECK((*r)[1].kind == ExportKind::handler);
  CHECK(error_of(section({record(6, "next_kind")})) == at0 + " has unknown kind 6");
}

TEST_CASE("a bridge-hooks record names an optional set of a bridge's device hooks") {
  auto r =
      parse_export_records(section({record(CUDAQ_RT_EXPORT_BRIDGE_HOOKS_KIND, "lone")}), "bridge");
  REQUIRE(r);
  REQUIRE(r->size() == 1);
  CHECK((*r)[0].kind == ExportKind::bridge_hooks);
  CHECK((*r)[0].name == "lone");
  CHECK((*r)[0].function_id == 0);
  CHECK(std::string(export_kind_name(ExportKind::bridge_hooks)) == "bridge-hooks");
}

TEST_CASE("a concurrent handler record is a handler that says so") {
  auto r = parse_export_records(section({record(CUDAQ_RT_EXPORT_CONCURRENT_HANDLER_KIND, "echo"),
                                         record(CUDAQ_RT_EXPORT_HANDLER_KIND, "count")}),
                                "app");
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].kind == ExportKind::handler);
  CHECK((*r)[0].concurrent);
  CHECK((*r)[0].function_id == cudaq_rt_function_id("echo"));
  CHECK((*r)[1].kind == ExportKind::handler);
  CHECK(!(*r)[1].concurrent);
}

TEST_CASE("a version 2 handler record is callable by name; a version 1 record is not") {
  cudaq_rt_export_record old = record(CUDAQ_RT_EXPORT_HANDLER_KIND, "legacy");
  old.version = 1;
  auto r = parse_export_records(section({record(CUDAQ_RT_EXPORT_HANDLER_KIND, "echo"), old,
                                         record(CUDAQ_RT_EXPORT_GLOBAL_KIND, "table")}),
                                "app");
  REQUIRE(r);
  REQUIRE(r->size() == 3);
  CHECK((*r)[0].direct);
  CHECK(!(*r)[1].direct);
  CHECK((*r)[1].kind == ExportKind::handler);
  CHECK(!(*r)[2].direct);
}

TEST_CASE("an empty or all-zero section holds no records") {
  auto empty = parse_export_records({}, "app");
  REQUIRE(empty);
  CHECK(empty->empty());
  auto zeros = parse_export_records(Bytes(300, 0), "app");
  REQUIRE(zeros);
  CHECK(zeros->empty());
}

TEST_CASE("names and symbols") {
  CHECK(std::string(export_kind_name(ExportKind::handler)) == "handler");
  CHECK(std::string(export_kind_name(ExportKind::dispatch_kernel)) == "dispatch-kernel");
  CHECK(std::string(export_kind_name(ExportKind::global)) == "global");
  CHECK(handler_symbol("add_one") == "cudaq_rt_handler__add_one");
  CHECK(handler_call_symbol("add_one") == "cudaq_rt_handler_call__add_one");
}

TEST_CASE("a name of the longest size that fits is accepted") {
  std::string longest(CUDAQ_RT_EXPORT_NAME_CAPACITY - 1, 'n');
  auto r =
      parse_export_records(section({record(CUDAQ_RT_EXPORT_HANDLER_KIND, longest.c_str())}), "app");
  REQUIRE(r);
  CHECK((*r)[0].name == longest);
}

TEST_CASE("export names are C identifiers") {
  CHECK(is_c_identifier("sum_i32"));
  CHECK(is_c_identifier("_x9"));
  CHECK_FALSE(is_c_identifier(""));
  CHECK_FALSE(is_c_identifier("9x"));
  CHECK_FALSE(is_c_identifier("a.b"));
  CHECK_FALSE(is_c_identifier("../x"));
}

TEST_CASE("malformed records get exact messages") {
  auto good = record(CUDAQ_RT_EXPORT_HANDLER_KIND, "add_one");

  SUBCASE("bad magic") {
    Bytes b = section({good});
    b.push_back('x');
    CHECK(error_of(b) == "'app': section .cudaq_rt_exports: no export record at offset 0x80 "
                         "(bad magic)");
    auto r = good;
    r.magic = 0x12345678;
    CHECK(error_of(section({r})) ==
          "'app': section .cudaq_rt_exports: no export record at offset 0x0 (bad magic)");
  }
  SUBCASE("truncated") {
    Bytes b = section({good, good});
    b.resize(128 + 100);
    CHECK(error_of(b) == "'app': section .cudaq_rt_exports: record at offset 0x80 is truncated: "
                         "100 of 128 bytes");
    Bytes four = section({good});
    four.resize(4);
    CHECK(error_of(four) == at0 + " is truncated: 4 of 128 bytes");
  }
  SUBCASE("bad version") {
    auto r = good;
    r.version = 3;
    CHECK(error_of(section({r})) == at0 + " has version 3; this cudaq-rt reads versions 1 to 2");
    r.version = 0;
    CHECK(error_of(section({r})) == at0 + " has version 0; this cudaq-rt reads versions 1 to 2");
  }
  SUBCASE("malformed name") {
    auto empty = good;
    empty.name_size = 0;
    CHECK(error_of(section({empty})) == at0 + " has a malformed name");
    auto too_long = good;
    too_long.name_size = CUDAQ_RT_EXPORT_NAME_CAPACITY;
    CHECK(error_of(section({too_long})) == at0 + " has a malformed name");
    auto huge = good;
    huge.name_size = 0xFFFFFFFFu;
    CHECK(error_of(section({huge})) == at0 + " has a malformed name");
    auto unterminated = good;
    std::memset(unterminated.name, 'n', CUDAQ_RT_EXPORT_NAME_CAPACITY);
    unterminated.name_size = 7;
    CHECK(error_of(section({unterminated})) == at0 + " has a malformed name");
    // A name that fills all 112 bytes, no NUL, and says so: a bound of `> CAPACITY` instead of
    // `>= CAPACITY` reads the byte past the record's name (the asan preset says so; elsewhere a 0
    // there would have it accepted).
    auto full = good;
    std::memset(full.name, 'n', CUDAQ_RT_EXPORT_NAME_CAPACITY);
    full.name_size = CUDAQ_RT_EXPORT_NAME_CAPACITY;
    CHECK(error_of(section({full})) == at0 + " has a malformed name");
    auto short_size = good; // "add_one" is 7 bytes, the record says 3
    short_size.name_size = 3;
    CHECK(error_of(section({short_size})) == at0 + " has a malformed name");
    auto embedded_nul = good; // "add\0one" with size 7
    embedded_nul.name[3] = '\0';
    CHECK(error_of(section({embedded_nul})) == at0 + " has a malformed name");
    for (const char *bad : {"../../up", "a-b", "9lives", "caf\xc3\xa9"}) {
      auto r = record(CUDAQ_RT_EXPORT_HANDLER_KIND, bad);
      CHECK_MESSAGE(error_of(section({r})) == at0 + " has a malformed name", bad);
    }
  }
  SUBCASE("wrong function_id") {
    auto r = good;
    r.function_id = 0x1234;
    CHECK(error_of(section({r})) ==
          at0 + ": handler 'add_one' records function_id 0x1234 but FNV-1a of its name is " +
              hex(cudaq_rt_function_id("add_one")));
  }
  SUBCASE("unknown kind") {
    auto r = good;
    r.kind = 7;
    CHECK(error_of(section({r})) == at0 + " has unknown kind 7");
  }
  SUBCASE("an error in a later record names its offset") {
    auto r = good;
    r.kind = 0;
    Bytes b = section({good});
    b.resize(b.size() + 8, 0);
    append(b, r);
    CHECK(error_of(b) ==
          "'app': section .cudaq_rt_exports: record at offset 0x88 has unknown kind 0");
  }
}
