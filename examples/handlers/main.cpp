// The host side of the example handler application. The handlers need no host code: this binary
// exists to carry their device code in __nv_relfatbin, as a real application's would.
#include <cstdio>

int main() {
  std::puts("example handlers: pack this binary with cudaq-rt-pack");
  return 0;
}
