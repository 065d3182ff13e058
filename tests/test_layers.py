"""The house in layers: every import of the package (at module level and inside functions) follows the layer order,
no module imports itself back through others, and the testbed is reached through its one door."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dgxspark"

# Bottom-up. A module may import its own layer and the layers below it; the face sits on top of everything.
LAYERS = ("words", "catalog", "site", "targets", "probes", "kube", "judge", "report", "face")
FACE = {"pytest_dgxspark", "pytest_dgxspark.plugin", "pytest_dgxspark.plan", "pytest_dgxspark.fixtures",
        "pytest_dgxspark.hookspecs",
        # pytest plugins of their own beside the layer they serve (the bundle's hooks): they read the run plan
        "pytest_dgxspark.report.plugin", "pytest_dgxspark.report.bundleguard"}
WORDS = {"pytest_dgxspark.checking"}
TESTBED = "pytest_dgxspark.testbed"
# What the testbed (a simulated site) may read of the suite: the site's files through the site's own loader.
TESTBED_MAY_IMPORT = ("words", "catalog", "site")

# Imports that run against the order today, each with why; this list may only shrink.
ALLOWED: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    if module in FACE:
        return "face"
    if module in WORDS or module == "pytest_dgxspark.data" or module.startswith("pytest_dgxspark.data."):
        return "words"
    if module == TESTBED or module.startswith(TESTBED + "."):
        return "testbed"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> list[tuple[str, int]]:
    """Every package module `path` imports (module level and inside functions), with the line."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("pytest_dgxspark")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("pytest_dgxspark"):
            for alias in node.names:  # `from pkg import submodule` imports the submodule
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in known else node.module, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; the package imports by absolute name")
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def edges() -> list[tuple[str, str, int]]:
    table = modules()
    known = set(table)
    return [(name, target, line) for name, path in table.items() for target, line in imports_of(path, known)
            if target != name]


def against_the_order(source: str, target: str) -> str | None:
    """Why `source` may not import `target`, or None when it may."""
    src, dst = layer_of(source), layer_of(target)
    if src is None:
        return f"{source} belongs to no layer (the package root keeps only the face and the check words)"
    if dst is None:
        return f"{target} belongs to no layer"
    if dst == "testbed":
        if src == "testbed" or target == TESTBED:
            return None
        return f"{target} is inside the testbed: outside it, import only its door, {TESTBED}"
    if src == "testbed":
        return None if dst in TESTBED_MAY_IMPORT else f"the testbed may read only {TESTBED_MAY_IMPORT}, not {dst}"
    if LAYERS.index(dst) > LAYERS.index(src):
        return f"{src} may not import {dst} (above it)"
    return None


def test_every_module_of_the_package_belongs_to_a_layer():
    assert [name for name in modules() if layer_of(name) is None] == []


def test_no_import_runs_against_the_layer_order():
    wrong = []
    for source, target, line in edges():
        why = against_the_order(source, target)
        if why and (source, target) not in ALLOWED:
            wrong.append(f"{source}:{line} imports {target}: {why}")
    assert wrong == []


def test_the_allow_list_holds_only_imports_that_still_run_against_the_order():
    seen = {(source, target) for source, target, _ in edges() if against_the_order(source, target)}
    assert sorted(set(ALLOWED) - seen) == [], "remove these from ALLOWED: they no longer run against the order"


def test_no_module_imports_itself_back_through_others():
    graph: dict[str, set[str]] = {}
    for source, target, _ in edges():
        if target in modules() and not target.startswith(source + "."):  # a package's door naming its own modules
            graph.setdefault(source, set()).add(target)
    try:
        graphlib.TopologicalSorter(graph).static_order()
    except graphlib.CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def test_the_guard_itself_sees_an_import_against_the_order(tmp_path):
    """The guard would fail on the wrong import it is there to catch (a transport calling a probe)."""
    assert against_the_order("pytest_dgxspark.targets.connections", "pytest_dgxspark.probes.gather")
    assert against_the_order("pytest_dgxspark.report.results", "pytest_dgxspark.plan")
    assert against_the_order("pytest_dgxspark.fixtures", "pytest_dgxspark.testbed.orchestrator")
    assert against_the_order("pytest_dgxspark.testbed.kubelet", "pytest_dgxspark.judge.fold")
    assert against_the_order("pytest_dgxspark.kube.objects", "pytest_dgxspark.probes.network") is None
    hidden = tmp_path / "hidden.py"
    hidden.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pytest_dgxspark.plan import RunPlan\n"
                      "def f():\n    from pytest_dgxspark.plan import resolve\n")
    assert imports_of(hidden, set(modules())) == [("pytest_dgxspark.plan", 5)]


def test_the_testbed_door_opens_each_name_when_asked_and_a_testbed_process_imports_only_its_module():
    import subprocess
    import sys

    import pytest_dgxspark.testbed as door

    assert sorted(door.__all__) == sorted(door._DOOR)
    assert all(getattr(door, name) is not None for name in door.__all__)
    code = ("import sys, pytest_dgxspark.testbed.kwokrun; "
            "print(sorted(m for m in sys.modules if m.startswith('pytest_dgxspark.testbed.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "orchestrator" not in loaded and "keptplane" not in loaded and "kwokrun" in loaded
