#!/usr/bin/env python3
"""Fails when a runtime folder includes a header of a folder it must not see.

runtime/src/ is one folder per stage; includes point one way, down this table (ARCHITECTURE.md
draws it). A folder sees its own headers, those of the folders listed for it, and the public
headers (cudaq_rt/...); the public headers see no folder at all, since they are installed and the
folders are not.
"""
import pathlib
import re
import sys

ALLOWED = {
    "base": set(),
    "formats": {"base"},
    "package": {"base", "formats"},
    "pack": {"base", "formats", "package"},
    "bridge": {"base"},
    "cache": {"base", "formats"},
    "oci": {"base", "formats", "package", "cache"},
    "link": {"base", "formats", "package", "bridge", "cache", "oci"},
    "load": {"base", "formats", "package", "pack", "bridge", "cache", "link", "oci"},
    "interpose": {"base", "formats", "package", "cache"},
    "command": {"base", "formats", "package", "pack", "bridge", "cache", "link", "oci", "load"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def check(runtime: pathlib.Path) -> list[str]:
    problems = []
    src = runtime / "src"
    for folder in sorted(p.name for p in src.iterdir() if p.is_dir()):
        if folder not in ALLOWED:
            problems.append(f"{src / folder}: a folder the layering table does not know")
    files = [(p, p.relative_to(src).parts[0]) for p in src.rglob("*") if p.suffix in {".h", ".cpp"}]
    files += [(p, None) for p in (runtime / "include").rglob("*.h")]
    for path, folder in sorted(files):
        if folder is not None and path.parent == src:
            problems.append(f"{path}: outside every stage folder")
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target.startswith(".."):
                problems.append(f"{path}:{n}: includes {target!r} by a relative path")
                continue
            top = target.split("/")[0]
            if top not in ALLOWED or top == folder:
                continue
            if folder is None:
                problems.append(f"{path}:{n}: a public header includes {target!r} of {top}/")
            elif top not in ALLOWED[folder]:
                problems.append(f"{path}:{n}: {folder}/ includes {target!r}: {top}/ is not "
                                f"below {folder}/ (it may include {', '.join(sorted(ALLOWED[folder])) or 'no folder'})")
    return problems


def self_test() -> int:
    """The checker catches an upward include, a public header that includes a folder, a relative
    include and a file outside the folders, and passes a tree that has none."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "src/base").mkdir(parents=True)
        (root / "src/link").mkdir()
        (root / "include/cudaq_rt").mkdir(parents=True)
        (root / "src/base/digest.h").write_text('#include "cudaq_rt/error.h"\n')
        (root / "src/link/link.cpp").write_text('#include "base/digest.h"\n#include "link/link.h"\n')
        (root / "include/cudaq_rt/error.h").write_text("#pragma once\n")
        if check(root):
            print("check_layering: self-test: a clean tree was refused", file=sys.stderr)
            return 1
        (root / "src/base/atomic_file.cpp").write_text('#include "link/link.h"\n')
        (root / "include/cudaq_rt/bridge.h").write_text('#include "base/digest.h"\n')
        (root / "src/link/plan.cpp").write_text('#include "../base/digest.h"\n')
        (root / "src/stray.cpp").write_text("\n")
        found = check(root)
        expected = ["base/ includes 'link/link.h'", "a public header includes 'base/digest.h'",
                    "by a relative path", "outside every stage folder"]
        missed = [e for e in expected if not any(e in f for f in found)]
        if missed or len(found) != len(expected):
            print(f"check_layering: self-test: expected {expected}, found {found}", file=sys.stderr)
            return 1
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    runtime = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runtime")
    problems = check(runtime)
    for p in problems:
        print(f"check_layering: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
