"""Selection has a scope: -m/-k judge what they select; drift compares only what both runs judged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from pytest_dgxspark.judge.scope import scope_of
from pytest_dgxspark.report.drift import Baseline, compute_drift
from tests.pytester_args import SITE_ARGS


def _all_rules(body_for: dict[str, str]) -> str:
    parts = []
    for i, r in enumerate(load_catalog().ordered()):
        parts.append(f"@pytest.mark.rule('{r.id}')\ndef test_{i}():\n    {body_for.get(r.id, 'pass')}\n")
    return "\n".join(parts)


@pytest.mark.slow
def test_a_gpu_selection_is_accepted_on_its_scope_with_deselected_rules_not_selected(pytester, suite):
    suite("all", _all_rules({}))
    result = pytester.runpytest(*SITE_ARGS, "-m", "gpu")
    assert result.ret == 0
    doc = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    st = {r["id"]: r["status"] for r in doc["rules"]}
    catalog = load_catalog()
    assert {rid for rid, s in st.items() if s == "not-selected"} == {r.id for r in catalog.rules.values() if not r.gpu}
    assert doc["verdict"] == "ACCEPTED" and doc["scope"]["name"] == "GPU chain" and doc["scope"]["full"] is False
    assert doc["scope"]["unverified_prerequisites"] == [
        "ADR-0002.helmchart-manifest", "ADR-0001.rke2-service", "ADR-0001.node-ready",
        "ADR-0001.runtime-rke2-containerd"]
    result.stdout.fnmatch_lines([
        "dgxspark: ACCEPTED, scope: GPU chain",
        "  lowest broken layer: none",
        "  root causes: none",
        "  not verified by this selection (prerequisites): ADR-0002.helmchart-manifest, ADR-0001.rke2-service, "
        "ADR-0001.node-ready, ADR-0001.runtime-rke2-containerd",
        "  rules: 14 passed, 2 not-applicable, 17 not-selected",
    ])


@pytest.mark.slow
def test_a_keyword_selection_names_its_scope_and_a_selection_is_never_a_handover(pytester, suite):
    suite("all", _all_rules({}))
    pytester.runpytest(*SITE_ARGS, "-k", "test_1 or test_2", "--dgxspark-handover")
    doc = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    assert doc["scope"]["name"] == "-k 'test_1 or test_2'"
    assert doc["verdict"] == "INCOMPLETE"
    assert "a selection (scope: -k 'test_1 or test_2') is never a handover acceptance" in doc["verdict_reasons"]


def test_a_run_of_everything_has_the_full_scope():
    catalog = load_catalog()
    scope = scope_of(catalog, list(catalog.rules), [], "", "")
    assert scope.name == "full" and scope.full and scope.unverified == ()


def _doc(statuses: dict[str, str], uid: str = "uid-1", driver: str = "580.95.05") -> dict:
    return {"run": {"id": "r"}, "verdict": "ACCEPTED",
            "rules": [{"id": rid, "status": s} for rid, s in statuses.items()],
            "provenance": {"cluster": {"cluster_uid": uid}, "hosts": {"gpu-01": {"driver": driver}}}}


def test_drift_compares_only_rules_judged_in_both_runs():
    before = _doc({"ADR-0002.host-driver": "passed", "ADR-0001.rke2-service": "passed", "ADR-0001.site-layout": "untested"})
    after = _doc({"ADR-0002.host-driver": "passed", "ADR-0001.rke2-service": "not-selected",
                  "ADR-0001.site-layout": "failed"}, driver="580.126.09")
    drift = compute_drift(Baseline(Path("b.json"), before, "not a bundle"), after)
    assert drift["status_changes"] == []
    assert drift["compared_rules"] == ["ADR-0002.host-driver"]
    assert drift["not_compared"] == ["ADR-0001.rke2-service", "ADR-0001.site-layout"]
    assert drift["provenance"] == [{"node": "gpu-01", "key": "driver", "from": "580.95.05", "to": "580.126.09"}]
    assert drift["other_cluster"] is None


def test_a_baseline_of_another_cluster_is_called_out_first():
    drift = compute_drift(Baseline(Path("b.json"), _doc({}, uid="aaa"), "verified"), _doc({}, uid="bbb"))
    assert list(drift)[0] == "other_cluster"
    assert drift["other_cluster"]["message"].startswith("the baseline is of another cluster (kube-system UID aaa -> bbb)")
    assert all(c["key"] != "cluster_uid" for c in drift["provenance"])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server")
def test_a_rehearsal_on_the_same_scenario_shows_no_drift_and_an_upgrade_shows_only_the_driver_change(tmp_path):
    """The README's after-upgrade run, rehearsed on the testbed: a scenario (and one extending it) keeps its kube-system
    UID across starts, as a real cluster does, so the baseline is never 'of another cluster'."""
    from tests.test_e2e import run_suite

    for sub in ("handover", "rehearsal", "after"):
        (tmp_path / sub).mkdir()
    first, handover = run_suite(tmp_path / "handover", "--testbed", "healthy")
    assert handover["verdict"] == "ACCEPTED", first.stdout[-3000:]
    baseline = str((tmp_path / "handover" / "reports" / "latest").resolve())
    proc, doc = run_suite(tmp_path / "rehearsal", "--testbed", "healthy", "-m", "gpu", "--dgxspark-baseline", baseline)
    assert doc["verdict"] == "ACCEPTED", proc.stdout[-3000:]
    drift = doc["drift"]
    assert (drift["other_cluster"], drift["status_changes"], drift["provenance"]) == (None, [], [])
    assert "another cluster" not in proc.stdout
    assert "  drift: 0 status changes, 0 provenance changes over 16 rules judged in both runs" in proc.stdout
    upgraded = tmp_path / "upgraded"
    upgraded.mkdir()
    (upgraded / "scenario.yaml").write_text(
        "description: healthy after a driver upgrade\nextends: healthy\nnodes:\n  gpu-01:\n"
        "    host: {driver: {version: 580.126.09}}\n    kube: {driver_version: 580.126.09}\n"
        "expect: {rules: {}, root_causes: []}\n")
    proc, doc = run_suite(tmp_path / "after", "--testbed", str(upgraded), "-m", "gpu", "--dgxspark-baseline", baseline)
    assert doc["verdict"] == "ACCEPTED" and doc["scope"]["name"] == "GPU chain", proc.stdout[-3000:]
    assert proc.returncode == 0
    drift = doc["drift"]
    assert drift["other_cluster"] is None and drift["status_changes"] == []
    assert len(drift["not_compared"]) == 17
    assert "drift: 0 status changes, " in proc.stdout and " over 16 rules judged in both runs" in proc.stdout
    assert drift["provenance"] and {c["key"] for c in drift["provenance"]} == {"nvidia_driver"}
    assert all((c["from"], c["to"]) == ("580.95.05", "580.126.09") for c in drift["provenance"])


def test_a_scenario_keeps_its_namespace_uids_across_starts_and_one_extending_it_is_the_same_cluster():
    from pytest_dgxspark.testbed import scenario
    from pytest_dgxspark.testbed.objects import build_management, build_workload
    from pytest_dgxspark.testbed.world import make_context

    def uids(name: str) -> tuple[str, str]:
        ctx = make_context(scenario.load(name), {"gpu-01": "172.29.9.2"})
        ns = {o["metadata"]["name"]: o["metadata"]["uid"] for o in build_workload(ctx).objects if o["kind"] == "Namespace"}
        mgmt = {o["metadata"]["name"]: o["metadata"]["uid"]
                for o in build_management(ctx, "https://172.29.9.2:6443", b"", "t").objects if o["kind"] == "Namespace"}
        return ns["kube-system"], mgmt["kube-system"]

    first, again, extended = uids("healthy"), uids("healthy"), uids("driver-not-loaded")
    assert first == again == extended
    assert first[0] != first[1]  # the management cluster is another cluster
    assert scenario.load("driver-not-loaded").lineage == "healthy"


def _slot_doc(simulated: bool, address: str) -> dict:
    doc = _doc({})
    doc["run"]["simulated"] = simulated
    doc["provenance"]["hosts"]["gpu-01"]["address"] = address
    doc["provenance"]["cluster"]["server"] = f"https://{address}:6443"
    return doc


def test_between_two_testbed_runs_addresses_are_set_aside_and_between_real_runs_they_are_drift():
    drift = compute_drift(Baseline(Path("b.json"), _slot_doc(True, "172.29.1.2"), "verified"), _slot_doc(True, "172.29.3.2"))
    assert drift["provenance"] == []
    assert [c["key"] for c in drift["testbed_addresses_not_compared"]] == ["server", "address"]
    drift = compute_drift(Baseline(Path("b.json"), _slot_doc(False, "10.0.0.21"), "verified"), _slot_doc(False, "10.0.0.22"))
    assert [(c["key"], c["to"]) for c in drift["provenance"]] == [("server", "https://10.0.0.22:6443"), ("address", "10.0.0.22")]
    assert drift["testbed_addresses_not_compared"] == []
