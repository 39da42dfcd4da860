"""What the integration tests share: where the tools are, running them, and readers of the
formats they check (digests, FNV-1a ids, ELF sections, cubin symbols, fatbin entries).

Environment (set by ctest; each variable falls back to a name on PATH or a path in this tree):
CUDAQ_RT_PACK, CUDAQ_RT_LINK, CUDAQ_RT_RUN (the tools), CUDAQ_RT_EXAMPLE_APP (the example
application's binary), NVCC, CUDAQ_RT_INCLUDE (libdispatch's include directory), CUDAQ_RT_SCHEMA
(schemas/manifest.schema.json).
"""
import hashlib
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import validate_schema  # noqa: E402,F401  (re-exported: the tests validate through it)

PACK = os.environ.get("CUDAQ_RT_PACK", "cudaq-rt-pack")
LINK = os.environ.get("CUDAQ_RT_LINK", "cudaq-rt-link")
RUN = os.environ.get("CUDAQ_RT_RUN", "cudaq-rt-run")
EXAMPLE_APP = os.environ.get("CUDAQ_RT_EXAMPLE_APP", "cudaq_rt_example_app")
NVCC = os.environ.get("NVCC", "nvcc")
INCLUDE = os.environ.get("CUDAQ_RT_INCLUDE", os.path.join(HERE, "../../libdispatch/include"))
SCHEMA_PATH = os.environ.get("CUDAQ_RT_SCHEMA",
                             os.path.join(HERE, "../../schemas/manifest.schema.json"))
HANDLERS = os.path.normpath(os.path.join(HERE, "../../examples/handlers"))
# Relocatable device code for sm_80 with its LTO-IR, as the example application is built.
DEVICE_FLAGS = ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,lto_80]", "-std=c++17",
                "-I" + INCLUDE]

CONTAINER_MAGIC = 0xBA55ED50
KIND_LTOIR = 8


def fnv1a32(name):
    """The function_id of a handler name (FNV-1a 32-bit, as libdispatch's wire.h)."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def sha256(data):
    """The digest of some bytes as the manifest writes it: 'sha256:<hex>'."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def sha256_file(path):
    return sha256(read(path))


def run(cmd, env=None, **kw):
    """Runs cmd; its stdout and stderr apart, as text; whatever its exit status."""
    return subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)


def cache_env(cache_dir, **extra):
    """os.environ for a tool with a link cache of its own in cache_dir, and then `extra`; without
    the variables that switch the cache off, bound its size or point at other bridges."""
    e = dict(os.environ)
    for k in ("CUDAQ_RT_CACHE_DISABLE", "CUDAQ_RT_CACHE_MAXSIZE", "CUDAQ_RT_BRIDGE_PATH"):
        e.pop(k, None)
    e["CUDAQ_RT_CACHE_DIR"] = cache_dir
    e.update(extra)
    return e


def make_ed25519_keys(directory, *names):
    """Ed25519 key pairs made by OpenSSL's own tool: {name: (private PEM, public PEM)}."""
    os.makedirs(directory, exist_ok=True)
    keys = {}
    for name in names:
        priv, pub = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".pub")
        check(["openssl", "genpkey", "-algorithm", "ed25519", "-out", priv])
        check(["openssl", "pkey", "-in", priv, "-pubout", "-out", pub])
        keys[name] = (priv, pub)
    return keys


def stored_forms(pkg):
    """The manifest's compressed blobs: {blob digest: (stored digest, stored size)}."""
    import json
    with open(os.path.join(pkg, "manifest.json")) as f:
        m = json.load(f)
    return {s["digest"]: (s["stored_digest"], s["stored_size"]) for s in m.get("stored", [])}


def blob_file(pkg, digest):
    """The file blob `digest` (sha256:...) is kept in: its zstd frame's, if it is compressed."""
    stored = stored_forms(pkg).get(digest)
    name = (stored[0] if stored else digest)[len("sha256:"):]
    return os.path.join(pkg, "blobs", "sha256", name)


def read_blob(pkg, digest):
    """Blob `digest`'s bytes, decompressed by the zstd tool where the package keeps it
    compressed, and checked against the digest."""
    path = blob_file(pkg, digest)
    if digest in stored_forms(pkg):
        data = subprocess.run(["zstd", "-dc", path], check=True, stdout=subprocess.PIPE).stdout
    else:
        data = read(path)
    assert sha256(data) == digest, f"{path}: does not hold {digest}"
    return data


def manifest_blobs(pkg):
    """The digests (hex) of the blobs a package's blobs/sha256 holds beyond the OCI layout's own
    (the image manifest index.json names, its config and signature layers); a compressed blob's
    file counts as the blob it holds."""
    import json
    root = os.path.join(pkg, "blobs", "sha256")
    names = set(os.listdir(root))
    with open(os.path.join(pkg, "index.json")) as f:
        image_digest = json.load(f)["manifests"][0]["digest"][len("sha256:"):]
    with open(os.path.join(root, image_digest)) as f:
        image = json.load(f)
    layout = {image_digest, image["config"]["digest"][len("sha256:"):]}
    layout |= {l["digest"][len("sha256:"):] for l in image["layers"]
               if l["mediaType"] == "application/vnd.cudaq-rt.signature.v1+json"}
    own = {stored[len("sha256:"):]: d[len("sha256:"):] for d, (stored, _) in stored_forms(pkg).items()}
    return sorted(own.get(n, n) for n in names - layout)


def check(cmd, **kw):
    """Runs cmd, which must succeed; returns its stdout and stderr together, as text."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}")
    return r.stdout


def snapshot(root, skip=(), dirs=True):
    """{relative path: sha256 or 'dir'} of everything under root; {} if it does not exist."""
    out = {}
    for dirpath, subdirs, files in os.walk(root):
        for d in subdirs if dirs else ():
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            if rel not in skip:
                out[rel] = sha256_file(os.path.join(dirpath, f))
    return out


def elf_sections(data):
    """{name: (file offset, size)} of an ELF64 little-endian image, from its section headers."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off = headers[shstrndx][4]
    out = {}
    for name_off, _type, _flags, _addr, off, size in headers:
        end = data.index(b"\0", strtab_off + name_off)
        out[data[strtab_off + name_off:end].decode()] = (off, size)
    return out


def cubin_info(data):
    """(e_machine, e_flags, {defined symbol name: type}) of an ELF64 cubin."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not an ELF64 LE file"
    e_machine, = struct.unpack_from("<H", data, 0x12)
    e_flags, = struct.unpack_from("<I", data, 0x30)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    symbols = {}
    for _name, sh_type, _fl, _addr, off, size, link, _info, _al, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx, _v, _s = struct.unpack_from(
                "<IBBHQQ", data, off + k * entsize)
            if st_shndx == 0:  # undefined
                continue
            end = data.index(b"\0", stroff + st_name)
            symbols[data[stroff + st_name:end].decode()] = {1: "object", 2: "func"}.get(
                st_info & 0xF, "other")
    return e_machine, e_flags, symbols


def ltoir_entry_offsets(container):
    """Offsets of the LTO-IR entry headers in one fatbin container."""
    magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", container, 0)
    assert magic == CONTAINER_MAGIC
    out, pos, end = [], header_size, header_size + fat_size
    while pos < end:
        kind, = struct.unpack_from("<H", container, pos)
        entry_header, = struct.unpack_from("<I", container, pos + 4)
        payload, = struct.unpack_from("<Q", container, pos + 8)
        if kind == KIND_LTOIR:
            out.append(pos)
        pos += entry_header + payload
    return out
