#!/usr/bin/python3
"""cudaq-rt-link's progress line and make's jobserver.

On a terminal (a pty here) the link rewrites one line on stderr, ninja style, "[done/total] step",
and clears it before its results; never into a pipe, nor with NO_COLOR, --quiet or TERM=dumb.
Under GNU make -jN, with the recipe marked '+', it runs at most N things at once (it says how
many with -v) and gives every token back (make says so when one is lost); a recipe make does not
pass the jobserver to is linked as if there were none, with a note that says why.

Environment (set by ctest): CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_EXAMPLE_APP.
"""
import os
import pty
import re
import select
import shutil
import subprocess
import tempfile
import unittest

from harness import EXAMPLE_APP, LINK, PACK, run

NAME = "cudaq_rt_example_app"
STEP = re.compile(rb"\r\x1b\[K\[(\d+)/(\d+)\] ([^\r]*)")


class ProgressTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cudaq-rt-progress-")
        r = run([PACK, EXAMPLE_APP, "-o", cls.tmp])
        assert r.returncode == 0, r.stderr
        cls.pkg = os.path.join(cls.tmp, NAME + ".cudaqpkg")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def link_on_a_terminal(self, *extra, env=None):
        """The link with stderr on a pty (stdout a pipe): exit status, stdout, stderr's bytes."""
        master, slave = pty.openpty()
        e = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        e.update({"TERM": "xterm", **(env or {})})
        p = subprocess.Popen([LINK, self.pkg, "--arch", "sm_80,sm_90", "--no-cache", *extra],
                             stdout=subprocess.PIPE, stderr=slave, env=e)
        os.close(slave)
        err = b""
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                p.kill()
                self.fail("the link did not finish")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the pty's other end closed
                break
            if not chunk:
                break
            err += chunk
        out = p.stdout.read().decode()
        p.wait(60)
        os.close(master)
        return p.returncode, out, err

    def lines(self, err):
        """Each drawing of the line: (done, total, step, seconds)."""
        steps = []
        for d, t, text in STEP.findall(err):
            m = re.fullmatch(r"(.*)  (\d+)s", text.decode())
            self.assertTrue(m, text)  # every drawing ends with the seconds since the link began
            steps.append((int(d), int(t), m.group(1), int(m.group(2))))
        self.assertTrue(steps, err)
        return steps

    def check_counts(self, steps, first_done):
        """One total from the first line on, steps done in order, ending at total/total."""
        self.assertEqual({t for _, t, _, _ in steps}, {steps[0][1]}, steps)
        self.assertEqual(steps[0][0], first_done, steps)
        done = [d for d, _, _, _ in steps]
        self.assertEqual(done, sorted(done))
        # Each step is drawn once as it finishes; the clock's redraws repeat the last one.
        self.assertEqual(sorted(set(done)), list(range(first_done, steps[0][1] + 1)), steps)
        seconds = [s for _, _, _, s in steps]
        self.assertEqual(seconds, sorted(seconds))

    def test_a_line_rewritten_in_place_then_cleared(self):
        rc, out, err = self.link_on_a_terminal()
        self.assertEqual(rc, 0, err)
        steps = self.lines(err)
        # Per TU: the two archs' lookups are counted before the first line, which knows the total
        # (the lookups, every unit of both archs, two final links).
        self.check_counts(steps, 2)
        self.assertEqual(steps[0][2], "linking")
        self.assertIn("sm_90 final link", [s for _, _, s, _ in steps])
        self.assertTrue(err.endswith(b"\r\x1b[K"), err[-40:])  # cleared before the results
        self.assertNotIn("\r", out)
        self.assertRegex(out, r"(?m)^sm_80  linked ")

    def test_a_whole_program_link_shows_its_time(self):
        rc, _, err = self.link_on_a_terminal("--lto", "whole")
        self.assertEqual(rc, 0, err)
        steps = self.lines(err)
        self.check_counts(steps, 0)
        self.assertEqual(steps[0][1], 2)  # one step an arch
        # A link of more than a second is redrawn while it runs, with the time going up.
        if steps[-1][3] >= 2:
            self.assertGreater(len(steps), 3, steps)

    def test_none_where_nobody_watches(self):
        for extra, env in (((), {"NO_COLOR": "1"}), (("--quiet",), {}), ((), {"TERM": "dumb"})):
            rc, _, err = self.link_on_a_terminal(*extra, env=env)
            self.assertEqual(rc, 0, err)
            self.assertNotIn(b"\r", err, (extra, env))
        r = run([LINK, self.pkg, "--arch", "sm_80", "--no-cache"])  # stderr a pipe
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\r", r.stderr)

    @unittest.skipUnless(shutil.which("make"), "no make")
    def test_make_jobserver(self):
        makefile = os.path.join(self.tmp, "Makefile")
        with open(makefile, "w") as f:
            f.write("shared:\n\t+$(LINK) $(PKG) --arch sm_80,sm_90,sm_100 -v -j 8 --no-cache\n"
                    "private:\n\t$(LINK) $(PKG) --arch sm_80 -v --no-cache\n")
        args = ["make", "-f", makefile, f"LINK={LINK}", f"PKG={self.pkg}"]
        for n in (2, 3):
            r = subprocess.run([*args, f"-j{n}", "shared"], capture_output=True, text=True,
                               timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = re.search(r"make's jobserver \(MAKEFLAGS\): at most (\d+) jobs at once", r.stderr)
            self.assertTrue(m, r.stderr)
            self.assertTrue(1 <= int(m.group(1)) <= n, r.stderr)
            self.assertNotIn("jobserver tokens", r.stderr)  # make's word for a token lost
        r = subprocess.run([*args, "-j2", "private"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("that this process did not inherit", r.stderr)
        self.assertIn("mark it with '+'", r.stderr)


if __name__ == "__main__":
    unittest.main()
