#!/usr/bin/env python3
"""Writes docs/python.md, the reference of the Python package cudaq_rt, from its docstrings and
signatures: python-reference.py [OUT] (default: stdout), or --check FILE: exit 1 when FILE is not
what this writes. It fails as well on a public name without a docstring. lint.python_reference
runs the check."""
from __future__ import annotations

import inspect
import re
import sys
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import cudaq_rt  # noqa: E402

HEAD = """# cudaq_rt: the Python reference

Written from the package's docstrings by `scripts/python-reference.py`; the README's "From Python"
shows it at work, and `examples/python/quickstart.py` runs it. Every call below that takes bytes
takes any object with the buffer protocol (bytes, bytearray, memoryview, array.array, a
C-contiguous numpy array) and reads it in place.
"""


UNDOCUMENTED: list[str] = []


def doc(obj: object, name: str) -> str:
    text = inspect.cleandoc(obj.__doc__ or "").strip()
    if not text:
        UNDOCUMENTED.append(name)
    return text


def item(text: str) -> str:
    """A docstring as the body of a list item (continuation lines indented)."""
    return text.replace("\n", "\n  ")


def signature(obj: object) -> str:
    try:
        text = str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    # Annotations are strings (from __future__ import annotations): show them bare.
    for _ in range(2):
        text = re.sub(r"""["']([A-Za-z_][\w\[\], .|]*)["']""", r"\1", text)
    return text.replace("= Ellipsis", "= ...")


def members(cls: type) -> list[tuple[str, object]]:
    out = []
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__enter__"):
            continue
        if isinstance(value, property) or inspect.isfunction(value):
            out.append((name, value))
    return out


def render() -> str:
    lines = [HEAD]
    names = [n for n in cudaq_rt.__all__ if not n.startswith("__")]
    functions = [n for n in names if inspect.isfunction(getattr(cudaq_rt, n))]
    classes = [n for n in names if inspect.isclass(getattr(cudaq_rt, n))]
    lines.append("## Functions\n")
    for name in functions:
        fn = getattr(cudaq_rt, name)
        lines.append(f"### `cudaq_rt.{name}{signature(fn)}`\n\n{doc(fn, name)}\n")
    lines.append("## Classes\n")
    for name in classes:
        cls = getattr(cudaq_rt, name)
        bases = [b.__name__ for b in cls.__bases__ if b is not object]
        lines.append(f"### `cudaq_rt.{name}`" + (f" ({', '.join(bases)})" if bases else "") +
                     f"\n\n{doc(cls, name)}\n")
        for member, value in members(cls):
            if member in ("__init__", "__enter__"):
                continue
            if isinstance(value, property):
                text = doc(value.fget, f"{name}.{member}")
                lines.append(f"- `{member}` (property): {item(text)}")
            else:
                forms = typing.get_overloads(value) or [value]
                sigs = [signature(f).replace("(self, ", "(").replace("(self)", "()") for f in forms]
                shown = " or ".join(f"`{member}{sig}`" for sig in sigs)
                lines.append(f"- {shown}: {item(doc(value, f'{name}.{member}'))}")
        fields = getattr(cls, "__dataclass_fields__", None) or getattr(cls, "_fields", None)
        if fields:
            lines.append("- fields: " + ", ".join(f"`{f}`" for f in fields))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    text = render()
    if UNDOCUMENTED:
        sys.exit("python-reference.py: no docstring: " + ", ".join(UNDOCUMENTED))
    if sys.argv[1:2] == ["--check"]:
        if Path(sys.argv[2]).read_text() != text:
            sys.exit(f"{sys.argv[2]}: not what scripts/python-reference.py writes (run it: "
                     f"python3 scripts/python-reference.py {sys.argv[2]})")
    elif len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    else:
        sys.stdout.write(text)
