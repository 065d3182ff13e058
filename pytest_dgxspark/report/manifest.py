"""MANIFEST.sha256 of a run directory: write it (sha256sum -c format) and check it."""
from __future__ import annotations

import hashlib
import re
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

    @property
    def ok(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def problems(self) -> list[str]:
        """One line per added, removed or changed file."""
        return (
            [f"changed: {p}" for p in self.changed]
            + [f"removed: {p}" for p in self.removed]
            + [f"added: {p}" for p in self.added]
        )


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bundle_files(run_dir: Path) -> list[str]:
    """Every file under run_dir except the manifest and its signature, as sorted relative POSIX paths."""
    files = []
    for path in run_dir.rglob("*"):
        rel = path.relative_to(run_dir).as_posix()
        if rel in _EXCLUDED or path.is_dir():
            continue
        files.append(rel)
    return sorted(files)


def _check_name(rel: str) -> None:
    if "\n" in rel or "\\" in rel:
        raise ManifestError(f"cannot list {rel!r} in {MANIFEST}: newlines and backslashes are not allowed in bundle file names")


def write_manifest(run_dir: Path) -> Path:
    """Write run_dir/MANIFEST.sha256 over every other file (sorted, relative paths), atomically; return its path."""
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
        entries[path] = match.group("digest")
    return entries


def check_manifest(run_dir: Path) -> ManifestCheck:
    """Compare run_dir with its manifest: files added, removed or changed since it was written."""
    expected = read_manifest(run_dir)
    present = set(bundle_files(run_dir))
    removed = sorted(set(expected) - present)
    added = sorted(present - set(expected))
    changed = sorted(p for p in set(expected) & present if sha256_file(run_dir / p) != expected[p])
    return ManifestCheck(tuple(added), tuple(removed), tuple(changed), len(expected))
