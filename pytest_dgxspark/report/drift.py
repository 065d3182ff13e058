"""Drift since a baseline run: rule statuses that regressed, recovered or became waived, and changed provenance."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_json
from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report import facts
from pytest_dgxspark.report.manifest import ManifestError, check_manifest

# judge.status.BROKEN and blocked: a rule that now cannot run (its dependency broke) regressed too
BROKEN = frozenset({Status.FAILED, Status.ERROR, Status.BLOCKED})
# Provenance a testbed draws anew on each start (its free address slot), not the scenario's: between two simulated
# runs these are set aside, as a real site's node addresses and API endpoint stay put.
TESTBED_SLOT_KEYS = frozenset({"address", "server"})
# A rule a run did not judge (deselected by -m/-k, or without tests) has no status to compare.
NOT_JUDGED = frozenset({Status.NOT_SELECTED, Status.UNTESTED, None})


class BaselineError(Exception):
    """The baseline given with --dgxspark-baseline cannot be used."""


@dataclass(frozen=True)
class Baseline:
    """An earlier run's results, and where they came from."""

    path: Path
    results: dict[str, Any]
    integrity: str  # "verified", "mismatch: ...", "no manifest" or "not a bundle"


def load_baseline(path: Path) -> Baseline:
    """Read an earlier results.json, or the results.json of a bundle directory; BaselineError names the file."""
    integrity = "not a bundle"
    source = path
    if path.is_dir():
        source = path / "results.json"
        if not source.is_file():
            raise BaselineError(
                f"--dgxspark-baseline {path}: no results.json in this directory "
                "(expected an earlier results.json or bundle directory)"
            )
        integrity = _integrity(path)
    elif not path.is_file():
        raise BaselineError(f"--dgxspark-baseline {path}: no such file or directory")
    try:  # the one bounded loader: size and depth budgets, NaN refused
        results = load_json(source)
    except ValueError as exc:
        raise BaselineError(f"--dgxspark-baseline {exc}") from None
    problems = _shape_problems(results)
    if problems:
        raise BaselineError(f"--dgxspark-baseline {source}: not a dgxspark results.json: {'; '.join(problems)}")
    return Baseline(source, results, integrity)


def _integrity(run_dir: Path) -> str:
    try:
        check = check_manifest(run_dir)
    except ManifestError:
        return "no manifest"
    return "verified" if check.ok else "mismatch: " + ", ".join(check.problems())


def _shape_problems(results: Any) -> list[str]:
    if not isinstance(results, dict):
        return [f"expected a JSON object, got {type(results).__name__}"]
    problems = []
    if not isinstance(results.get("run"), dict):
        problems.append("'run' must be an object")
    rules = results.get("rules")
    if not isinstance(rules, list):
        problems.append("'rules' must be a list")
    else:
        for index, rule in enumerate(rules):
            if not isinstance(rule, dict) or not isinstance(rule.get("id"), str) or "status" not in rule:
                problems.append(f"rules[{index}] must be an object with 'id' and 'status'")
                break
    if "provenance" in results and not isinstance(results["provenance"], dict):
        problems.append("'provenance' must be an object")
    return problems


def _statuses(results: dict[str, Any]) -> dict[str, str]:
    return {rule["id"]: rule.get("status") for rule in results.get("rules", [])}


def provenance_changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """Every provenance value that differs, per scope (node None for the cluster) and key, with from/to."""
    old, new = facts.scopes(before), facts.scopes(after)
    changes: list[dict[str, Any]] = []
    for scope in [facts.CLUSTER, *sorted((set(old) | set(new)) - {facts.CLUSTER})]:
        node = scope or None
        if scope not in old or scope not in new:
            changes.append({"node": node, "key": "(node)", "from": "present" if scope in old else None,
                            "to": "present" if scope in new else None})
            continue
        for key in sorted(set(old[scope]) | set(new[scope])):
            if old[scope].get(key) != new[scope].get(key):
                changes.append({"node": node, "key": key, "from": old[scope].get(key), "to": new[scope].get(key)})
    return changes


def other_cluster(before: Any, after: Any) -> dict[str, Any] | None:
    """{from, to} when the baseline was taken on another cluster (kube-system namespace UID differs), else None."""
    old = facts.scopes(before).get(facts.CLUSTER, {}).get("cluster_uid")
    new = facts.scopes(after).get(facts.CLUSTER, {}).get("cluster_uid")
    if old and new and old != new:
        return {"key": "cluster_uid", "from": old, "to": new,
                "message": f"the baseline is of another cluster (kube-system UID {old} -> {new}): "
                           "its statuses and versions describe a different installation"}
    return None


def compute_drift(baseline: Baseline, current: dict[str, Any]) -> dict[str, Any]:
    """The drift section of results.json: current against the baseline run, over the rules both runs judged."""
    before, after = _statuses(baseline.results), _statuses(current)
    every = [*after, *(r for r in before if r not in after)]
    judged = [r for r in every if before.get(r) not in NOT_JUDGED and after.get(r) not in NOT_JUDGED]
    changes = [
        {"rule": rule, "from": before.get(rule), "to": after.get(rule)}
        for rule in judged
        if before.get(rule) != after.get(rule)
    ]
    run = baseline.results.get("run", {})
    provenance = provenance_changes(baseline.results.get("provenance"), current.get("provenance"))
    elsewhere = other_cluster(baseline.results.get("provenance"), current.get("provenance"))
    if elsewhere is not None:
        provenance = [c for c in provenance if not (c["node"] is None and c["key"] == "cluster_uid")]
    set_aside = []
    if run.get("simulated") and current.get("run", {}).get("simulated"):
        set_aside = [c for c in provenance if c["key"] in TESTBED_SLOT_KEYS]
        provenance = [c for c in provenance if c["key"] not in TESTBED_SLOT_KEYS]
    return {
        "other_cluster": elsewhere,
        "compared_rules": judged,
        "not_compared": [r for r in every if r not in judged],
        "baseline": {
            "path": str(baseline.path),
            "run_id": run.get("id"),
            "started": run.get("started"),
            "simulated": run.get("simulated"),
            "verdict": baseline.results.get("verdict"),
            "integrity": baseline.integrity,
        },
        "regressed": [c for c in changes if c["from"] == Status.PASSED and c["to"] in BROKEN],
        "recovered": [c for c in changes if c["from"] in BROKEN and c["to"] == Status.PASSED],
        "newly_waived": [c for c in changes if c["to"] == Status.WAIVED],
        "status_changes": changes,
        "provenance": provenance,
        # both runs are testbeds: their addresses come from the address slot each start took, not the scenario
        "testbed_addresses_not_compared": set_aside,
    }
