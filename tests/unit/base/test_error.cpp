#include "cudaq_rt/error.h"

#include <doctest/doctest.h>

using namespace cudaq_rt;

TEST_CASE("printable ASCII and well-formed UTF-8 print as they are") {
  CHECK(escape("/tmp/app.o") == "/tmp/app.o");
  CHECK(escape("libé→𝄞.a") == "libé→𝄞.a");
  CHECK(quote("app.o") == "'app.o'");
}

TEST_CASE("control characters, backslashes and quotes are escaped") {
  CHECK(escape("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(escape("\x1b[31mred\x07") == "\\x1b[31mred\\x07");
  CHECK(escape(std::string("nul\0x", 5)) == "nul\\x00x");
  CHECK(escape("del\x7f") == "del\\x7f");
  CHECK(escape("back\\slash") == "back\\\\slash");
  CHECK(escape("it's") == "it's");
  CHECK(quote("it's") == "'it\\'s'");
  // C1 controls (CSI is U+009B), though well-formed UTF-8, act on terminals.
  CHECK(escape("\xc2\x9b"
               "31m") == "\\xc2\\x9b31m");
  CHECK(escape("\xc2\xa0") == "\xc2\xa0"); // U+00A0 is not a control
}

TEST_CASE("bytes that are not UTF-8 are escaped one by one") {
  CHECK(escape("\xff") == "\\xff");
  CHECK(escape("a\xc3") == "a\\xc3");                          // truncated sequence
  CHECK(escape("\xc0\xaf") == "\\xc0\\xaf");                   // overlong '/'
  CHECK(escape("\xed\xa0\x80") == "\\xed\\xa0\\x80");          // a surrogate
  CHECK(escape("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80"); // past U+10FFFF
  CHECK(escape("\xe2\x82") == "\\xe2\\x82");
}

TEST_CASE("an error's subject is quoted and escaped; one line whatever the path") {
  Error e = make_error("dir/a\nb.o", "cannot open: No such file or directory");
  CHECK(e.str() == "'dir/a\\nb.o': cannot open: No such file or directory");
  CHECK(make_error("", "no input files").str() == "no input files");
}
