"""MANIFEST.sha256 of a run directory: write it (sha256sum -c format) and check it."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from pytest_dgxspark.report.results import write_atomic

MANIFEST = "MANIFEST.sha256"
SIGNATURE = "MANIFEST.sha256.sig"
_EXCLUDED = frozenset({MANIFEST, SIGNATURE})
_LINE = re.compile(r"^(?P<digest>[0-9a-f]{64}) [ *](?P<path>.+)$")


class ManifestError(Exception):
    """The manifest is missing or cannot be read."""


@dataclass(frozen=True)
class ManifestCheck:
    """What differs between a run directory and its manifest."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    checked: int
    irregular: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.added or self.removed or self.changed or self.irregular)

    def problems(self) -> list[str]:
        """One line per added, removed, changed or irregular file."""
        return (
            [f"changed: {p}" for p in self.changed]
            + [f"removed: {p}" for p in self.removed]
            + [f"added: {p}" for p in self.added]
            + [irregular(p) for p in self.irregular]
        )


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


IRREGULAR_WHY = "(a symlink, FIFO, socket or device; a bundle holds regular files only)"


def irregular(rel: str) -> str:
    """The problem a bundle entry that is not a regular file is (manifest and verify word it alike)."""
    return f"not a regular file: {rel} {IRREGULAR_WHY}"


def entries(run_dir: Path, with_manifest: bool = False) -> tuple[list[str], list[str]]:
    """(regular files, other entries) under run_dir as sorted relative POSIX paths, following no symlink: a symlink
    (to a file or a folder), a FIFO, a socket or a device is never a bundle file (its bytes are not the bundle's, or
    not the same twice). The manifest and its signature are left out unless with_manifest."""
    regular, other = [], []
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        base = Path(root)
        for name in list(dirs):
            if (base / name).is_symlink():
                dirs.remove(name)
                other.append((base / name).relative_to(run_dir).as_posix())
        for name in files:
            path = base / name
            rel = path.relative_to(run_dir).as_posix()
            if rel in _EXCLUDED and not with_manifest and not path.is_symlink():
                continue
            (regular if stat.S_ISREG(path.lstat().st_mode) else other).append(rel)
    return sorted(regular), sorted(other)


def bundle_files(run_dir: Path) -> list[str]:
    """Every regular file under run_dir except the manifest and its signature, as sorted relative POSIX paths."""
    return entries(run_dir)[0]


def irregular_entries(run_dir: Path) -> list[str]:
    """What under run_dir is neither a folder nor a regular file (symlinks included), as sorted relative paths."""
    return entries(run_dir)[1]


def _check_name(rel: str) -> None:
    if "\n" in rel or "\\" in rel:
        raise ManifestError(f"cannot list {rel!r} in {MANIFEST}: newlines and backslashes are not allowed in bundle file names")


def write_manifest(run_dir: Path) -> Path:
    """Write run_dir/MANIFEST.sha256 over every other file (sorted, relative paths), atomically; return its path."""
    other = irregular_entries(run_dir)
    if other:
        raise ManifestError(f"{run_dir}: cannot seal {', '.join(other)}: a bundle holds folders and regular files only "
                            "(no symlink, FIFO, socket or device)")
    lines = []
    for rel in bundle_files(run_dir):
        _check_name(rel)
        lines.append(f"{sha256_file(run_dir / rel)}  {rel}\n")
    manifest = run_dir / MANIFEST
    write_atomic(manifest, "".join(lines))
    return manifest


def read_manifest(run_dir: Path) -> dict[str, str]:
    """The manifest of run_dir as {relative path: sha256}; ManifestError when it is missing or malformed."""
    manifest = run_dir / MANIFEST
    if not manifest.is_file():
        raise ManifestError(f"{manifest}: no {MANIFEST} in this directory (is it a dgxspark bundle?)")
    entries: dict[str, str] = {}
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        match = _LINE.match(line)
        if not match:
            raise ManifestError(f"{manifest}:{number}: expected '<sha256>  <path>', got {line[:80]!r}")
        path = match.group("path")
        if path.startswith("/") or ".." in Path(path).parts:
            raise ManifestError(f"{manifest}:{number}: path {path!r} must be relative and inside the bundle")
        if path in entries:  # sha256sum -c would check both lines; a dict would keep the last one alone
            raise ManifestError(f"{manifest}:{number}: path {path!r} is listed twice")
        entries[path] = match.group("digest")
    return entries


def check_manifest(run_dir: Path) -> ManifestCheck:
    """Compare run_dir with its manifest: files added, removed or changed since it was written."""
    expected = read_manifest(run_dir)
    files, other = entries(run_dir)
    present = set(files)
    removed = sorted(set(expected) - present)
    added = sorted(present - set(expected))
    changed = sorted(p for p in set(expected) & present if sha256_file(run_dir / p) != expected[p])
    return ManifestCheck(tuple(added), tuple(removed), tuple(changed), len(expected), tuple(other))
