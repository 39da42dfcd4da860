#!/usr/bin/env python3
"""What every tool says about itself: --version names the source revision, the CUDA Toolkit it was
built with and the nvJitLink it loaded; --help ends with the environment variables its man page
documents and a pointer to that page, and names every built-in dispatcher; output that cannot be
written is an error; and every function of the C API has a man page."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOLS = {
    "cudaq-rt-pack": os.environ["CUDAQ_RT_PACK"],
    "cudaq-rt-link": os.environ["CUDAQ_RT_LINK"],
    "cudaq-rt-run": os.environ["CUDAQ_RT_RUN"],
}
MAN = os.environ["CUDAQ_RT_MAN"]


def run(args):
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def man_environment(tool):
    """The variables the man page's ENVIRONMENT section documents, in its order."""
    names, inside = [], False
    with open(os.path.join(MAN, tool + ".1")) as f:
        text = f.read().replace("\\\n", " ")  # mdoc's continued lines
        for line in text.splitlines(keepends=True):
            if line.startswith(".Sh "):
                inside = line.strip() == ".Sh ENVIRONMENT"
            elif inside and line.startswith(".It Ev "):
                names += re.findall(r"[A-Z][A-Z0-9_]+", line[len(".It Ev "):])
    return names


class VersionTest(unittest.TestCase):
    def test_version_names_what_a_bug_report_needs(self):
        pattern = re.compile(r"^(cudaq-rt-\w+) (\d+\.\d+\.\d+) \(source ([0-9a-f]{7,}(-dirty)?|unknown), "
                             r"CUDA (\d+\.\d+\.\d+), nvJitLink (\d+\.\d+) \((/\S+)\)\)\n$")
        seen = set()
        for tool, path in TOOLS.items():
            r = run([path, "--version"])
            self.assertEqual(r.returncode, 0, r.stderr)
            m = pattern.match(r.stdout)
            self.assertIsNotNone(m, r.stdout)
            self.assertEqual(m.group(1), tool)
            # The loaded nvJitLink is the toolkit's major version, and a file that is there.
            self.assertEqual(m.group(5).split(".")[0], m.group(6).split(".")[0])
            self.assertTrue(os.path.isfile(m.group(7)), m.group(7))
            seen.add(r.stdout[len(tool):])
        self.assertEqual(len(seen), 1, seen)  # one build, one story


class HelpTest(unittest.TestCase):
    def test_help_ends_with_the_environment_and_the_man_page(self):
        for tool, path in TOOLS.items():
            r = run([path, "--help"])
            self.assertEqual(r.returncode, 0, r.stderr)
            footer = r.stdout.rstrip("\n").split("\n\n")[-1]
            self.assertIn(f"{tool}(1)", footer)
            documented = man_environment(tool)
            listed = re.findall(r"[A-Z][A-Z0-9_]{3,}", footer.split("See ")[0])
            self.assertEqual(sorted(listed), sorted(documented), tool)

    def test_dispatcher_help_names_every_builtin(self):
        for tool in ("cudaq-rt-link", "cudaq-rt-run"):
            r = run([TOOLS[tool], "--help"])
            line = next(l for l in r.stdout.splitlines() if l.strip().startswith("--dispatcher"))
            self.assertIn("'builtin'", line)
            self.assertIn("'warp'", line)


class UnwritableOutputTest(unittest.TestCase):
    """stdout on /dev/full: each tool says it could not write, in one line, and exits 1."""

    def test_a_failed_write_to_stdout_is_an_error(self):
        pack, link, run_tool = TOOLS["cudaq-rt-pack"], TOOLS["cudaq-rt-link"], TOOLS["cudaq-rt-run"]
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(tmp, "cache"))
            r = subprocess.run([pack, os.environ["CUDAQ_RT_EXAMPLE_APP"], "--name", "ex", "-o", tmp],
                               capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            pkg = os.path.join(tmp, "ex.cudaqpkg")
            cases = [[pack, "--help"], [link, "--help"], [run_tool, "--help"],
                     [link, "--version"], [pack, "--list", pkg, "--json"],
                     [pack, "--list", pkg], [link, pkg, "--arch", "sm_90", "--dry-run", "--json"],
                     [link, "--cache-stats", "--json"]]
            for args in cases:
                with self.subTest(args=args[1:]):
                    # The same command with stdout readable first: it writes something.
                    ok = subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)
                    self.assertEqual(ok.returncode, 0, ok.stderr)
                    self.assertTrue(ok.stdout)
                    with open("/dev/full", "w") as full:
                        r = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True,
                                           timeout=60, env=env)
                    self.assertEqual(r.returncode, 1, r.stderr)
                    tool = os.path.basename(args[0])
                    # The reason where the failed write left one (CLI11's --version write does
                    # not, by the time the tool looks).
                    self.assertRegex(r.stderr, f"^{tool}: error: cannot write to standard output"
                                               "(: No space left on device)?\n$")


class JsonFailureTest(unittest.TestCase):
    """With --json, a failure prints one document on stdout in every tool (error.schema.json)."""

    def test_each_tool_prints_its_failure_as_json(self):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import validate_schema
        schema = validate_schema.load(os.path.join(MAN, "..", "schemas", "error.schema.json"))
        with tempfile.TemporaryDirectory() as tmp:
            missing = os.path.join(tmp, "missing.cudaqpkg")
            env = dict(os.environ, CUDAQ_RT_CACHE_DIR=os.path.join(tmp, "cache"))
            cases = [
                ([TOOLS["cudaq-rt-pack"], "--list", missing, "--json"], 1, "input",
                 f"'{missing}': cannot open: No such file or directory"),
                ([TOOLS["cudaq-rt-link"], missing, "-a", "sm_90", "--json"], 1, "package",
                 f"'{missing}': no such package"),
                ([TOOLS["cudaq-rt-link"], missing, "--json"], 2, "package",
                 "no target arch: give --arch sm_NN[,sm_NN...]"),
                ([TOOLS["cudaq-rt-run"], missing, "--call", "echo", "--json"], 1, "package",
                 None),
            ]
            for cmd, status, key, error in cases:
                with self.subTest(" ".join(cmd[1:])):
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
                    self.assertEqual(r.returncode, status, r.stderr)
                    doc = json.loads(r.stdout)
                    self.assertEqual(validate_schema.validate(schema, doc), [])
                    self.assertEqual((doc["exit_status"], doc[key]), (status, missing))
                    if error:
                        self.assertTrue(doc["error"].startswith(error), doc["error"])
                    # The same line as stderr's.
                    self.assertIn(": error: " + doc["error"] + "\n", r.stderr)


class CApiPagesTest(unittest.TestCase):
    """`man cudaq_rt_FUNC` opens cudaq_rt(3) for every function cudaq_rt.h declares: the install
    writes a page per function named in CUDAQ_RT_C_API_FUNCTIONS (cmake/Install.cmake), and
    cudaq_rt.3 names each in NAME (what apropos finds) and SYNOPSIS. A function added to the header
    without both fails here."""

    def test_every_declared_function_has_a_page(self):
        root = os.path.dirname(os.path.normpath(MAN))
        with open(os.path.join(root, "runtime", "include", "cudaq_rt", "cudaq_rt.h")) as f:
            code = re.sub(r"/\*.*?\*/|//[^\n]*", "", f.read(), flags=re.S)
        declared = set(re.findall(r"\b(cudaq_rt_\w+)\s*\(", code))
        self.assertIn("cudaq_rt_load", declared)
        with open(os.path.join(root, "cmake", "Install.cmake")) as f:
            m = re.search(r"^set\(CUDAQ_RT_C_API_FUNCTIONS\s([^)]*)\)", f.read(), flags=re.M)
        self.assertIsNotNone(m, "cmake/Install.cmake sets no CUDAQ_RT_C_API_FUNCTIONS")
        listed = m.group(1).split()
        self.assertEqual(len(listed), len(set(listed)), "a function listed twice")
        names, synopsis, section = set(), set(), None
        with open(os.path.join(MAN, "cudaq_rt.3")) as f:
            for line in f:
                if line.startswith(".Sh "):
                    section = line[4:].strip()
                elif section == "NAME" and line.startswith(".Nm "):
                    names.add(line.split()[1])
                elif section == "SYNOPSIS" and line.startswith(".Fn "):
                    synopsis.add(line.split()[1])
        for what, found in (("CUDAQ_RT_C_API_FUNCTIONS in cmake/Install.cmake", set(listed)),
                            ("cudaq_rt.3's NAME (.Nm)", names),
                            ("cudaq_rt.3's SYNOPSIS (.Fn)", synopsis)):
            with self.subTest(what):
                self.assertEqual(sorted(declared - found), [], "declared but not in " + what)
                self.assertEqual(sorted(found - declared), [], "in " + what + " but not declared")


if __name__ == "__main__":
    unittest.main(verbosity=2, argv=sys.argv[:1])
