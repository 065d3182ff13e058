"""Running on the node itself: `ansible_connection: local` runs a host's checks on this machine, as over SSH."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from pytest_dgxspark.checking import timed_out
from pytest_dgxspark.judge.evidence import Evidence
from pytest_dgxspark.site.model import HostSpec, SiteError, load_inventory
from pytest_dgxspark.targets.ssh import HostTarget
from tests.conftest import REPO

LOCAL_INVENTORY = ("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                   "          ansible_connection: local\n          ansible_host: {address}\n          dgxspark_gpu: true\n")


def _local_target() -> HostTarget:
    return HostTarget(HostSpec("gpu-01", "127.0.0.1", connection="local"), "/nonexistent", 0).connect()


def test_a_local_host_runs_its_commands_on_this_machine():
    target = _local_target()
    result = target.run("cat /proc/sys/kernel/hostname")
    assert (result.rc, result.stdout.strip()) == (0, socket.gethostname())
    assert target.where == "gpu-01 (local)"


def test_a_local_command_that_hangs_is_killed_after_its_timeout_like_over_ssh():
    result = _local_target().run("sleep 30", timeout=1)
    assert timed_out(result) and result.rc == 124


def test_local_evidence_is_recorded_and_redacted_like_over_ssh():
    store: list = []
    Evidence(store, "evidence of t").command(_local_target(), "printf 'node-name: n\\ntoken: K10abcdef0123456789::server:pw\\n'")
    value = store[0]["value"]
    assert (value["host"], value["exit_status"], value["stdout"], value["stderr"]) == (
        "gpu-01", 0, "node-name: n\ntoken: <redacted>\n", "")
    assert "K10abcdef" not in json.dumps(store)


def test_a_local_host_still_needs_its_address_for_the_checks(tmp_path):
    path = tmp_path / "inv.yml"
    path.write_text(LOCAL_INVENTORY.replace("          ansible_host: {address}\n", ""))
    with pytest.raises(SiteError) as caught:
        load_inventory(path)
    assert str(caught.value) == (
        f"{path}: host gpu-01: ansible_host is missing; expected the host's address (with ansible_connection: local "
        "it is not used to connect, but the checks compare it with the Node's InternalIP)")


@pytest.mark.slow
def test_the_host_layer_runs_against_this_machine_through_the_local_backend(tmp_path):
    inventory = tmp_path / "inv.yml"
    inventory.write_text(LOCAL_INVENTORY.format(address="127.0.0.1"))
    from tests.conftest import STANDIN_KUBECONFIG

    (tmp_path / "kubeconfig.yml").write_text(STANDIN_KUBECONFIG)  # a run needs one; the host layer never dials it
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites/host", "--site", str(REPO / "sites" / "tirosh-home"),
         "--dgxspark-inventory", str(inventory), "--dgxspark-kubeconfig", str(tmp_path / "kubeconfig.yml"), "--report-dir", str(tmp_path / "r"), "-q", "-p", "no:cacheprovider",
         "--dgxspark-smi-timeout", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    run = (tmp_path / "r" / "latest").resolve()
    doc = json.loads((run / "results.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for r in doc["rules"] for t in r["tests"]}
    static = tests["test_inventory_address_is_configured_statically[gpu-01]"]
    assert static["outcome"] == "passed", proc.stdout[-2000:]  # 127.0.0.1 is on this machine's lo
    evidence = json.loads((run / static["evidence"]).read_text())
    ip_addr = next(i for i in evidence["items"] if i["label"] == "gpu-01: ip -j addr show")["value"]
    assert ip_addr["exit_status"] == 0 and '"ifname":' in ip_addr["stdout"]
    # this machine has no NVIDIA driver: the host layer says so from its own commands, as it would over SSH
    driver = doc["rules"][[r["id"] for r in doc["rules"]].index("ADR-0002.host-driver")]
    assert driver["status"] == "failed"
    failed = [t for t in driver["tests"] if t["outcome"] == "failed"]
    assert failed and all(t["message"].startswith("gpu-01 (local): ") for t in failed)
    assert not [t for t in tests.values() if "ssh" in (t["message"] or "").lower()]
