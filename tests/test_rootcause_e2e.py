"""Root causes end to end: the real suites against testbed faults of reaching a target, and a host with nothing on it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_e2e import run_suite

# slow: the suite against fault testbeds (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server")]
EXIT_INCOMPLETE = 8


def scenario(tmp_path: Path, body: str) -> Path:
    """A scenario directory extending healthy with `body` (YAML), and no expectations of its own."""
    folder = tmp_path / "scn"
    folder.mkdir()
    (folder / "scenario.yaml").write_text(f"description: root cause e2e\nextends: healthy\n{body}"
                                          "expect: {rules: {}, root_causes: []}\n")
    return folder


def statuses(doc: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in doc["rules"]}


def assert_engineer_terminal(stdout: str, verdict: str) -> None:
    """No traceback through plugin code or the retry loop; the closing block is the last thing said."""
    assert "pytest_dgxspark/" not in stdout and "tenacity" not in stdout and "Traceback" not in stdout
    tail = stdout.strip().splitlines()
    start = max(i for i, line in enumerate(tail) if line.startswith("dgxspark: ") and ", scope: " in line)
    assert tail[start].startswith(f"dgxspark: {verdict}, scope: full")
    assert re.search(r" in [0-9.]+s", tail[start - 2])  # right after pytest's own summary line


def test_an_ssh_connection_dropped_mid_run_is_incomplete_never_rejected(tmp_path):
    # command 1 opens the master, 2 is the first gathering round, 3 (the follow-ups) finds the connection dropped
    proc, doc = run_suite(tmp_path, "--testbed", str(scenario(tmp_path, "nodes:\n  gpu-01:\n    host:\n"
                                                                     "      faults: {drop_after: 2}\n")))
    st = statuses(doc)
    assert doc["verdict"] == "INCOMPLETE" and proc.returncode == EXIT_INCOMPLETE, proc.stdout[-3000:]
    assert [rid for rid, s in st.items() if s == "failed"] == [], proc.stdout[-3000:]
    assert doc["lowest_broken_layer"] is None
    details = doc["root_cause_details"]
    assert details and all(d["kind"] == "unreachable" and d["target"] == "ssh:gpu-01" for d in details)
    assert details[0]["cause"] == "dropped"
    assert "NVML" not in details[0]["fix"] and "netplan" not in details[0]["fix"]
    assert_engineer_terminal(proc.stdout, "INCOMPLETE")


def test_api_errors_on_pods_name_no_layer_and_no_driver_remediation(tmp_path):
    body = "cluster:\n  faults:\n    errors: {'^/api/v1/pods': {status: 503, rate: 1.0}}\n"
    proc, doc = run_suite(tmp_path, "--testbed", str(scenario(tmp_path, body)))
    st = statuses(doc)
    assert doc["verdict"] == "INCOMPLETE", proc.stdout[-3000:]
    assert [rid for rid, s in st.items() if s == "failed"] == [], proc.stdout[-3000:]
    assert doc["lowest_broken_layer"] is None
    assert {d["cause"] for d in doc["root_cause_details"]} == {"server-error"}
    assert all("driver" not in d["fix"] for d in doc["root_cause_details"])
    # the cause is the site's API (owned by kubeconfig-context, layer rke2), whichever check met it first
    assert {d["layer"] for d in doc["root_cause_details"]} == {"rke2"}, doc["root_cause_details"]
    summary = (tmp_path / "reports" / "latest" / "summary.html").read_text()
    cards = re.findall(r'<div class="cause" id="cause-[^"]+"[^>]*>\s*<div class="lbl">(.*?)</div>', summary, re.S)
    assert cards and all(" · rke2 · " in card and " · host · " not in card for card in cards), cards
    assert st["ADR-0002.host-driver"] == "passed"  # over SSH, the host is still judged


def test_a_host_with_no_nvidia_driver_and_no_rke2_names_those_two_and_nothing_else(tmp_path):
    body = ("nodes:\n  gpu-01:\n    host:\n      driver: {loaded: false}\n      services: {rke2-server: null}\n"
            "cluster:\n  unreachable: true\n")
    proc, doc = run_suite(tmp_path, "--testbed", str(scenario(tmp_path, body)))
    assert doc["root_causes"] == ["ADR-0002.host-driver", "ADR-0001.rke2-service"], proc.stdout[-4000:]
    assert doc["verdict"] == "REJECTED" and proc.returncode == 1
    assert doc["lowest_broken_layer"] == "host"
    st = statuses(doc)
    assert st["ADR-0001.kubeconfig-context"] == "blocked"  # the refused API is rke2-server's symptom
    assert st["ADR-0001.rke2-config"] in ("blocked", "passed")  # config.yaml: judged, never a third root cause
    assert_engineer_terminal(proc.stdout, "REJECTED")
