"""Drift against a baseline run: regressed, recovered and newly waived rules, changed provenance, bad baselines."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.drift import BaselineError, compute_drift, load_baseline
from pytest_dgxspark.report.example import example_results, write_example_bundle
from pytest_dgxspark.report.summary import render_summary


def _healthy_then_fault() -> tuple[dict, dict]:
    healthy = example_results(run_id="20260105T010203Z-aaaa",
                              statuses={"ADR-0001.argocd-registered": "failed", "ADR-0002.image-mirror": "failed"})
    fault = example_results(run_id="20260301T010203Z-bbbb",
                            statuses={"ADR-0002.host-nvml": "failed", "ADR-0002.allocatable": "blocked",
                                      "ADR-0002.image-mirror": "waived"})
    fault["provenance"]["nodes"]["gpu-01"]["driver"] = "580.126.09"
    fault["provenance"]["cluster"]["gpu_operator_chart"] = "v26.3.3"
    return healthy, fault


def test_drift_lists_regressed_recovered_and_newly_waived_rules(tmp_path: Path) -> None:
    healthy, fault = _healthy_then_fault()
    baseline = load_baseline(write_example_bundle(tmp_path / "base", healthy) / "results.json")
    drift = compute_drift(baseline, fault)
    assert drift["regressed"] == [
        {"rule": "ADR-0002.host-nvml", "from": "passed", "to": "failed"},
        {"rule": "ADR-0002.allocatable", "from": "passed", "to": "blocked"},
    ]
    assert drift["recovered"] == [{"rule": "ADR-0001.argocd-registered", "from": "failed", "to": "passed"}]
    assert drift["newly_waived"] == [{"rule": "ADR-0002.image-mirror", "from": "failed", "to": "waived"}]
    assert len(drift["status_changes"]) == 4
    assert drift["baseline"]["run_id"] == "20260105T010203Z-aaaa"
    assert drift["baseline"]["integrity"] == "not a bundle"


def test_drift_lists_changed_provenance_per_node_and_key(tmp_path: Path) -> None:
    healthy, fault = _healthy_then_fault()
    drift = compute_drift(load_baseline(write_example_bundle(tmp_path / "b", healthy)), fault)
    assert drift["provenance"] == [
        {"node": None, "key": "gpu_operator_chart", "from": "v26.3.2", "to": "v26.3.3"},
        {"node": "gpu-01", "key": "driver", "from": "580.95.05", "to": "580.126.09"},
    ]


def test_provenance_from_hosts_and_api_nodes_is_compared_by_node(tmp_path: Path) -> None:
    healthy, fault = _healthy_then_fault()
    healthy["provenance"] = {"hosts": {"gpu-01": {"nvidia_driver": "580.95.05"}},
                             "cluster": {"cluster_uid": "u1", "nodes": {"gpu-01": {"kernel": "6.11.0"}}}}
    fault["provenance"] = {"hosts": {"gpu-01": {"nvidia_driver": "580.126.09"}, "gpu-02": {"nvidia_driver": "580.126.09"}},
                           "cluster": {"cluster_uid": "u1", "nodes": {"gpu-01": {"kernel": "6.11.0"}}}}
    drift = compute_drift(load_baseline(write_example_bundle(tmp_path / "b", healthy)), fault)
    assert drift["provenance"] == [
        {"node": "gpu-01", "key": "nvidia_driver", "from": "580.95.05", "to": "580.126.09"},
        {"node": "gpu-02", "key": "(node)", "from": None, "to": "present"},
    ]


def test_a_bundle_directory_baseline_has_its_manifest_checked(tmp_path: Path) -> None:
    healthy, fault = _healthy_then_fault()
    run_dir = write_example_bundle(tmp_path / "base", healthy)
    assert load_baseline(run_dir).integrity == "no manifest"
    finish_bundle(run_dir)
    assert load_baseline(run_dir).integrity == "verified"
    (run_dir / "summary.html").write_text("changed", encoding="utf-8")
    assert load_baseline(run_dir).integrity == "mismatch: changed: summary.html"


def test_the_summary_shows_the_drift_section(tmp_path: Path) -> None:
    healthy, fault = _healthy_then_fault()
    fault["drift"] = compute_drift(load_baseline(write_example_bundle(tmp_path / "b", healthy)), fault)
    html = render_summary(fault, "en")
    drift = html.split('<section id="drift">')[1].split("</section>")[0]
    assert '<tr class="drift-regressed"><td class="mono">ADR-0002.host-nvml</td>' in drift
    assert '<tr class="drift-recovered"><td class="mono">ADR-0001.argocd-registered</td>' in drift
    assert "580.95.05" in drift and "580.126.09" in drift and "v26.3.3" in drift
    assert '<section id="drift">' not in render_summary(healthy, "en")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON (line 1, column 2: Expecting property name enclosed in double quotes)"),
        ("[]", "not a dgxspark results.json: expected a JSON object, got list"),
        ('{"run": {}, "rules": [{"id": "x"}]}', "not a dgxspark results.json: rules[0] must be an object with 'id' and 'status'"),
        ('{"rules": []}', "not a dgxspark results.json: 'run' must be an object"),
    ],
)
def test_an_invalid_baseline_file_is_refused_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "results.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BaselineError) as excinfo:
        load_baseline(path)
    assert str(excinfo.value) == f"--dgxspark-baseline {path}: {message}"


def test_a_missing_baseline_or_a_directory_without_results_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="no such file or directory"):
        load_baseline(tmp_path / "absent.json")
    with pytest.raises(BaselineError) as excinfo:
        load_baseline(tmp_path)
    assert str(excinfo.value) == (f"--dgxspark-baseline {tmp_path}: no results.json in this directory "
                                  "(expected an earlier results.json or bundle directory)")
    json.dumps(example_results())  # the example itself is JSON-able


def test_a_baseline_of_another_cluster_is_called_out_first_and_uncompared_rules_are_named() -> None:
    results = example_results()
    results["drift"] = {
        "other_cluster": {"key": "cluster_uid", "from": "aaaa", "to": "bbbb",
                          "message": "the baseline is of another cluster (kube-system UID aaaa -> bbbb)"},
        "compared_rules": [], "not_compared": ["ADR-0001.site-layout", "ADR-0001.role-alias"],
        "baseline": {"path": "x", "run_id": "20260101T000000Z-aaaa", "started": "2026-01-01", "simulated": False,
                     "verdict": "ACCEPTED", "integrity": "verified"},
        "regressed": [], "recovered": [], "newly_waived": [], "status_changes": [], "provenance": []}
    drift = render_summary(results, "en").split('<section id="drift">')[1].split("</section>")[0]
    assert drift.index('id="other-cluster"') < drift.index("Baseline run")
    assert "the baseline is of another cluster (kube-system UID aaaa -&gt; bbbb)" in drift
    assert ('<p id="not-compared"><span lang="en">Rules not compared (not judged in one of the runs)</span> (2): '
            '<span class="mono">ADR-0001.site-layout, ADR-0001.role-alias</span></p>') in drift
