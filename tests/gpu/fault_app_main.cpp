// The host side of the fault handlers' application: it exists to carry their device code in
// __nv_relfatbin, for cudaq-rt-pack.
#include <cstdio>

int main() {
  std::puts("fault handlers for the cudaq-rt-run GPU tests: pack this binary with cudaq-rt-pack");
  return 0;
}
