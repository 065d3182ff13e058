"""A synthetic, complete results.json (30 rules) for previewing the summary and testing the bundle."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pytest_dgxspark.judge.status import BROKEN, Status

# The public rule ids by layer (DESIGN.md); used only to build the example.
RULE_LAYERS: dict[str, tuple[str, ...]] = {
    "site": ("ADR-0001.site-layout", "ADR-0001.role-alias", "ADR-0002.operator-separate",
             "ADR-0002.helmchart-manifest"),
    "host": ("ADR-0002.host-static-ip", "ADR-0002.host-driver", "ADR-0002.host-nvml", "ADR-0002.driver-source"),
    "rke2": ("ADR-0001.rke2-service", "ADR-0001.rke2-config", "ADR-0001.node-ready", "ADR-0001.node-metadata",
             "ADR-0001.kubeconfig-context", "ADR-0001.hardening-baseline"),
    "runtime": ("ADR-0001.runtime-rke2-containerd", "ADR-0001.no-docker-cri", "ADR-0001.no-extra-containerd",
                "ADR-0002.gpu-injection"),
    "network": ("ADR-0001.cni-cilium", "ADR-0001.cilium-settings"),
    "gpu-operator": ("ADR-0002.helmchart-live", "ADR-0002.operator-running", "ADR-0002.operator-components",
                     "ADR-0002.operator-managed", "ADR-0002.validator-passed", "ADR-0002.image-mirror"),
    "device-plugin": ("ADR-0002.node-gpu-labels",),
    "allocatable": ("ADR-0002.allocatable",),
    "workload": ("ADR-0002.cuda-sample",),
    "gitops": ("ADR-0001.argocd-registered",),
}

PROVENANCE: dict[str, Any] = {
    "cluster": {"uid": "5a1c2d3e-0000-4000-8000-00000000c1d5", "kubernetes": "v1.33.5+rke2r1",
                "gpu_operator_chart": "v26.3.2", "cilium": "1.18.1"},
    "nodes": {"gpu-01": {"dgx_os": "7.2.3", "kernel": "6.11.0-1016-nvidia", "arch": "arm64",
                         "driver": "580.95.05", "driver_flavour": "open", "cuda": "13.0",
                         "rke2": "v1.33.5+rke2r1", "containerd": "v2.1.4-k3s2", "cilium": "1.18.1",
                         "gpu_operator_chart": "v26.3.2", "device_plugin": "v0.18.0"}},
}


# The statuses the example's tests end with as their own outcome; a rule given another status has passing tests.
_RAN = (Status.PASSED, Status.FAILED, Status.ERROR, Status.BLOCKED, Status.NOT_APPLICABLE)
# Layers whose checks run once per node (the suites parametrize them by host name).
PER_NODE_LAYERS = frozenset({"host", "rke2", "runtime", "allocatable"})


def _tests(layer: str, name: str, rule_id: str, index: int, outcome: str, nodes: int) -> list[dict[str, Any]]:
    nodeid = f"suites/{layer}/test_{layer.replace('-', '_')}.py::test_{name}"
    params = [f"gpu-{n:02d}" for n in range(1, nodes + 1)] if nodes > 1 and layer in PER_NODE_LAYERS else [None]
    return [{"nodeid": nodeid if param is None else f"{nodeid}[{param}]",
             "outcome": outcome, "duration": 0.01 * (index + 1),
             "message": "" if outcome == Status.PASSED else f"{rule_id} did not hold",
             "evidence": f"evidence/{layer}-{name}{'' if param is None else '-' + param}.json"}
            for param in params]


def node_provenance(nodes: int) -> dict[str, Any]:
    """PROVENANCE with nodes gpu-01..gpu-NN (each its own address), as a 16-node site reports it."""
    provenance = copy.deepcopy(PROVENANCE)
    if nodes > 1:
        base = provenance["nodes"]["gpu-01"]
        provenance["nodes"] = {f"gpu-{n:02d}": {**base, "address": f"10.20.0.{10 + n}"} for n in range(1, nodes + 1)}
    return provenance


def example_results(*, simulated: bool = True, run_id: str = "20260105T010203Z-0a1b", lang: str = "both",
                    statuses: dict[str, str] | None = None, nodes: int = 1) -> dict[str, Any]:
    """A results dict with every rule passed (or the given statuses), layers, provenance, waiver and manual check.

    With nodes > 1 the per-node checks run once per node (`[gpu-NN]` node ids), as on a multi-node site.
    """
    statuses = statuses or {}
    rules = []
    for layer, ids in RULE_LAYERS.items():
        for index, rule_id in enumerate(ids):
            name = rule_id.split(".", 1)[1].replace("-", "_")
            status = statuses.get(rule_id, Status.PASSED)
            outcome = status if status in _RAN else Status.PASSED
            rules.append({
                "id": rule_id, "adr": rule_id[4:8], "section": f"5-{index + 1}",
                "statement_ko": f"{layer} 계층의 규칙 {name}이(가) 충족된다.",
                "title": f"{layer} rule {name} holds", "layer": layer,
                "kind": "informational" if rule_id.endswith("hardening-baseline") else "required",
                "severity": "critical", "depends_on": [],
                "remediation": f"Fix the {layer} layer first; do not reinstall RKE2.",
                "status": status, "blocked_by": [], "waiver": None,
                "tests": _tests(layer, name, rule_id, index, outcome, nodes),
            })
    counts: dict[str, int] = {}
    for rule in rules:
        counts[rule["status"]] = counts.get(rule["status"], 0) + 1
    broken = [r for r in rules if r["status"] in BROKEN]
    lowest = broken[0]["layer"] if broken else None
    return {
        "schema": 1,
        "run": {"id": run_id, "simulated": simulated, "site": "tirosh-home",
                "started": "2026-01-05T01:02:03+00:00", "finished": "2026-01-05T01:04:09+00:00",
                "testbed": "healthy" if simulated else None, "handover": False, "pytest_args": ["suites"],
                "hostname_of_runner": "ci-runner", "operator": "Kim Engineer <script>", "lang": lang},
        "verdict": "REJECTED" if broken else ("INCOMPLETE" if simulated else "ACCEPTED"),
        "verdict_reasons": [f"{r['id']} {r['status']}" for r in broken],
        "root_causes": [r["id"] for r in broken[:1]],
        "lowest_broken_layer": lowest,
        "layers": [{"name": layer, "status": Status.FAILED if layer == lowest else Status.PASSED, "rules": list(ids)}
                   for layer, ids in RULE_LAYERS.items()],
        "rules": rules,
        "counts": counts,
        "provenance": node_provenance(nodes),
        "waivers": [{"rule": "ADR-0002.image-mirror", "reason": "site is not air-gapped", "approver": "Lee Security",
                     "role": "security officer", "ticket": "HOSP-42", "expires": "2026-12-31", "expired": False}],
        "manual_checks": [{"id": "ups", "title_ko": "UPS 연결 확인", "title_en": "UPS connected",
                           "attester": "Park IT", "date": "2026-01-05", "note": "", "attested": True}],
        "timings": {"total_s": 126.0, "per_layer_s": {layer: 1.0 for layer in RULE_LAYERS}},
        "drift": None,
    }


def write_example_bundle(run_dir: Path, results: dict[str, Any]) -> Path:
    """Lay results.json and its evidence files into run_dir, as the core would; return run_dir."""
    (run_dir / "evidence").mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    for rule in results["rules"]:
        for test in rule["tests"]:
            if test.get("evidence"):
                (run_dir / test["evidence"]).write_text(json.dumps(
                    {"nodeid": test["nodeid"], "rule": rule["id"], "items": [{"label": "status", "value": rule["status"]}]}
                ), encoding="utf-8")
    return run_dir


# pytest-html's outcome words and pytest junitxml's elements for the example's test outcomes (as pytest writes them,
# before the bundle brings them in line with results.json)
_PYTEST_WORD = {Status.PASSED: "Passed", Status.FAILED: "Failed", Status.ERROR: "Error", Status.BLOCKED: "Skipped",
                Status.NOT_APPLICABLE: "Skipped"}
_PYTEST_ELEMENT = {Status.FAILED: "failure", Status.ERROR: "error", Status.BLOCKED: "skipped",
                   Status.NOT_APPLICABLE: "skipped"}


def write_pytest_files(run_dir: Path, results: dict[str, Any]) -> Path:
    """report.html and junit.xml in the shape pytest-html and junitxml write them (data blob, filters, filter list;
    per-testcase properties and file attributes), from results' tests: what the bundle agrees with results.json."""
    from html import escape as html_escape
    from xml.sax.saxutils import quoteattr

    tests = [(rule, test) for rule in results["rules"] for test in rule["tests"]]
    blob = {"environment": {}, "tests": {}, "renderCollapsed": ["passed"], "initialSort": "result", "title": "report.html"}
    for rule, test in tests:
        word = _PYTEST_WORD.get(test["outcome"], "Passed")
        blob["tests"][test["nodeid"]] = [{
            "extras": [], "result": word, "testId": test["nodeid"], "rule": rule["id"], "log": "",
            "resultsTableRow": [f'<td class="col-result">{word}</td>', f'<td class="col-testId">{test["nodeid"]}</td>',
                                f'<td class="col-rule">{rule["id"]}</td>']}]
    page = ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"/><title>report.html</title></head><body>"
            f"<div id=\"data-container\" data-jsonblob=\"{html_escape(json.dumps(blob))}\"></div>"
            "<div class=\"summary\"><div class=\"summary__data\"><div class=\"additional-summary prefix\"></div>"
            "<div class=\"controls\"><div class=\"filters\"><span class=\"passed\">0 Passed,</span></div></div></div></div>"
            "<script>const possibleFilters = [\n    'passed',\n    'skipped',\n]</script></body></html>")
    (run_dir / "report.html").write_text(page, encoding="utf-8")
    cases = []
    for rule, test in tests:
        path, _, name = test["nodeid"].partition("::")
        element = _PYTEST_ELEMENT.get(test["outcome"])
        inner = (f"<properties><property name=\"rule\" value={quoteattr(rule['id'])} /></properties>"
                 + (f"<{element} message={quoteattr(test.get('message') or '')}>x</{element}>" if element else ""))
        cases.append(f"<testcase classname={quoteattr(path[:-3].replace('/', '.'))} name={quoteattr(name)} "
                     f"file={quoteattr(path)} time=\"0.010\">{inner}</testcase>")
    (run_dir / "junit.xml").write_text(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><testsuites name=\"pytest tests\"><testsuite name=\"pytest\" "
        f"errors=\"0\" failures=\"0\" skipped=\"0\" tests=\"{len(cases)}\" time=\"1.0\">{''.join(cases)}</testsuite>"
        "</testsuites>", encoding="utf-8")
    return run_dir
