"""No path of a site or a scenario resolves outside its folder: symlinks that leave it are refused, by name."""
from __future__ import annotations

import os
from pathlib import Path


def escapes(path: Path, root: Path) -> bool:
    """Whether path (or a symlink on its way) resolves outside root."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return True
    except OSError:  # a symlink loop
        return True
    return False


def outside_links(root: Path, label: str) -> list[str]:
    """Problems, one per symlink under root (itself included) that resolves outside it: `label: <link> is a symlink
    out of the folder; refused (copy the file in)`. Neither the target nor its content is named."""
    root = Path(root)
    problems: list[str] = []
    if not root.exists():
        return problems
    if root.is_symlink():
        return [f"{label}: {root} is a symlink; refused (give the folder itself)"]
    top = root.resolve()
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            if path.is_symlink() and escapes(path, top):
                problems.append(f"{label}: {path} is a symlink out of {root}; refused (copy the file into the folder)")
    return problems
