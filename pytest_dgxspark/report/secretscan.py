"""The byte scan of a written bundle for every secret value the run read, in every form a file may hold it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.redact import scrub
from pytest_dgxspark.data.secretforms import forms


@dataclass(frozen=True)
class Leak:
    """A secret value found in a bundle file: which file, what kind of value, where the run read it (never the value)."""

    file: str
    kind: str
    source: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "kind": self.kind, "source": self.source}


def _forms(value: str) -> set[bytes]:
    """The value in every form redaction removes it in (secretforms.forms): raw, base64 at each alignment,
    URL-encoded, JSON- and HTML-escaped and JSON-inside-HTML (pytest-html's data blob)."""
    return {form.encode("utf-8") for form in forms(value)}


def scan_file(path: Path, secrets: dict[str, tuple[str, str]], name: str) -> list[Leak]:
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return [Leak(name, kind, source) for value, (kind, source) in secrets.items()
            if any(form in data for form in _forms(value))]


def scan_bundle(run_dir: Path, secrets: dict[str, tuple[str, str]]) -> list[Leak]:
    """Every (file, secret) pair found under run_dir (regular files only, symlinks not followed)."""
    leaks: list[Leak] = []
    for root, _, files in os.walk(run_dir):
        for file in sorted(files):
            path = Path(root) / file
            if path.is_symlink() or not path.is_file():
                continue
            leaks.extend(scan_file(path, secrets, str(path.relative_to(run_dir))))
    return leaks


def scrub_document(doc: Any, secrets: dict[str, tuple[str, str]]) -> tuple[Any, list[tuple[str, str]]]:
    """A JSON-able document with known secret values replaced in every string (keys kept)."""
    found: list[tuple[str, str]] = []

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            clean, hits = scrub(value, secrets)
            found.extend(hits)
            return clean
        return value

    return walk(doc), found
