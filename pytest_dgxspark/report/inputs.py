"""What a run tested with, for results.json: the site inputs by digest and the suite's, catalog's and site's identity."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from pytest_dgxspark.report.manifest import sha256_file

PACKAGE = Path(__file__).resolve().parents[1]
CATALOG_DIR = PACKAGE / "catalog"
# The site files a run reads (ADR 0001 §5), relative to the site folder; absent optional ones are left out.
SITE_FILES = ("inventory.yml", "rke2/vars.yml", "rke2/gpu-operator.helmchart.yaml", "waivers.yml",
              "manual-checks.yml", "allowed_signers")


def site_inputs(root: Path, extra: tuple[Path, ...] = ()) -> list[dict[str, str]]:
    """[{path, sha256}] of the site files under root (and any extra inventory given), path relative to the site's
    parent (sites/<site>/...) or absolute for a file outside it."""
    found = []
    for path in [root / rel for rel in SITE_FILES] + list(extra):
        if path.is_file():
            try:
                name = path.resolve().relative_to(root.resolve().parent).as_posix()
            except ValueError:
                name = path.name
            found.append({"path": name, "sha256": sha256_file(path)})
    return found


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit(folder: Path) -> str | None:
    """The git commit folder is checked out at, '+dirty' when its files differ from it; None outside a repository."""
    head = _git(folder, "rev-parse", "HEAD")
    if head is None:
        return None
    status = _git(folder, "status", "--porcelain", "--", ".")
    return f"{head}+dirty" if status else head


def catalog_digest() -> str:
    """sha256 over the catalog files (name and digest of each, sorted): one value naming the rules judged by."""
    digest = hashlib.sha256()
    for path in sorted(CATALOG_DIR.glob("*.yaml")):
        digest.update(f"{sha256_file(path)}  {path.name}\n".encode())
    return digest.hexdigest()


def identity(site_root: Path | None) -> dict[str, Any]:
    """The suite's version and commit, the catalog's digest and the site repository's commit."""
    from pytest_dgxspark.report.ctrf import tool_version

    return {"suite_version": tool_version(), "suite_commit": commit(PACKAGE), "catalog_sha256": catalog_digest(),
            "site_commit": commit(site_root) if site_root is not None else None}
