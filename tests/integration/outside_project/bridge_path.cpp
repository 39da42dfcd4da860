// Links the installed runtime library (cudaq-rt::runtime) and prints where it looks for bridges.
#include "cudaq_rt/bridge.h"

#include <cstdio>

int main() {
  for (const auto &dir : cudaq_rt::bridge_search_path())
    std::printf("%s\n", dir.c_str());
  return 0;
}
