#!/usr/bin/python3
"""cudaq-rt-client run from the source tree (python/cudaq_rt_client) or from an installed tree
(bin/cudaq-rt-client, the package in lib/cudaq-rt/python). `pip install ./python` installs the
package and the command the usual way; see cudaq-rt-client(1).

Imported by path, this file is the package's public API, as it was before the package existed."""
import os
import sys

_HERE = os.path.dirname(os.path.realpath(__file__))
for _root in (os.path.join(_HERE, "..", "python"),
              os.path.join(_HERE, "..", "lib", "cudaq-rt", "python")):
    if os.path.isfile(os.path.join(_root, "cudaq_rt_client", "__init__.py")):
        sys.path.insert(0, os.path.normpath(_root))
        break

from cudaq_rt_client import *  # noqa: E402,F401,F403
from cudaq_rt_client.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
