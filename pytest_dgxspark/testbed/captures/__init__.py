"""Real captured outputs kept in the repo; each file's first line names its public source (`# SOURCE: ...`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DIR = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """The capture file `name` (a bare file name in this folder); ValueError naming what exists when absent."""
    if "/" in name or not (DIR / name).is_file():
        known = ", ".join(sorted(p.name for p in DIR.glob("*.txt")))
        raise ValueError(f"capture {name!r} is not a file of {DIR} (known: {known})")
    return DIR / name


def source(name: str) -> str:
    """The capture's first line without `# SOURCE: `."""
    first = path(name).read_text().split("\n", 1)[0]
    if not first.startswith("# SOURCE: "):
        raise ValueError(f"{path(name)}: the first line must be `# SOURCE: <public source>`, got {first[:80]!r}")
    return first.removeprefix("# SOURCE: ")


def body(name: str) -> str:
    """The captured bytes (as text), everything after the source line."""
    source(name)
    return path(name).read_text().split("\n", 1)[1]


def output(value: Any, *, where: str) -> dict[str, Any]:
    """A command's verbatim result from scenario data: text, `{capture: name}` or `{stdout, stderr, rc}`."""
    if isinstance(value, str):
        return {"stdout": value, "stderr": "", "rc": 0}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected text, {{capture: <file>}} or {{stdout, stderr, rc}}, got {type(value).__name__}")
    unknown = sorted(set(value) - {"capture", "stdout", "stderr", "rc"})
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; expected capture, stdout, stderr, rc")
    stdout = value.get("stdout", "")
    if "capture" in value:
        stdout = body(str(value["capture"]))
    rc = value.get("rc", 0)
    if not isinstance(rc, int) or not 0 <= rc <= 255:
        raise ValueError(f"{where}.rc: expected an exit status 0..255, got {rc!r}")
    return {"stdout": str(stdout), "stderr": str(value.get("stderr", "")), "rc": rc}
