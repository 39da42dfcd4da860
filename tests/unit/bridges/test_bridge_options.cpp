// The bridges' one parser of their KEY=VALUE[,KEY=VALUE...] options (bridges/common/
// bridge_options.h): what it reads, what it refuses and in which words, and that an edited list
// goes back to text that reads the same.
#include "bridge_options.h"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace cudaq_rt;

namespace {

// The options of `text`, each as "key=value", or the error.
std::vector<std::string> parsed(const std::string &text) {
  BridgeOptions options;
  if (std::string why = options.parse(text); !why.empty())
    return {"error: " + why};
  std::vector<std::string> out;
  for (const BridgeOption &o : options.items())
    out.push_back(o.key + "=" + o.value);
  return out;
}

using List = std::vector<std::string>;

} // namespace

TEST_CASE("options are read in order: empty values, '=' in a value, nothing trimmed") {
  CHECK(parsed("") == List{});
  CHECK(parsed("slots=8") == List{"slots=8"});
  CHECK(parsed("slots=8,slot_size=256,layout=lanes") ==
        List{"slots=8", "slot_size=256", "layout=lanes"});
  CHECK(parsed("bind=") == List{"bind="});
  CHECK(parsed("key=a=b") == List{"key=a=b"});
  CHECK(parsed(" slots = 8") == List{" slots = 8"});
  BridgeOptions options;
  REQUIRE(options.parse("key=a=b, slots =8").empty());
  REQUIRE(options.items().size() == 2);
  CHECK(options.items()[0].key == "key");
  CHECK(options.items()[0].value == "a=b");
  CHECK(options.items()[1].key == " slots ");
  CHECK(options.items()[1].value == "8");
}

TEST_CASE("malformed options are refused, each in one line that names it") {
  const std::string syntax = ": options are KEY=VALUE[,KEY=VALUE...]";
  CHECK(parsed("slots") == List{"error: option 'slots' has no '='" + syntax});
  CHECK(parsed("slots=8,layout") == List{"error: option 'layout' has no '='" + syntax});
  CHECK(parsed("=8") == List{"error: option '=8' has no key" + syntax});
  CHECK(parsed("slots=8,=lanes") == List{"error: option '=lanes' has no key" + syntax});
  CHECK(parsed("slots=8,slots=16") == List{"error: option 'slots' is given twice"});
  CHECK(parsed("port=1,slots=8,port=1") == List{"error: option 'port' is given twice"});
  for (const char *comma_too_many : {",", "slots=8,", ",slots=8", "slots=8,,layout=lanes"}) {
    CAPTURE(comma_too_many);
    CHECK(parsed(comma_too_many) == List{"error: empty option (a comma too many)" + syntax});
  }
}

TEST_CASE("a failed parse leaves no options behind, a new parse replaces the old ones") {
  BridgeOptions options;
  REQUIRE(options.parse("slots=8").empty());
  CHECK(!options.parse("slots=8,slots").empty());
  CHECK(options.items().empty());
  REQUIRE(options.parse("layout=lanes").empty());
  CHECK(options.find("slots") == nullptr);
  REQUIRE(options.find("layout") != nullptr);
  CHECK(*options.find("layout") == "lanes");
}

TEST_CASE("set replaces a value where it stands or appends, and text reads back the same") {
  BridgeOptions options;
  REQUIRE(options.parse("port=5000,slots=8").empty());
  options.set("port", "5002");
  options.set("layout", "lanes");
  CHECK(options.text() == "port=5002,slots=8,layout=lanes");
  options.set("bind", "");
  CHECK(options.text() == "port=5002,slots=8,layout=lanes,bind=");
  BridgeOptions again;
  REQUIRE(again.parse(options.text()).empty());
  CHECK(again.text() == options.text());
  CHECK(BridgeOptions().text() == "");
}

TEST_CASE("instance_config's buffer: the text and its NUL, or AGAIN and the size it needs") {
  const std::string text = "slots=8,layout=lanes";
  char out[32];
  std::memset(out, '#', sizeof out);
  size_t needed = 0;
  CHECK(write_instance_config(text, nullptr, 0, &needed) == CUDAQ_RT_BRIDGE_AGAIN);
  CHECK(needed == text.size() + 1);
  needed = 0;
  CHECK(write_instance_config(text, out, text.size(), &needed) == CUDAQ_RT_BRIDGE_AGAIN);
  CHECK(needed == text.size() + 1);
  CHECK(out[0] == '#'); // untouched
  CHECK(write_instance_config(text, out, text.size() + 1, &needed) == CUDAQ_RT_BRIDGE_OK);
  CHECK(std::string(out) == text);
  CHECK(out[text.size() + 1] == '#');
  CHECK(write_instance_config("", out, 1, &needed) == CUDAQ_RT_BRIDGE_OK);
  CHECK(needed == 1);
  CHECK(out[0] == '\0');
}
