"""SIMULATED comes from the target: a run that reaches a testbed is stamped SIMULATED whatever options pointed at it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgxspark.report.closing import EXIT_INCOMPLETE
from tests.conftest import REPO

# slow: a testbed with its hosts (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow


def _pytest(report_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--report-dir", str(report_dir), "-q", "-p", "no:cacheprovider",
         "--dgxspark-cuda-timeout", "20", *args],
        cwd=REPO, capture_output=True, text=True, timeout=400, check=False,
    )


@pytest.fixture(scope="module")
def handover_against_a_testbed(tmp_path_factory):
    """A handover run whose kubeconfig, inventory and ssh_config point at a running testbed (no --testbed)."""
    from pytest_dgxspark.testbed import Testbed

    tmp = tmp_path_factory.mktemp("handover")
    with Testbed("healthy", tmp / "tb") as testbed:
        proc = _pytest(tmp / "reports", "--site", str(REPO / "sites" / "tirosh-home"), "--dgxspark-handover",
                       "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
                       "--dgxspark-ssh-config", str(testbed.ssh_config))
    run = (tmp / "reports" / "latest").resolve()
    return proc, json.loads((run / "results.json").read_text()), run


def test_a_handover_run_against_a_testbed_by_its_files_is_simulated_and_incomplete(handover_against_a_testbed):
    proc, doc, _ = handover_against_a_testbed
    assert doc["run"]["simulated"] is True and doc["run"]["testbed"] is None
    signs = doc["run"]["simulated_by"]
    assert "Kubernetes API of context 'tirosh-home/rke2/gpu': answers with X-Dgxspark-Testbed: healthy" in signs
    assert "host gpu-01: /etc/dgxspark-testbed names testbed scenario 'healthy'" in signs
    assert "Node gpu-01: annotation testbed.dgxspark.io/scenario: healthy" in signs
    # signs the API user cannot remove (issue 20 point 4): the kubeconfig's CA, the served certificate, sshd's banner
    assert any(s.endswith("its CA is a testbed's (OU=dgxspark-testbed)") for s in signs), signs
    assert "Kubernetes API of context 'tirosh-home/rke2/gpu': serves a testbed's certificate (OU=dgxspark-testbed)" in signs
    assert any(s.startswith("host gpu-01: its SSH server's banner names the testbed (SSH-2.0-") for s in signs), signs
    assert doc["verdict"] == "INCOMPLETE"
    assert "a simulated (testbed) run is never a handover acceptance" in doc["verdict_reasons"]
    assert f"the targets are a testbed: {signs[0]}" in doc["verdict_reasons"]
    verdict_line = next(line for line in proc.stdout.splitlines() if line.startswith("dgxspark: INCOMPLETE"))
    assert verdict_line.endswith("(SIMULATED)")


def test_report_html_and_junit_xml_carry_the_simulated_stamp_too(handover_against_a_testbed):
    _, _, run = handover_against_a_testbed
    page = (run / "report.html").read_text()
    assert "dgxspark verdict: INCOMPLETE (SIMULATED: the targets are a testbed: " in page
    assert "Kubernetes API of context &#x27;tirosh-home/rke2/gpu&#x27;: answers with X-Dgxspark-Testbed: healthy" in page
    junit = (run / "junit.xml").read_text()
    assert '<property name="dgxspark.simulated" value="true" />' in junit
    assert "Node gpu-01: annotation testbed.dgxspark.io/scenario: healthy" in junit


def test_a_handover_run_against_a_testbed_exits_non_zero(handover_against_a_testbed):
    proc, _, _ = handover_against_a_testbed
    assert proc.returncode == EXIT_INCOMPLETE


def test_testbed_with_handover_is_incomplete_with_its_own_exit_status(tmp_path):
    proc = _pytest(tmp_path / "reports", "--testbed", "healthy", "--dgxspark-handover", "-m", "host")
    doc = json.loads((tmp_path / "reports" / "latest" / "results.json").read_text())
    assert doc["verdict"] == "INCOMPLETE" and doc["run"]["simulated_by"][0] == "--testbed healthy"
    assert proc.returncode == EXIT_INCOMPLETE


def test_a_testbed_with_its_marker_file_and_node_annotation_removed_is_still_simulated(tmp_path):
    """Issue 20: deleting /etc/dgxspark-testbed over SSH and the Node annotation through the API left the header
    only; the CA, the served certificate and sshd's banner still say it, and no handover is ACCEPTED."""
    from kubernetes import client
    from kubernetes import config as kube_config

    from pytest_dgxspark.testbed import Testbed

    with Testbed("healthy", tmp_path / "tb") as testbed:
        subprocess.run(["ssh", "-F", str(testbed.ssh_config), "gpu-01", "rm -f /etc/dgxspark-testbed"], check=True,
                       timeout=60)
        api = kube_config.new_client_from_config(str(testbed.kubeconfig), context="tirosh-home/rke2/gpu")
        client.CoreV1Api(api).patch_node("gpu-01", {"metadata": {"annotations": {
            "testbed.dgxspark.io/scenario": None}}})
        proc = _pytest(tmp_path / "reports", "--site", str(REPO / "sites" / "tirosh-home"), "--dgxspark-handover",
                       "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
                       "--dgxspark-ssh-config", str(testbed.ssh_config), "-k", "node_ready or host_driver")
    doc = json.loads(((tmp_path / "reports" / "latest").resolve() / "results.json").read_text())
    signs = doc["run"]["simulated_by"]
    assert not any("/etc/dgxspark-testbed" in s or "annotation" in s for s in signs), signs
    assert any("its CA is a testbed's" in s for s in signs), signs
    assert any("serves a testbed's certificate" in s for s in signs), signs
    assert any("its SSH server's banner names the testbed" in s for s in signs), signs
    assert doc["run"]["simulated"] is True and doc["verdict"] == "INCOMPLETE"
    assert proc.returncode == EXIT_INCOMPLETE
