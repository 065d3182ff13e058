"""Site layer: the RKE2 install targets never deploy the GPU Operator (ADR 0002 §5-1)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.checking import require, unreadable
from pytest_dgxspark.site.repo import (
    GPU_OPERATOR_REFERENCE,
    ansible_references,
    make_recipe_closure,
    parse_make_rules,
    strip_yaml_comments,
)

INSTALL_TARGETS = ("rke2/server/install", "rke2/agent/install")
OPERATOR_TARGET = "rke2/gpu/operator/apply"
PLAYBOOK_IN_RECIPE = re.compile(r"([\w./${}()-]+\.ya?ml)")


def _repo_root(site: Any) -> Path:
    """The site's repository: the nearest folder from the site up to its git top level that holds a Makefile (a site
    repo of its own, or the project's sites/<name>), else the git top level, else the folder above sites/."""
    root = Path(site.root).resolve()
    top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False)
    stop = Path(top.stdout.strip()) if top.returncode == 0 else root.parent.parent
    for folder in (root, *root.parents):
        if (folder / "Makefile").is_file() or folder == stop:
            return folder
        if stop not in folder.parents:
            break
    return stop


def _require_makefiles(site: Any, repo: Path, makefiles: list[Path]) -> None:
    """No Makefile means the targets cannot be read: that is not verifiable, never a finding (nor a root cause)."""
    if not makefiles:
        unreadable(
            f"{site.root}: no Makefile or provisioning/*.mk in the folders from the site up to {repo} (where its "
            "repository should be), so the RKE2 install targets and the GPU Operator apply target cannot be read",
            fix=("Run the suite on the site inside its repository: --site <repository>/sites/<name>, where the "
                 "repository holds the Makefile and provisioning/*.mk (ADR 0001 §6-3: install by make targets); "
                 "or check ADR 0002 §5-4 by hand"),
            fix_ko=("사이트를 그 저장소 안에서 점검한다: --site <저장소>/sites/<이름> (저장소에 Makefile과 provisioning/*.mk가 "
                    "있어야 한다, ADR 0001 §6-3). 또는 ADR 0002 §5-4를 직접 확인한다."))


def _makefiles(repo: Path) -> list[Path]:
    found = [repo / "Makefile"] if (repo / "Makefile").is_file() else []
    return found + sorted((repo / "provisioning").glob("*.mk"))


def _playbook_closure(repo: Path, playbook: Path) -> list[Path]:
    """The playbook and every playbook, task file, template and role folder it uses."""
    seen: list[Path] = []
    stack = [playbook]
    while stack:
        path = stack.pop()
        if path in seen or not path.exists():
            continue
        seen.append(path)
        if path.is_dir():
            stack.extend(p for p in sorted(path.rglob("*")) if p.is_file())
            continue
        files, roles = ansible_references(path.read_text(errors="replace"))
        for ref in files:
            if "{{" in ref:
                continue
            for base in (path.parent, path.parent.parent / "templates", path.parent.parent / "tasks", repo / "provisioning"):
                if (base / ref).is_file():
                    stack.append((base / ref).resolve())
                    break
        for role in roles:
            for roles_dir in (repo / "provisioning" / "roles", path.parent / "roles", path.parent.parent / "roles"):
                if (roles_dir / role).is_dir():
                    stack.append((roles_dir / role).resolve())
                    break
    return seen


def _make_rules(makefiles: list[Path]) -> dict[str, tuple[list[str], list[str]]]:
    """Every Make rule of the repo's Makefile and included fragments; a target's prerequisites and recipe lines add up."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    for makefile in makefiles:
        for target, (prereqs, recipe) in parse_make_rules(makefile.read_text(errors="replace")).items():
            old = rules.get(target, ([], []))
            rules[target] = (old[0] + prereqs, old[1] + recipe)
    return rules


@pytest.mark.rule("ADR-0002.operator-separate")
def test_rke2_install_targets_never_deploy_gpu_operator(site: Any, evidence: Any) -> None:
    repo = _repo_root(site)
    makefiles = _makefiles(repo)
    rules = _make_rules(makefiles)
    problems: list[str] = []
    unverifiable: list[str] = []
    scanned: dict[str, list[str]] = {}
    evidence.record("makefiles", [str(m) for m in makefiles])
    _require_makefiles(site, repo, makefiles)
    for target in INSTALL_TARGETS:
        if target not in rules:
            unverifiable.append(f"make target {target} is not in {', '.join(str(m) for m in makefiles)}")
            continue
        recipe = make_recipe_closure(rules, target)
        for line in recipe:
            if GPU_OPERATOR_REFERENCE.search(line):
                problems.append(f"make {target} recipe runs {line!r}")
        playbooks = [repo / m.group(1) for line in recipe for m in PLAYBOOK_IN_RECIPE.finditer(line) if "$" not in m.group(1)]
        playbooks += [p for line in recipe for p in repo.glob("provisioning/playbooks/*.yml") if p.name in line]
        playbooks = sorted(set(p for p in playbooks if p.is_file()))
        if not playbooks:
            unverifiable.append(f"make {target} runs no playbook this check can follow: {recipe!r}")
        files: list[Path] = []
        for playbook in playbooks:
            files.extend(f for f in _playbook_closure(repo, playbook) if f.is_file())
        scanned[target] = sorted(str(f.relative_to(repo)) if f.is_relative_to(repo) else str(f) for f in set(files))
        for path in sorted(set(files)):
            text = strip_yaml_comments(path.read_text(errors="replace"))
            for number, line in enumerate(text.splitlines(), 1):
                if GPU_OPERATOR_REFERENCE.search(line):
                    shown = path.relative_to(repo) if path.is_relative_to(repo) else path
                    problems.append(f"{shown}:{number} (used by make {target}) deploys or names the GPU Operator: "
                                    f"{line.strip()!r}")
    evidence.record("files scanned per install target", scanned)
    evidence.record("not verifiable", unverifiable)
    require(problems == [], (
        f"{repo}: ADR 0002 §5-1/§5-4: the RKE2 install targets must not deploy the GPU Operator (it is applied on its "
        f"own, by make {OPERATOR_TARGET}): " + "; ".join(problems)
    ))
    if unverifiable:
        unreadable(f"{repo}: whether the RKE2 install targets deploy the GPU Operator cannot be read: "
                   + "; ".join(unverifiable))


@pytest.mark.rule("ADR-0002.operator-separate")
def test_gpu_operator_has_its_own_apply_target(site: Any, evidence: Any) -> None:
    repo = _repo_root(site)
    makefiles = _makefiles(repo)
    rules = _make_rules(makefiles)
    _require_makefiles(site, repo, makefiles)
    recipe = make_recipe_closure(rules, OPERATOR_TARGET) if OPERATOR_TARGET in rules else None
    evidence.record(OPERATOR_TARGET, recipe)
    require(recipe is not None, (
        f"{repo}: ADR 0002 §5-4 applies the GPU Operator on its own, after the RKE2 install and the kubeconfig: make "
        f"{OPERATOR_TARGET} is not in {', '.join(str(m) for m in makefiles)}"
    ))
    require(recipe, f"make {OPERATOR_TARGET} has an empty recipe")
