/* Links the installed runtime library's C API (cudaq-rt::runtime) from C, and prints what it
 * says about a package that is not there. */
#include "cudaq_rt/cudaq_rt.h"

#include <stdio.h>

int main(int argc, char **argv) {
  cudaq_rt_code *code = NULL;
  int rc = cudaq_rt_open_package(argc > 1 ? argv[1] : "missing.cudaqpkg", &code);
  printf("%d %s\n", rc, cudaq_rt_last_error());
  cudaq_rt_code_destroy(code);
  return 0;
}
