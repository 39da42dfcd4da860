#!/usr/bin/python3
"""The README's "Pack and link" commands, run as written (issue 26's first touch): the sh block
of that section, in a scratch directory whose build/ is this build tree and whose link cache is
its own, with bash -e, so that a command that fails fails the test. Then what they say they do:
the package is there, linked for the three archs, and the listing names the example's handlers.

Environment (set by ctest): CUDAQ_RT_BUILD_DIR, the build tree (bin/, examples/).
"""
import os
import re
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "../../README.md")
BUILD = os.environ.get("CUDAQ_RT_BUILD_DIR", os.path.join(HERE, "../../build"))


def section_commands(title):
    """The first ```sh block after the heading `## title`."""
    with open(README) as f:
        text = f.read()
    at = text.index("\n## " + title + "\n")
    m = re.compile(r"```sh\n(.*?)```", re.S).search(text, at)
    assert m, f"no sh block under ## {title}"
    return m.group(1)


class ReadmeTest(unittest.TestCase):
    def test_pack_and_link_runs_as_written(self):
        script = section_commands("Pack and link")
        with tempfile.TemporaryDirectory(prefix="cudaq-rt-readme-") as tmp:
            os.symlink(os.path.abspath(BUILD), os.path.join(tmp, "build"))
            env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
            for k in ("CUDAQ_RT_CACHE_DIR", "CUDAQ_RT_CACHE_DISABLE", "CUDAQ_RT_REMOTE_CACHE"):
                env.pop(k, None)
            r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp, env=env,
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            pkg = os.path.join(tmp, "out", "app.cudaqpkg")
            self.assertTrue(os.path.isfile(os.path.join(pkg, "manifest.json")))
            for arch in ("sm_80", "sm_90", "sm_100"):
                self.assertRegex(r.stdout, rf"(?m)^{arch}\s.*(linked|cache)", r.stdout)
            for handler in ("echo", "sum_i32", "parity"):
                self.assertIn(handler, r.stdout)
            self.assertIn("would load from the package", r.stdout)  # sm_90 was linked above
            self.assertTrue(os.path.isdir(os.path.join(tmp, "xdg", "cudaq-rt")))


if __name__ == "__main__":
    unittest.main()
