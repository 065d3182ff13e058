"""Site layer: the site folder's layout and role-based names (ADR 0001 §5)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.checking import require

CREDENTIAL_NAME = re.compile(r"(^|/)(kubeconfig[^/]*|[^/]*\.kubeconfig|rke2\.yaml|[^/]*token[^/]*)$", re.I)
CREDENTIAL_CONTENT = re.compile(r"client-key-data:|K10[0-9a-f]{20,}::|-----BEGIN [A-Z ]*PRIVATE KEY-----")
MODEL_NAME = re.compile(r"dgx|spark|gb\d{2,3}|gh\d{3}", re.I)
ROLE_ALIAS = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*-\d+$")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.rule("ADR-0001.site-layout")
def test_site_has_flat_rke2_folder_with_vars_and_helmchart(site: Any, evidence: Any) -> None:
    rke2 = Path(site.root) / "rke2"
    required = [rke2 / "vars.yml", rke2 / "gpu-operator.helmchart.yaml"]
    missing = [str(p) for p in required if not p.is_file()]
    nested = sorted(str(p) for p in rke2.iterdir() if p.is_dir()) if rke2.is_dir() else []
    evidence.record("site rke2 folder", sorted(p.name for p in rke2.iterdir()) if rke2.is_dir() else None)
    require(
        missing == [],
        f"{site.root}: the site must hold rke2/vars.yml and rke2/gpu-operator.helmchart.yaml; missing {', '.join(missing)}",
    )
    require(nested == [], (
        f"{rke2}: ADR 0001 §5 keeps one flat rke2/ folder per site (GPU is node metadata, not a folder); "
        f"found nested folders {', '.join(nested)}"
    ))


@pytest.mark.rule("ADR-0001.site-layout")
def test_no_kubeconfig_or_token_is_committed(site: Any, evidence: Any) -> None:
    root = Path(site.root).resolve()
    toplevel = _git(root, "rev-parse", "--show-toplevel")
    in_git = toplevel.returncode == 0
    present = sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and CREDENTIAL_NAME.search(str(p.relative_to(root)))
    )
    tracked: list[str] = []
    unignored: list[str] = []
    leaking: list[str] = []
    if in_git:
        listed = _git(root, "ls-files", "-z", "--", ".")
        files = [f for f in listed.stdout.split("\0") if f]
        tracked = [f for f in files if CREDENTIAL_NAME.search(f)]
        for name in files:
            path = root / name
            if path.is_file() and path.stat().st_size < 1_000_000:
                if CREDENTIAL_CONTENT.search(path.read_text(errors="replace")):
                    leaking.append(name)
        for name in present:
            if name not in tracked and _git(root, "check-ignore", "-q", "--", name).returncode != 0:
                unignored.append(name)
    else:
        unignored = present
    evidence.record(
        "credential files",
        {"git_repo": toplevel.stdout.strip() if in_git else None, "present": present, "tracked": tracked,
         "present_not_ignored": unignored, "tracked_with_secret_content": leaking},
    )
    require(
        tracked == [],
        f"{root}: kubeconfig/token files are tracked by git: {', '.join(tracked)}; remove them (git rm --cached), keep "
        "them ignored, and rotate the credentials they held (the git history keeps them)",
    )
    require(leaking == [], f"{root}: tracked files hold a client key, join token or private key: {', '.join(leaking)}; remove them and "
        "rotate the credentials")
    require(unignored == [], (
        f"{root}: kubeconfig/token files present but not ignored by git (they would be committed): {', '.join(unignored)}"
        + ("" if in_git else " (the site is not in a git repository, so nothing proves they stay local)")
    ))


def _model_names(values: dict[str, str]) -> dict[str, str]:
    return {where: value for where, value in values.items() if value and MODEL_NAME.search(value)}


@pytest.mark.rule("ADR-0001.role-alias")
def test_cluster_target_and_context_names_carry_no_model_name(site: Any, evidence: Any) -> None:
    names = {
        "rke2_cluster_name": str(site.vars.get("rke2_cluster_name", "")),
        "rke2_target_name": str(site.vars.get("rke2_target_name", "")),
        "rke2_context_name": str(site.vars.get("rke2_context_name", "")),
    }
    evidence.record("names", names)
    offending = _model_names(names)
    require(offending == {}, (
        f"{site.root}/rke2/vars.yml: names must be role-based (gpu-01), the model is node-label or inventory "
        "metadata only; model names found in " + ", ".join(f"{k} {v!r}" for k, v in offending.items())
    ))
    target = names["rke2_target_name"]
    require(
        ROLE_ALIAS.match(target),
        f"{site.root}/rke2/vars.yml: rke2_target_name {target!r} is not a role alias like gpu-01",
    )


@pytest.mark.rule("ADR-0001.role-alias")
def test_inventory_aliases_are_role_based(site: Any, evidence: Any) -> None:
    aliases = [spec.name for spec in site.hosts]
    evidence.record("inventory aliases", {spec.name: spec.address for spec in site.hosts})
    offending = _model_names({f"inventory alias {a}": a for a in aliases})
    not_role = [a for a in aliases if not ROLE_ALIAS.match(a)]
    require(
        offending == {},
        f"{site.root}/inventory.yml: aliases must be role-based like gpu-01 and must not name the model (keep it in "
        f"dgxspark_model): {', '.join(offending.values())} names it",
    )
    require(
        not_role == [],
        f"{site.root}/inventory.yml: aliases must be role-based like gpu-01, gpu-02; got {', '.join(not_role)}",
    )
