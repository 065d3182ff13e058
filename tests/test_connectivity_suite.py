"""Connectivity causes through the whole suite (real sshd on loopback): an unknown host key is host-static-ip's
unreachable root cause with its own fix (compare the fingerprint), never netplan advice, and the run is INCOMPLETE."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.loopback import free_port, write_kubeconfig

# slow: the suite against unreachable testbeds (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")]
EXIT_INCOMPLETE = 8


def test_an_unknown_host_key_is_the_host_rules_own_cause_through_the_suite_never_netplan_advice(sshd, tmp_path):
    (tmp_path / "known_hosts").write_text("")
    config = tmp_path / "strict_ssh_config"
    config.write_text(f"Host *\n  StrictHostKeyChecking yes\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    inventory = tmp_path / "inv.yml"
    inventory.write_text("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                         f"          ansible_host: 127.0.0.1\n          ansible_port: {sshd['port']}\n"
                         f"          ansible_user: root\n          ansible_ssh_private_key_file: {sshd['key']}\n"
                         "          dgxspark_gpu: true\n          dgxspark_gpu_product: NVIDIA GB10\n")
    kubeconfig = write_kubeconfig(tmp_path / "kc.json", f"https://127.0.0.1:{free_port()}", "t",
                                  context="tirosh-home/rke2/gpu")
    doc = json.loads(kubeconfig.read_text())  # the plan checks the management context too (argocd_context)
    doc["contexts"].append({"name": "tirosh-home/k3s/argocd", "context": {"cluster": "c", "user": "u"}})
    kubeconfig.write_text(json.dumps(doc))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/host", "--site", str(REPO / "sites" / "tirosh-home"),
         "--dgxspark-inventory", str(inventory), "--dgxspark-ssh-config", str(config),
         "--dgxspark-kubeconfig", str(kubeconfig), "--report-dir", str(tmp_path / "r"), "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads((tmp_path / "r" / "latest" / "results.json").read_text())
    assert doc["verdict"] == "INCOMPLETE" and proc.returncode == EXIT_INCOMPLETE, proc.stdout[-3000:]
    assert doc["lowest_broken_layer"] is None
    [static] = [d for d in doc["root_cause_details"] if d["rule"] == "ADR-0002.host-static-ip"]
    assert (static["kind"], static["target"], static["cause"]) == ("unreachable", "ssh:gpu-01", "host-key-unknown")
    assert "the host's SSH key is not in known_hosts" in static["message"]
    assert static["fix"].startswith("Compare the host key fingerprint on the console")
    assert all("netplan" not in d["fix"] for d in doc["root_cause_details"])
    assert "Traceback" not in proc.stdout and "pytest_dgxspark/" not in proc.stdout
