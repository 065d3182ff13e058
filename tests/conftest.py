"""Shared helpers of the project's own tests."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Runs made by the tests skip summary.pdf (Chromium costs 1-2 s a run); the report tests that print it unset this.
os.environ.setdefault("DGXSPARK_PDF", "off")

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "sites" / "tirosh-home"


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    """A writable copy of sites/tirosh-home."""
    dest = tmp_path / "sites" / "tirosh-home"
    shutil.copytree(SITE, dest)
    return dest


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Write a fake suites/<layer>/test_x.py into the pytester dir, with a copy of the site."""
    shutil.copytree(SITE, pytester.path / "sites" / "tirosh-home")

    def write(layer: str, source: str, name: str | None = None) -> Path:
        folder = pytester.path / "suites" / layer
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name or f"test_{layer}.py")
        path.write_text("import pytest\nfrom pytest_dgxspark import not_applicable\n\n" + source)
        return path

    return write
