"""The `dgxspark-testbed` CLI: up, list, down and a clean teardown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pytest_dgxspark.testbed import netns

CLI = [sys.executable, "-m", "pytest_dgxspark.testbed.cli"]


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _leftovers(directory: Path, state: dict) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(directory) in cmdline:
            found.append(f"process {pid}: {cmdline[:120]}")
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    live = {line.split()[0] for line in names.splitlines() if line.strip()}
    for link in state.get("links", []):
        if link["netns"] in live:
            found.append(f"netns {link['netns']}")
        if f" {link['host_ifname']}@" in links:
            found.append(f"veth {link['host_ifname']}")
    mounts = Path("/proc/self/mountinfo").read_text()
    if str(directory) in mounts:
        found.append("mount under the testbed directory")
    return found


@pytest.mark.slow
def test_list_names_every_bundled_scenario_with_its_description() -> None:
    proc = _run("list")
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    assert lines["healthy"].startswith("Healthy DGX Spark (GB10)")
    assert {"cuda-pending", "two-node", "api-flaky", "host-unreachable", "docker-cri"} <= set(lines)


@pytest.mark.slow
def test_up_with_an_unknown_scenario_fails_before_touching_anything(tmp_path: Path) -> None:
    proc = _run("up", "no-such-scenario", "--dir", str(tmp_path / "tb"))
    assert proc.returncode == 2
    assert "scenario 'no-such-scenario': not a bundled scenario" in proc.stderr
    assert not (tmp_path / "tb").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists(), reason="openssh-server is not installed")
def test_up_writes_inventory_ssh_config_kubeconfig_and_down_leaves_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "tb"
    proc = _run("up", "healthy", "--dir", str(directory))
    try:
        assert proc.returncode == 0, proc.stderr
        state = json.loads((directory / "state.json").read_text())
        inventory = yaml.safe_load((directory / "inventory.yml").read_text())
        host = inventory["all"]["children"]["rke2_servers"]["hosts"]["gpu-01"]
        assert host["ansible_user"] == "root" and host["ansible_port"] == 22
        assert host["ansible_ssh_private_key_file"] == str(directory / "id_ed25519")
        assert host["dgxspark_gpu"] is True and host["dgxspark_model"] == "dgx-spark"
        ssh_config = (directory / "ssh_config").read_text()
        assert f"Host gpu-01 {host['ansible_host']}" in ssh_config and "StrictHostKeyChecking yes" in ssh_config
        assert f"UserKnownHostsFile {directory / 'known_hosts'}" in ssh_config
        kubeconfig = yaml.safe_load((directory / "kubeconfig").read_text())
        assert kubeconfig["current-context"] == "tirosh-home/rke2/gpu"
        assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{host['ansible_host']}:6443"
        if shutil.which("ssh"):
            out = subprocess.run(["ssh", "-F", str(directory / "ssh_config"), "-o", "BatchMode=yes", "gpu-01", "hostname"],
                                 capture_output=True, text=True, timeout=20)
            assert (out.returncode, out.stdout.strip()) == (0, "gpu-01"), out.stderr
    finally:
        down = _run("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert _leftovers(directory, state) == []
    again = _run("down", "--dir", str(directory))
    assert again.returncode == 0, again.stderr


@pytest.mark.slow
def test_down_cleans_up_after_a_crashed_up(tmp_path: Path) -> None:
    directory = (tmp_path / "crashed").resolve()
    directory.mkdir()
    slot = netns.allocate_subnet(str(directory))
    name, ifname = netns.names_for(slot, 1)
    host_ip, node_ip, prefix = netns.node_addresses(slot, 1)
    link = {"name": "gpu-01", "netns": name, "host_ifname": ifname, "host_ip": host_ip, "node_ip": node_ip, "prefix": prefix}
    state = {"testbed_id": str(directory), "slot": slot, "links": [link], "pids": [], "hosts": []}
    (directory / "state.json").write_text(json.dumps(state))
    netns.create(name, ifname, host_ip, node_ip, prefix)
    try:
        proc = _run("down", "--dir", str(directory))
        assert proc.returncode == 0, proc.stderr
        assert _leftovers(directory, state) == []
        assert netns.allocate_subnet(str(directory)) is not None  # the slot was released and can be taken again
    finally:
        netns.destroy(name)
        netns.release_subnet(str(directory))
