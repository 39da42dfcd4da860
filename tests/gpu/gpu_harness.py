"""What the GPU tests share: where the tools and the applications are, the GPU probe, a directory
per test class, packing and linking ahead, and the exit ctest reports as SKIPPED where there is
no GPU.

Environment (set by ctest; each variable falls back to a name on PATH): CUDAQ_RT_PACK,
CUDAQ_RT_LINK, CUDAQ_RT_RUN (the tools), CUDAQ_RT_EXAMPLE_APP, CUDAQ_RT_FAULT_APP (the
applications' binaries).

Apart from tests/integration/harness.py on purpose: that one needs jsonschema, which a GPU test
must not need to reach its skip, and its folder holds a test_run.py of its own that would shadow
this folder's on the path.
"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PACK = os.environ.get("CUDAQ_RT_PACK", "cudaq-rt-pack")
LINK = os.environ.get("CUDAQ_RT_LINK", "cudaq-rt-link")
RUN = os.environ.get("CUDAQ_RT_RUN", "cudaq-rt-run")
EXAMPLE_APP = os.environ.get("CUDAQ_RT_EXAMPLE_APP", "cudaq_rt_example_app")
FAULT_APP = os.environ.get("CUDAQ_RT_FAULT_APP", "cudaq_rt_fault_app")

SKIP = 77  # the GPU tests' SKIP_RETURN_CODE
NO_GPU = "no GPU: libcuda.so.1 does not load, or no device is listed; skipped"


def gpus():
    """(device 0's arch as the driver API reports it, such as `sm_90`, and the number of
    devices), or (None, 0) where there is no GPU."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, 0
    count, dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
    if (cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or
            count.value < 1 or cuda.cuDeviceGet(ctypes.byref(dev), 0) != 0 or
            cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) != 0 or
            cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) != 0):
        return None, 0
    return f"sm_{major.value}{minor.value}", count.value


def listed_by_nvidia_smi():
    """False where nvidia-smi is installed and lists no GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return True
    r = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return r.returncode == 0 and any(l.startswith("GPU ") for l in r.stdout.splitlines())


def gpu_arch():
    """Device 0's arch, or None where there is no GPU or nvidia-smi lists none."""
    return gpus()[0] if listed_by_nvidia_smi() else None


def main(have_gpu, no_gpu=NO_GPU, file=None):
    """Runs the tests of the __main__ module; without a GPU, prints `no_gpu` (on stdout, or on
    `file`) and exits SKIP."""
    if not have_gpu:
        print(no_gpu, file=file)
        sys.exit(SKIP)
    unittest.main(verbosity=2)


class ClassDirCase(unittest.TestCase):
    """A test class with a directory of its own, cls.tmp (named after `dir_prefix` and the class),
    removed after its last test."""

    dir_prefix = "cudaq-rt-gpu"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"{cls.dir_prefix}.{cls.__name__}.")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


def document_errors(doc):
    """Where jsonschema is installed: what is wrong with a cudaq-rt-run --json document against
    schemas/run.schema.json (error.schema.json for a failure to load), as a list of strings;
    None where it is not (the CPU suite validates every kind of document it can make)."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "../integration"))
        import validate_schema
    except ImportError:
        return None
    finally:
        sys.path.pop(0)
    name = "run"
    if "error" in doc and not ({"cubin", "handlers", "gpus"} & set(doc)):
        name = "error"
    schemas = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../schemas")
    return validate_schema.validate(
        validate_schema.load(os.path.join(schemas, name + ".schema.json")), doc)


def assert_document(test, doc):
    errors = document_errors(doc)
    if errors is None:
        print("note: no jsonschema here: --json documents not checked against schemas/",
              file=sys.stderr)
    else:
        test.assertEqual(errors, [], doc)


def pack_into(outdir, name, *inputs):
    """Packs `inputs` (binaries and cudaq-rt-pack options) as NAME.cudaqpkg in outdir; its path."""
    os.makedirs(outdir, exist_ok=True)
    r = subprocess.run([PACK, *inputs, "--name", name, "-o", outdir], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cudaq-rt-pack {' '.join(inputs)} failed ({r.returncode}):\n"
                           f"{r.stderr}")
    return os.path.join(outdir, name + ".cudaqpkg")


def link_for(pkg, arch, *options, env=None):
    """Links pkg ahead of time for arch, with cudaq-rt-link `options`, into the package."""
    r = subprocess.run([LINK, pkg, "--arch", arch, *options], capture_output=True, text=True,
                       env=env)
    if r.returncode != 0:
        raise RuntimeError(f"cudaq-rt-link {' '.join([pkg, '--arch', arch, *options])} failed "
                           f"({r.returncode}):\n{r.stderr}")
