// The host side of the application: it exists to carry the handlers' device code.
#include <cstdio>

int main() {
  std::puts("outside_app: its device code ships in outside.cudaqpkg");
  return 0;
}
