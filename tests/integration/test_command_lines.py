#!/usr/bin/python3
"""Every command line the README and the man pages print, run with real files, so that a line the
tools no longer take fails here:

  * the README's sh blocks, in order, in one scratch directory (they go on from each other), whose
    build/ is this build tree and examples/ the source's examples/;
  * each man page's EXAMPLES ($ lines), its .Dl lines that are commands, and the shell blocks of a
    section-7 guide, in page order, in a scratch directory of its own;
  * the option orders the tools once refused.

A line runs in bash -o pipefail, in the directory and with the variables the lines before it left
(set -a, so a plain assignment carries on too). It must exit 0, except a line that needs a GPU on a
machine without one: cudaq-rt-run that loads (not --list) exits 1 naming the missing driver or
GPU, and cudaq-rt-client, with no server to answer, exits 1 naming that. Exit status 2, a usage
error, always fails. With a GPU, a --serve line runs in the background until the next --serve
line or the end of its block, then gets SIGINT and must exit 0; the client lines between talk to
it.

Names the text leaves to the reader are made real by the tables below, and by nothing else:
README_SUBSTITUTIONS and a page's `substitutions` replace a placeholder in the text, `files` put a
real file under the name a line uses, `env` sets a variable the text leaves to the reader, and
README_SKIP and MAN_SKIP hold the lines that cannot run here, each with its reason.

Environment (set by ctest): CUDAQ_RT_BUILD_DIR (the build tree), JITLINK_CLIENT, NVCC, CMAKE,
DOCKER_REGISTRY (the README's part skips without it), NGINX (without one with WebDAV, the README's
remote cache is a server that is down). CUDAQ_RT_README and CUDAQ_RT_MAN point the test at another
README or man directory, e.g. a copy with a line broken on purpose, which must fail.
"""
import atexit
import ctypes
import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from registry import Registry, registry_available  # noqa: E402
from test_remote_cache import Nginx, nginx_has_dav  # noqa: E402

SOURCE = os.path.normpath(os.path.join(HERE, "../.."))
BUILD = os.path.abspath(os.environ.get("CUDAQ_RT_BUILD_DIR") or os.path.join(SOURCE, "build"))
README = os.environ.get("CUDAQ_RT_README") or os.path.join(SOURCE, "README.md")
MAN = os.environ.get("CUDAQ_RT_MAN") or os.path.join(SOURCE, "man")
JITLINK_CLIENT = os.environ.get("JITLINK_CLIENT") or os.path.join(BUILD, "tests", "jitlink_client")
NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
CMAKE = os.environ.get("CMAKE") or shutil.which("cmake") or "cmake"

TOOLS = os.path.join(BUILD, "bin")
INCLUDE = os.path.join(SOURCE, "libdispatch", "include")
EXAMPLE_APP = os.path.join(BUILD, "examples", "cudaq_rt_example_app")
UNIT_INPUTS = os.path.join(BUILD, "tests", "unit_inputs")
RPC_ARCHIVE = os.path.join(BUILD, "examples", "libcudaq_rt_example_rpc_increment.a")
LOOPBACK_BRIDGE = os.path.join(BUILD, "lib", "cudaq-rt", "bridges",
                               "libcudaq_rt_bridge_loopback.so")
INTERPOSER = os.path.join(BUILD, "lib", "libcudaq_rt_nvjitlink_cu13.so")
LINE_TIMEOUT = 300

REGISTRY_USER, REGISTRY_PASSWORD = "user", "password"


def cuda_gpus():
    """The GPUs the CUDA driver sees: 0 without a driver (libcuda.so.1) or without a device."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


GPUS = cuda_gpus()

# What a line that needs a GPU prints on a machine without one.
NO_GPU = r"no CUDA driver|CUDA_ERROR_NO_DEVICE|no GPU"
NO_SERVER = r"Connection refused|no answer"

# ---------------------------------------------------------------------------------------------
# The tables.

# The README's placeholders: what stands in for each, in every sh block. {scratch} is the
# directory the blocks run in, {registry} a registry started here (distribution's, with basic auth
# whose credentials REG_AUTH holds, so #basic-env=REG_AUTH is used for real), {remote_cache} nginx
# with WebDAV (else a server that is down, which costs a warning and never the link).
README_SUBSTITUTIONS = {
    "registry.internal": "{registry}",
    "/opt/app": "{scratch}/opt/app",
    "/opt/cudaq-rt": "{scratch}/opt/cudaq-rt",
    "URL": "{remote_cache}",
}
README_SKIP = {
    "bash scripts/run-example.sh": "sets up and builds the tree the test is given",
    "bash scripts/test.sh": "builds and runs every test, this one among them",
}

# Answers a client line gets from a server, where they are not ok (status 0).
CLIENT_STATUS = {
    "--raw": (4, "truncated"),  # a header that claims more payload than the datagram holds
}


class Copy:
    """A copy of a file of the build or source tree."""

    def __init__(self, path):
        self.path = path

    def make(self, dest, page):
        shutil.copy(self.path, dest)

    def __repr__(self):
        return f"a copy of {os.path.relpath(self.path, os.path.dirname(BUILD))}"


class Symlink(Copy):
    """A link to a directory of the build or source tree."""

    def make(self, dest, page):
        os.symlink(self.path, dest)

    def __repr__(self):
        return f"a link to {os.path.relpath(self.path, os.path.dirname(BUILD))}"


class Text:
    """A file of the test's own, with this text."""

    def __init__(self, text, what):
        self.text, self.what = text, what

    def make(self, dest, page):
        with open(dest, "w") as f:
            f.write(self.text)

    def __repr__(self):
        return self.what


class Packed:
    """The example application packed under the name the line uses (NAME.cudaqpkg)."""

    def make(self, dest, page):
        name = os.path.basename(dest)[:-len(".cudaqpkg")]
        check([os.path.join(TOOLS, "cudaq-rt-pack"), EXAMPLE_APP, "-o", os.path.dirname(dest),
               "-n", name], env=page.env)

    def __repr__(self):
        return "the example application, packed"


class JitApp:
    """A program that links the example's device code through nvJitLink at its start, as a CUDA-Q
    realtime application does: a script that execs jitlink_client through a link named `app`, so
    that the process's name (/proc/self/comm, which names a recording) is `app`, with the inputs
    cudaq-rt-link gives nvJitLink for the example's whole-program sm_90 link."""

    def make(self, dest, page):
        inputs = jit_inputs()
        program = os.path.join(os.path.dirname(dest), ".jit", "app")
        os.makedirs(os.path.dirname(program), exist_ok=True)
        if not os.path.islink(program):
            os.symlink(os.path.abspath(JITLINK_CLIENT), program)
        args = ["-O", "-arch=sm_90", "-O", "-lto"]
        args += [a for kind, path in inputs for a in ("--data", f"{kind}:{path}")]
        with open(dest, "w") as f:
            f.write(f'#!/bin/sh\nexec {shlex.quote(program)} -o "$0.cubin" {shlex.join(args)}\n')
        os.chmod(dest, 0o755)

    def __repr__(self):
        return "a program that links through nvJitLink (jitlink_client, named app)"


class Recording:
    """What CUDAQ_RT_NVJITLINK_RECORD writes for JitApp's link: a package of its inputs."""

    def make(self, dest, page):
        where = os.path.join(page.scratch, ".recording")
        JitApp().make(os.path.join(where, "app"), page)
        env = dict(page.env, CUDAQ_RT_NVJITLINK_RECORD=os.path.join(where, "rec"),
                   LD_PRELOAD=INTERPOSER)
        check([os.path.join(where, "app")], cwd=where, env=env)
        [recorded] = glob.glob(os.path.join(where, "rec", "app-*.cudaqpkg"))
        os.rename(recorded, dest)

    def __repr__(self):
        return "a recording of that program's link (CUDAQ_RT_NVJITLINK_RECORD)"


class PageBlock:
    """The literal block of the page that begins with this line (code the page shows)."""

    def __init__(self, first_line):
        self.first_line = first_line

    def make(self, dest, page):
        block = next((b for b in page.blocks if b and b[0] == self.first_line), None)
        assert block, f"{page.name}: no literal block begins with {self.first_line!r}"
        with open(dest, "w") as f:
            f.write("\n".join(block) + "\n")

    def __repr__(self):
        return f"the page's block that begins {self.first_line!r}"


class PageOutput:
    """The lines the page shows after `$ COMMAND` (the file that `$ cat FILE` prints)."""

    def __init__(self, command):
        self.command = command

    def make(self, dest, page):
        for block in page.blocks:
            if "$ " + self.command in block:
                rest = block[block.index("$ " + self.command) + 1:]
                shown = []
                for l in rest:
                    if l.startswith("$ "):
                        break
                    shown.append(l)
                with open(dest, "w") as f:
                    f.write("\n".join(shown) + "\n")
                return
        raise AssertionError(f"{page.name}: no `$ {self.command}`")

    def __repr__(self):
        return f"what the page shows `{self.command}` print"


HANDLERS_CU = Text(r'''#include "cudaq_rt/exports.h"

#include <stdint.h>

static __device__ int sum_i32(const void *in, void *out, uint32_t arg_len,
                              uint32_t max_result_len, uint32_t *result_len) {
  if (arg_len % 4 != 0 || max_result_len < 8)
    return 1;
  long long s = 0;
  for (uint32_t i = 0; i < arg_len / 4; ++i)
    s += static_cast<const int32_t *>(in)[i];
  *static_cast<long long *>(out) = s;
  *result_len = 8;
  return 0;
}
CUDAQ_RT_EXPORT_HANDLER(sum_i32, sum_i32);
''', "a handler, sum_i32")
MAIN_CPP = Text("int main() { return 0; }\n", "an empty main")


class Page:
    """What a man page's lines presume: `files` made before its first line under the names the
    lines use, `substitutions` of placeholders in its text ({scratch}: its directory,
    {remote_cache}: nginx with WebDAV or a server that is down), and `env`, variables the text
    leaves to the reader."""

    def __init__(self, files=None, substitutions=None, env=None):
        self.files, self.substitutions, self.env_given = files or {}, substitutions or {}, env or {}


MAN_PAGES = {
    "cudaq-rt-pack.1": Page(
        files={"app": Copy(EXAMPLE_APP), "libcudaq_rt_bridge_loopback.so": Copy(LOOPBACK_BRIDGE),
               "mykernel.o": Copy(os.path.join(UNIT_INPUTS, "dispatcher.o")),
               "librpc.a": Copy(RPC_ARCHIVE), "libhandlers.a": Copy(RPC_ARCHIVE),
               "handlers.cu": HANDLERS_CU},
        # Its nvcc line has no -I: it presumes the headers where the compiler looks.
        env={"CPATH": INCLUDE}),
    "cudaq-rt-link.1": Page(
        files={"build/app": Copy(EXAMPLE_APP), "libmy_bridge.so": Copy(LOOPBACK_BRIDGE)},
        substitutions={"/tmp/link": "{scratch}/tmp/link"}),
    "cudaq-rt-run.1": Page(
        files={"build": Symlink(BUILD), "examples": Symlink(os.path.join(SOURCE, "examples")),
               "app": Copy(EXAMPLE_APP),
               "libblock_dispatch.a": Copy(os.path.join(BUILD, "examples",
                                                        "libcudaq_rt_example_block_dispatch.a")),
               "calls.txt": PageOutput("cat calls.txt")}),
    "cudaq-rt-client.1": Page(files={"out/example.cudaqpkg": Packed()}),
    "cudaq-rt-package.5": Page(files={"app.cudaqpkg": Packed()}),
    "cudaq-rt.7": Page(files={"main.cpp": MAIN_CPP, "handlers.cu": HANDLERS_CU},
                       substitutions={"/opt/cudaq-rt/include": INCLUDE}),
    "cudaq-rt-bridge.7": Page(
        files={"mailbox.cu": PageBlock("/* libcudaq_rt_bridge_mailbox.so */"),
               "app": Copy(EXAMPLE_APP), "out/app.cudaqpkg": Packed()},
        substitutions={"/opt/cudaq-rt/include": INCLUDE}),
    "cudaq-rt-nvjitlink.7": Page(
        files={"app": JitApp(), "my_cudaq_realtime_app": JitApp(), "REC.cudaqpkg": Recording()},
        substitutions={".../libnvJitLink.so.13": "{nvjitlink}"},
        env={"LIBDIR": os.path.join(BUILD, "lib"), "URL": "{remote_cache}"}),
    "cudaq-rt-cmake.7": Page(),
}
# (page, pattern a line matches, why it does not run here)
MAN_SKIP = [
    ("cudaq-rt-cmake.7", r"^cmake -B build ",
     "configures and builds a project of its own; tests/integration/test_cmake_package.py builds "
     "tests/integration/outside_project against an install the same way"),
    ("cudaq-rt-nvjitlink.7",
     r"^(site=|lib=\$site|mv \$lib/|ln -s /usr/local/lib/|export CUDAQ_RT_NVJITLINK_REAL=)",
     "replaces the library of a Python site's nvidia-nvjitlink wheel in place; "
     "tests/interpose/test_nvjitlink_versions.py stands the interposer in for that library"),
    ("cudaq-rt-bridge.7", r" Ar name ",
     "a template (Ar name); the page's EXAMPLES pack the mailbox bridge this way"),
]

# Option orders and forms the tools once refused, each run with real files: PKG the example's
# package, APP the example application, ci.pem and ci.pub a key pair. The line under --trust
# comes after the lines that check the signature: its cache entry is unsigned, so under --trust it
# is a miss, and the relink's new record breaks the package's signature (the tool warns).
OPTION_ORDERS = [
    "cudaq-rt-link -a sm_90 PKG",
    "cudaq-rt-link PKG --sign ci.pem",
    "cudaq-rt-run --trust ci.pub PKG --list --arch sm_90",
    "cudaq-rt-pack --list --verify ci.pub PKG",
    "cudaq-rt-link --trust=ci.pub PKG -a sm_90",
    "cudaq-rt-pack --alias a=echo APP -o DIR",
    "cudaq-rt-link PKG -j -a sm_80",
    "cudaq-rt-link -j PKG -a sm_80",
]
# Lines whose output must be the same: a repeated option and its list.
SAME_OUTPUT = [("cudaq-rt-link --dry-run PKG -a sm_80 -a sm_90",
                "cudaq-rt-link --dry-run PKG -a sm_80,sm_90")]

# ---------------------------------------------------------------------------------------------
# Reading the command lines.


def strip_comment(line):
    """The line without its comment: a # that begins a word (at the start, or after whitespace),
    outside quotes. A # inside a word (oci://host/x:1#basic-env=VAR) is part of it."""
    quote = None
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
        i += 1
    return line.rstrip()


def shell_lines(block):
    """The command lines of a sh block: lines that end in a backslash joined to the next, comments
    dropped, blank lines left out."""
    out, pending = [], ""
    for raw in block.splitlines():
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        line = strip_comment(pending + raw).strip()
        pending = ""
        if line:
            out.append(line)
    return out


def readme_blocks(text):
    """[(heading, [command line])] of every ```sh block, in order."""
    out = []
    for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M):
        prose = re.sub(r"^```.*?^```", "", text[:m.start()], flags=re.S | re.M)
        heading = (re.findall(r"^#{1,6} (.*)$", prose, re.M) or ["README"])[-1]
        out.append((heading, shell_lines(m.group(1))))
    return out


def roff(text):
    r"""Literal text of a roff line: \e is a backslash, \& nothing, \- a minus."""
    return re.sub(r"\\([e&-])", lambda m: {"e": "\\", "&": "", "-": "-"}[m[1]], text)


def words(line):
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
COMMANDS = {"cudaq-rt-pack", "cudaq-rt-link", "cudaq-rt-run", "cudaq-rt-client", "openssl",
            "cmake", "nvcc", "cd", "export", "mv", "ln", "cat", "for"}


def command(line):
    """The program a line runs first (past VAR=value words); '' for a line of assignments."""
    for w in words(line):
        if not ASSIGNMENT.match(w):
            return w
    return ""


def is_command_line(line):
    """A line of a shell: it begins with an assignment, a command of COMMANDS or ./PROGRAM."""
    if ASSIGNMENT.match(line.lstrip()):
        return True
    name = command(line)
    return name in COMMANDS or name.startswith("./")


class ManPage:
    r"""A man page's command lines, [(line number, text)] in page order: the $ lines of the
    literal blocks of EXAMPLES (a line that ends in \e goes on on the next), the .Dl lines that
    are commands, and in a section-7 guide, literal blocks that are shell scripts (every line a
    command or a # comment). Also its literal blocks, as text, for the files it shows."""

    def __init__(self, path):
        self.name = os.path.basename(path)
        with open(path) as f:
            source = f.read().splitlines()
        self.lines, self.blocks = [], []
        section, i = None, 0
        while i < len(source):
            raw = source[i]
            if raw.startswith(".Sh "):
                section = raw[4:].strip()
            elif raw.startswith(".Dl ") and is_command_line(roff(raw[4:])):
                self.lines.append((i + 1, roff(raw[4:]).strip()))
            elif raw.startswith(".Bd -literal"):
                start = i + 1
                while not source[i + 1].startswith(".Ed"):
                    i += 1
                block = source[start:i + 1]
                self.blocks.append([roff(l) for l in block])
                if section == "EXAMPLES":
                    self.lines += prompted_lines(start + 1, block)
                elif self.name.endswith(".7"):
                    self.lines += script_lines(start + 1, block)
            i += 1


def prompted_lines(first, block):
    r"""[(line number, command)] of the `$ ` lines of a literal block (first: the number of its
    first line); a line that ends in \e goes on on the next."""
    out, pending = [], None
    for n, raw in enumerate(block, first):
        if pending is None and not raw.startswith("$ "):
            continue  # what the command printed
        pending = [n, raw[2:]] if pending is None else [pending[0], pending[1] + " " + raw.strip()]
        if pending[1].endswith("\\e"):
            pending[1] = pending[1][:-2].rstrip()
        else:
            out.append((pending[0], roff(pending[1]).strip()))
            pending = None
    return out


def script_lines(first, block):
    """[(line number, command)] of a literal block that is a shell script, every line of it a
    command or a # comment; [] for any other block (code, a format, output)."""
    texts = [roff(l) for l in block]
    if not any(t.strip() for t in texts) or not all(
            not t.strip() or t.lstrip().startswith("#") or is_command_line(t) for t in texts):
        return []
    return [(n, t.strip()) for n, t in enumerate(texts, first)
            if t.strip() and not t.lstrip().startswith("#")]


# ---------------------------------------------------------------------------------------------
# Running them.


def check(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=LINE_TIMEOUT, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


_JIT_INPUTS = []


def jit_inputs():
    """[(nvJitLink input type, path)] of the example's whole-program sm_90 link, as cudaq-rt-link
    gives them to nvJitLink (--save-temps): the dispatch kernel's fatbin, the direct-call unit's
    LTO-IR, the application's fatbins. Made once."""
    if not _JIT_INPUTS:
        tmp = tempfile.mkdtemp(prefix="cudaq-rt-command-lines-jit.")
        atexit.register(shutil.rmtree, tmp, True)
        env = dict(os.environ, CUDAQ_RT_CACHE_DISABLE="1")
        check([os.path.join(TOOLS, "cudaq-rt-pack"), EXAMPLE_APP, "-o", tmp, "-n", "app"], env=env)
        check([os.path.join(TOOLS, "cudaq-rt-link"), os.path.join(tmp, "app.cudaqpkg"), "-a",
               "sm_90", "--lto", "whole", "--no-store", "--save-temps",
               os.path.join(tmp, "temps")], env=env)
        d = os.path.join(tmp, "temps", "sm_90")
        fatbins = sorted(glob.glob(os.path.join(d, "*.fatbin")),  # N-DIGEST.fatbin, in link order
                         key=lambda f: int(os.path.basename(f).split("-")[0]))
        _JIT_INPUTS.append(("fatbin", fatbins[0]))
        _JIT_INPUTS.append(("ltoir", os.path.join(d, "direct_calls.ltoir")))
        _JIT_INPUTS.extend(("fatbin", f) for f in fatbins[1:])
    return _JIT_INPUTS


def real_nvjitlink():
    """The libnvJitLink.so.13 the programs here load (jitlink_client's)."""
    out = check(["ldd", JITLINK_CLIENT])
    m = re.search(r"libnvJitLink\.so\.13 => (\S+)", out)
    assert m, out
    return m.group(1)


def base_env(scratch):
    """The environment lines start with: no CUDAQ_RT_* variable, a cache directory of the
    scratch directory's own, nvcc and cmake on the PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDAQ_RT_")}
    env.pop("LD_PRELOAD", None)
    env["XDG_CACHE_HOME"] = os.path.join(scratch, "xdg")
    env["no_proxy"] = "127.0.0.1"
    dirs = [os.path.dirname(p) for p in (NVCC, CMAKE) if os.path.isabs(p)]
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "/usr/bin:/bin")])
    return env


def substitute(line, table, values):
    """The line with each placeholder of the table (a whole word, not a $VARIABLE) replaced, and
    the placeholders it held."""
    used = set()
    for placeholder, replacement in table.items():
        before = r"(?<![\w$])" if re.match(r"\w", placeholder) else ""
        pattern = before + re.escape(placeholder) + r"(?![\w])"
        if re.search(pattern, line):
            used.add(placeholder)
            line = re.sub(pattern, lambda _: replacement.format(**values), line)
    return line, used


def devices_named(ws):
    """How many GPUs a --device LIST needs (its highest index + 1); 1 without one."""
    for i, w in enumerate(ws):
        if w == "--device" and i + 1 < len(ws) and re.fullmatch(r"[0-9,]+", ws[i + 1]):
            return max(int(d) for d in ws[i + 1].split(",")) + 1
    return 1


class Session:
    """A shell that goes on from line to line: each line runs in a bash of its own, and the
    directory and variables it ends with carry on to the next. --serve lines run in the
    background (with a GPU) until stop_servers."""

    def __init__(self, test, where, cwd, env, given="", remote_down=False):
        self.test, self.where, self.cwd, self.env, self.given = test, where, cwd, env, given
        self.remote_down = remote_down  # the remote cache is a server that is down
        self.state = os.path.join(cwd, ".session-state")
        self.servers = []  # (line, Popen, log path)
        self.transcript = []  # (line, exit status, output)

    def run(self, line):
        ws = words(line)
        tool = command(line)
        if tool == "cudaq-rt-run" and "--serve" in ws:
            self.stop_servers()
            if GPUS >= devices_named(ws):
                self._serve(line)
                return
        script = (f"set -a\n{line}\n__cudaq_rt_status=$?\nenv -0 > {shlex.quote(self.state)}\n"
                  "exit $__cudaq_rt_status\n")
        r = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=self.cwd, env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=LINE_TIMEOUT)
        self._take_state()
        self._judge(line, ws, tool, r.returncode, r.stdout)

    def _take_state(self):
        if not os.path.exists(self.state):
            return
        with open(self.state) as f:
            pairs = [e.split("=", 1) for e in f.read().split("\0") if "=" in e]
        os.unlink(self.state)
        self.env = {k: v for k, v in pairs if k not in ("__cudaq_rt_status", "_", "SHLVL")}
        self.cwd = self.env.get("PWD", self.cwd)

    def _serve(self, line):
        """Starts a --serve line in the background and waits until it serves; one that ends
        first is judged as any line."""
        log = os.path.join(self.cwd, f".serve-{len(self.servers)}-{len(self.transcript)}.log")
        with open(log, "w") as out:
            proc = subprocess.Popen(["bash", "-c", "set -a\nexec " + line], cwd=self.cwd,
                                    env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + LINE_TIMEOUT
        while time.time() < deadline:
            with open(log) as f:
                text = f.read()
            if proc.poll() is not None:
                self._judge(line, words(line), "cudaq-rt-run", proc.returncode, text)
                return
            if "serving on" in text:
                self.servers.append((line, proc, log))
                self.transcript.append((line, "serving", text))
                return
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        self.test.fail(self._report(line, "did not start serving", open(log).read()))

    def stop_servers(self):
        """SIGINT to every server started; each must exit 0."""
        for line, proc, log in self.servers:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            with open(log) as f:
                text = f.read()
            self.transcript.append((line + "   (SIGINT)", proc.returncode, text))
            if proc.returncode != 0:
                self.test.fail(self._report(line, f"exit {proc.returncode} after SIGINT", text))
        self.servers = []

    def close(self):
        """Ends the servers a failed line left running."""
        for _, proc, _ in self.servers:
            proc.kill()
            proc.wait()
        self.servers = []

    def _judge(self, line, ws, tool, status, output):
        self.transcript.append((line, status, output))
        want, pattern = 0, None
        if tool == "cudaq-rt-client":
            if not self.servers:
                want, pattern = 1, NO_SERVER
            else:
                for option, (s, p) in CLIENT_STATUS.items():
                    if option in ws:
                        want, pattern = s, p
        elif tool == "cudaq-rt-link" and "--cache-push" in ws and self.remote_down:
            want, pattern = 1, r"remote cache .*connect"  # a push has nothing to fall back on
        elif tool == "cudaq-rt-run" and "--list" not in ws:
            if GPUS == 0:
                want, pattern = 1, NO_GPU
            elif GPUS < devices_named(ws):
                want, pattern = 1, r"(?i)device|GPU"
        if status == 2:
            self.test.fail(self._report(line, "a usage error (exit 2)", output))
        if status != want or (pattern and not re.search(pattern, output)):
            expected = f"exit {want}" + (f" and output matching /{pattern}/" if pattern else "")
            self.test.fail(self._report(line, f"exit {status}; expected {expected}", output))

    def _report(self, line, what, output):
        before = "".join(f"  $ {l}   -> {s}\n" for l, s, _ in self.transcript[:-1][-12:])
        return (f"{self.where}: `{line}`: {what}\n{self.given}(in {self.cwd}; lines before it:)\n"
                f"{before}--- its output:\n{output[-4000:]}")

    def output_of(self, pattern):
        """The output of the last line the pattern matches."""
        for line, _, output in reversed(self.transcript):
            if re.search(pattern, line):
                return output
        raise AssertionError(f"{self.where}: no line matches /{pattern}/")


class RemoteCache:
    """nginx with WebDAV (else the URL of a server that is down) for --remote-cache URL."""

    def __init__(self, tmp):
        self.nginx = Nginx(os.path.join(tmp, "nginx")) if nginx_has_dav() else None
        self.url = self.nginx.url("cache/") if self.nginx else "http://127.0.0.1:1/"

    def entries(self):
        return glob.glob(os.path.join(self.nginx.root, "cache", "**", "*"), recursive=True)

    def stop(self):
        if self.nginx:
            self.nginx.stop()


# ---------------------------------------------------------------------------------------------
# The tests.


class CommandLines(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="cudaq-rt-command-lines.")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def scratch(self, name):
        path = os.path.join(self.tmp, name)
        os.makedirs(path)
        return path

    @unittest.skipUnless(registry_available(), "no docker-registry (Debian's package of it)")
    def test_readme(self):
        with open(README) as f:
            blocks = readme_blocks(f.read())
        scratch = self.scratch("readme")
        os.symlink(BUILD, os.path.join(scratch, "build"))
        os.symlink(os.path.join(SOURCE, "examples"), os.path.join(scratch, "examples"))
        os.makedirs(os.path.join(scratch, "opt"))
        registry = Registry(os.path.join(self.tmp, "registry"), user=REGISTRY_USER,
                            password=REGISTRY_PASSWORD)
        self.addCleanup(registry.close)
        remote = RemoteCache(self.tmp)
        self.addCleanup(remote.stop)
        JitApp().make(os.path.join(scratch, "app"), None)
        values = dict(scratch=scratch, registry=registry.url, remote_cache=remote.url)
        env = dict(base_env(scratch), REG_AUTH=f"{REGISTRY_USER}:{REGISTRY_PASSWORD}")

        given = "".join(f"  {p} -> {r}\n" for p, r in README_SUBSTITUTIONS.items())
        session = Session(self, "README", scratch, env,
                          f"(placeholders:\n{given}  ./app -> {JitApp()!r})\n",
                          remote_down=remote.nginx is None)
        self.addCleanup(session.close)
        skipped, used, counts = set(), set(), []
        for heading, lines in blocks:
            session.where = f"README, a block under ## {heading}"
            ran = 0
            for line in lines:
                if line in README_SKIP:
                    skipped.add(line)
                    continue
                line, held = substitute(line, README_SUBSTITUTIONS, values)
                used |= held
                session.run(line)
                ran += 1
            session.stop_servers()
            counts.append(f"{heading}: {ran}")
        print("README lines run, by block: " + "; ".join(counts), file=sys.stderr)
        self.assertEqual(skipped, set(README_SKIP), "a README_SKIP line is no longer in the README")
        self.assertEqual(used, set(README_SUBSTITUTIONS),
                         "a README_SUBSTITUTIONS placeholder is no longer in the README")

        # What the lines say they do.
        pkg = os.path.join(scratch, "out", "app.cudaqpkg")
        self.assertTrue(os.path.isfile(os.path.join(pkg, "manifest.json")))
        linked = session.output_of(r"^cudaq-rt-link out/app.cudaqpkg --arch sm_80,sm_90,sm_100")
        for arch in ("sm_80", "sm_90", "sm_100"):
            self.assertRegex(linked, rf"(?m)^{arch}\s+(linked|cached)")
        listing = session.output_of(r"^cudaq-rt-pack --list out/app.cudaqpkg")
        for handler in ("echo", "sum_i32", "parity"):
            self.assertIn(handler, listing)
        self.assertIn("would load from the package",
                      session.output_of(r"^cudaq-rt-run out/app.cudaqpkg --list --arch"))
        self.assertTrue(os.path.isdir(os.path.join(scratch, "xdg", "cudaq-rt")))
        pulled = glob.glob(os.path.join(scratch, "opt", "app", "*.cudaqpkg"))
        self.assertEqual(len(pulled), 1, os.listdir(os.path.join(scratch, "opt", "app")))
        check([os.path.join(TOOLS, "cudaq-rt-pack"), "--list", pulled[0], "--verify",
               os.path.join(scratch, "ci.pub")], env=env)
        self.assertEqual(len(glob.glob(os.path.join(scratch, "rec", "app-*.cudaqpkg"))), 1)
        if remote.nginx:
            self.assertTrue(remote.entries(), "the remote cache got no entry")
        else:
            self.assertIn("warning", session.output_of(r"--remote-cache "))
        prefix = os.path.join(scratch, "opt", "cudaq-rt")
        self.assertTrue(os.access(os.path.join(prefix, "bin", "cudaq-rt-link"), os.X_OK))
        self.assertTrue(os.path.isfile(os.path.join(prefix, "lib", "pkgconfig", "cudaq-rt.pc")))

    def test_man_pages(self):
        pages = {os.path.basename(p): ManPage(p)
                 for p in sorted(glob.glob(os.path.join(MAN, "*.[1-8]")))}
        with_lines = {name for name, page in pages.items() if page.lines}
        self.assertEqual(with_lines, set(MAN_PAGES),
                         "every page with command lines has its entry in MAN_PAGES, and no other")
        remote = RemoteCache(self.tmp)
        self.addCleanup(remote.stop)
        nvjitlink = real_nvjitlink()
        skip_used, counts = set(), []
        for name, given in MAN_PAGES.items():
            page = pages[name]
            with self.subTest(page=name):
                scratch = self.scratch(name)
                page.scratch = scratch
                values = dict(scratch=scratch, remote_cache=remote.url, nvjitlink=nvjitlink)
                page.env = base_env(scratch)
                page.env["PATH"] = TOOLS + os.pathsep + page.env["PATH"]
                page.env.update({k: v.format(**values) for k, v in given.env_given.items()})
                for path, source in given.files.items():
                    dest = os.path.join(scratch, path)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    source.make(dest, page)
                made = "".join(f"  {path}: {source!r}\n" for path, source in given.files.items())
                session = Session(self, name, scratch, page.env, f"(files made:\n{made})\n",
                                  remote_down=remote.nginx is None)
                ran = skipped = 0
                try:
                    for number, line in page.lines:
                        session.where = f"{name}:{number}"
                        skip = [i for i, (p, pattern, _) in enumerate(MAN_SKIP)
                                if p == name and re.search(pattern, line)]
                        if skip:
                            skip_used |= set(skip)
                            skipped += 1
                            continue
                        session.run(substitute(line, given.substitutions, values)[0])
                        ran += 1
                    session.stop_servers()
                finally:
                    session.close()
                counts.append(f"{name}: {ran} run, {skipped} skipped")
        print("man page lines: " + "; ".join(counts), file=sys.stderr)
        self.assertEqual(skip_used, set(range(len(MAN_SKIP))), "a MAN_SKIP entry matches no line")

    def test_option_orders(self):
        scratch = self.scratch("options")
        env = base_env(scratch)
        env["PATH"] = TOOLS + os.pathsep + env["PATH"]
        check([os.path.join(TOOLS, "cudaq-rt-pack"), EXAMPLE_APP, "-o", "out", "-n", "app"],
              cwd=scratch, env=env)
        check(["openssl", "genpkey", "-algorithm", "ed25519", "-out", "ci.pem"], cwd=scratch)
        check(["openssl", "pkey", "-in", "ci.pem", "-pubout", "-out", "ci.pub"], cwd=scratch)
        names = {"PKG": "out/app.cudaqpkg", "APP": shlex.quote(EXAMPLE_APP), "DIR": "aliased"}
        session = Session(self, "option orders", scratch, env)
        for line in OPTION_ORDERS:
            session.run(substitute(line, names, {})[0])
        self.assertTrue(glob.glob(os.path.join(scratch, "aliased", "*.cudaqpkg")))
        for one, other in SAME_OUTPUT:
            session.run(substitute(one, names, {})[0])
            session.run(substitute(other, names, {})[0])
            self.assertEqual(session.transcript[-2][2], session.transcript[-1][2], (one, other))


if __name__ == "__main__":
    unittest.main()
