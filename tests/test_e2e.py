"""End to end: the real suites against every bundled testbed scenario, checked against its expect block."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"
)


def bundled_scenarios() -> list[str]:
    from pytest_dgxspark.testbed import scenario

    return [name for name, _ in scenario.bundled()]


def run_suite(tmp_path: Path, *args: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess, dict]:
    report_dir = tmp_path / "reports"
    cmd = [sys.executable, "-m", "pytest", "suites", "--report-dir", str(report_dir), "-p", "no:cacheprovider",
           "-q", "--no-header", "--dgxspark-cuda-timeout", "15", "--dgxspark-smi-timeout", "8", *args]
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)  # like Ctrl-C: the run tears its testbed down and writes its report
            out, err = child.communicate(timeout=60)
        proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    results = report_dir / "latest" / "results.json"
    assert results.is_file(), f"no results.json written\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    return proc, json.loads(results.read_text())


def netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.parametrize("name", bundled_scenarios())
def test_the_suites_give_the_scenarios_expected_statuses_and_root_causes(tmp_path, name):
    from pytest_dgxspark.testbed import scenario

    expect = scenario.load(name).expect
    before = netns_list()
    proc, doc = run_suite(tmp_path, "--testbed", name)
    got = {r["id"]: r["status"] for r in doc["rules"]}
    messages = {r["id"]: [t["message"] for t in r["tests"] if t["message"]] for r in doc["rules"]}
    wrong = {rid: (want, got.get(rid), messages.get(rid)) for rid, want in expect["rules"].items() if got.get(rid) != want}
    assert wrong == {}, f"{name}: rule statuses differ (expected, got, messages)\n{proc.stdout[-3000:]}"
    assert sorted(doc["root_causes"]) == sorted(expect["root_causes"])
    assert doc["run"]["simulated"] is True and doc["run"]["testbed"] == name
    assert netns_list() <= before, "the testbed left a network namespace behind"


def test_the_healthy_dgx_spark_passes_every_rule_but_the_air_gap_one(tmp_path):
    proc, doc = run_suite(tmp_path, "--testbed", "healthy")
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    assert statuses.pop("ADR-0002.image-mirror") == "not-applicable"
    assert set(statuses.values()) == {"passed"}, proc.stdout[-3000:]
    assert doc["verdict"] == "ACCEPTED" and doc["root_causes"] == []


def test_gpu_marker_reruns_exactly_the_gpu_chain(tmp_path):
    from pytest_dgxspark.rules import load_catalog

    _, doc = run_suite(tmp_path, "--testbed", "healthy", "-m", "gpu")
    gpu_rules = {r.id for r in load_catalog().rules.values() if r.gpu}
    tested = {r["id"] for r in doc["rules"] if r["tests"]}
    assert tested == gpu_rules
    assert doc["verdict"] == "INCOMPLETE"
