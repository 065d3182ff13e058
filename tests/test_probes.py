"""Host probes: which commands each host gets, the follow-ups named by first answers, the values parsed from them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from testinfra.backend.base import CommandResult

from pytest_dgxspark import probes
from pytest_dgxspark.probes import Settings, containerd, network, nvidia_driver, nvml, rke2, system
from pytest_dgxspark.site.model import HostSpec


def answer(stdout: str = "", rc: int = 0, stderr: str = "") -> CommandResult:
    return CommandResult(None, rc, b"", stdout, stderr)


def texts(commands: Any) -> list[str]:
    return [c.text for c in commands]


def test_a_gpu_server_gets_every_probes_commands_each_once() -> None:
    found = probes.commands_for(HostSpec("gpu-01", "10.0.0.21", role="server", gpu=True), Settings(smi_timeout_s=7))
    assert len(texts(found)) == len(set(texts(found)))
    for text in (system.IDENTITY, nvidia_driver.SMI_QUERY, nvml.NVML_COMMAND, rke2.CONFIG, rke2.APISERVER_CMDLINE,
                 rke2.unit_show("rke2-agent"), containerd.CRICTL, containerd.CDI_SPECS, network.IP_ADDR):
        assert text in texts(found)
    limits = {c.text: c.timeout_s for c in found}
    assert (limits[nvidia_driver.SMI_QUERY], limits[nvml.NVML_COMMAND], limits[system.IDENTITY]) == (7, 30, 15)


def test_a_host_that_is_no_gpu_host_gets_no_nvidia_command_and_an_agent_no_apiserver_read() -> None:
    found = texts(probes.commands_for(HostSpec("cpu-01", "10.0.0.31", role="agent", gpu=False), Settings()))
    assert not [t for t in found if "nvidia" in t or "nvml" in t.lower()]
    assert rke2.APISERVER_CMDLINE not in found and containerd.KUBELET_CMDLINE in found


def test_the_kubelets_config_file_and_drop_ins_are_follow_ups() -> None:
    spec = HostSpec("gpu-01", "10.0.0.21")
    cmdline = "/var/lib/rancher/rke2/bin/kubelet\x00--config=/var/lib/kubelet/config.yaml\x00--v=2"
    first = {containerd.KUBELET_CMDLINE: answer(cmdline),
             containerd.kubelet_dropins(containerd.KUBELET_CONFIG_DIR): answer(f"{containerd.KUBELET_CONFIG_DIR}/10-rke2.conf\n")}
    assert texts(containerd.followups(spec, Settings(), first)) == [
        "cat /var/lib/kubelet/config.yaml", f"cat {containerd.KUBELET_CONFIG_DIR}/10-rke2.conf"]


def test_a_kubelet_config_dir_flag_lists_that_folder_instead() -> None:
    first = {containerd.KUBELET_CMDLINE: answer("kubelet\x00--config-dir=/etc/kubelet.d")}
    assert texts(containerd.followups(HostSpec("gpu-01", "10.0.0.21"), Settings(), first)) == [
        "ls -1 /etc/kubelet.d/*.conf 2>/dev/null | LC_ALL=C sort; true"]


def test_networkmanager_is_asked_about_the_interface_that_carries_the_inventory_address() -> None:
    ip = [{"ifname": "lo", "addr_info": [{"local": "127.0.0.1", "prefixlen": 8}]},
          {"ifname": "enP7s7", "addr_info": [{"local": "10.0.0.21", "prefixlen": 24}]}]
    found = network.followups(HostSpec("gpu-01", "10.0.0.21"), Settings(), {network.IP_ADDR: answer(json.dumps(ip))})
    assert texts(found) == ["command -v nmcli >/dev/null && nmcli -t -g GENERAL.CONNECTION device show enP7s7"]
    assert network.followups(HostSpec("gpu-01", "10.0.0.21"), Settings(), {network.IP_ADDR: answer("not json")}) == ()


def test_follow_ups_already_answered_are_not_asked_again() -> None:
    spec = HostSpec("gpu-01", "10.0.0.21")
    first = {containerd.KUBELET_CMDLINE: answer("kubelet\x00--config=/k.yaml"), "cat /k.yaml": answer("x"),
             containerd.kubelet_dropins(containerd.KUBELET_CONFIG_DIR): answer("")}
    assert "cat /k.yaml" not in texts(probes.followups_for(spec, Settings(), first))


def test_the_effective_rke2_config_merges_drop_ins_and_says_why_it_cannot() -> None:
    base = answer("cni: canal\nnode-label: [a=1]\n")
    dropins = answer("### /etc/rancher/rke2/config.yaml.d/50-cni.yaml\ncni: cilium\nnode-label+: [b=2]\n")
    assert rke2.effective_config(base, dropins, "gpu-01").merged == {"cni": "cilium", "node-label": ["a=1", "b=2"]}
    missing = rke2.effective_config(answer(rc=1, stderr="cat: /etc/rancher/rke2/config.yaml: No such file"), answer(), "gpu-01")
    assert missing.error == "gpu-01: cannot read /etc/rancher/rke2/config.yaml: cat: /etc/rancher/rke2/config.yaml: No such file"
    assert rke2.effective_config(answer("- a\n"), answer(), "gpu-01").error == "gpu-01: RKE2 config files must be YAML mappings"


class _Cached:
    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers, self.where = answers, "gpu-01 (10.0.0.21:22)"

    def cached(self, cmd: str, timeout: int | None = None) -> CommandResult:
        return self.answers.get(cmd, answer(rc=2, stderr="No such file"))


def test_the_kubelet_probe_reads_the_endpoint_from_its_config_file() -> None:
    target = _Cached({
        containerd.KUBELET_CMDLINE: answer("kubelet\x00--config=/k.yaml"),
        "cat /k.yaml": answer("containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n"),
        containerd.kubelet_dropins(containerd.KUBELET_CONFIG_DIR): answer(""),
    })
    info = containerd.read_kubelet(target)
    assert (info.running, info.config_files, info.endpoint) == (True, ("/k.yaml",), "unix:///run/k3s/containerd/containerd.sock")


def test_no_kubelet_process_is_not_running_with_the_default_endpoint() -> None:
    info = containerd.read_kubelet(_Cached({containerd.KUBELET_CMDLINE: answer(rc=1)}))
    assert (info.running, info.endpoint, info.effective_endpoint) == (False, None, "unix:///run/containerd/containerd.sock")


def test_a_selection_gathers_only_the_probes_it_reads_and_always_the_system_probe() -> None:
    spec = HostSpec("gpu-01", "10.0.0.21", role="server", gpu=True)
    found = texts(probes.commands_for(spec, Settings(), {"nvml"}))
    assert found == texts(system.commands(spec, Settings())) + texts(nvml.commands(spec, Settings()))
    assert probes.chosen_names({"nvml"}) == ("system", "nvml") and probes.chosen_names(None) == probes.names()
    first = {network.IP_ADDR: answer(json.dumps([{"ifname": "e", "addr_info": [{"local": "10.0.0.21"}]}]))}
    assert probes.followups_for(spec, Settings(), first, {"nvml"}) == ()  # network's nmcli follow-up is not wanted


def test_an_unknown_probe_name_is_refused_naming_the_probes() -> None:
    import pytest

    with pytest.raises(KeyError, match="unknown probe\\(s\\) gpu; the probes are system, nvidia_driver, nvml, rke2, "
                                       "containerd, network"):
        probes.commands_for(HostSpec("gpu-01", "10.0.0.21"), Settings(), {"gpu"})


def test_the_probes_a_selection_reads_are_its_tests_probe_fixtures() -> None:
    closures = [("host_target", "nvml_probe", "evidence"), ("kubelet", "containerd_probe"), ("cluster", "site")]
    assert probes.read_by(closures) == {"nvml", "containerd"}
    assert probes.read_by([("cluster",)]) == frozenset()


COLLECT = """
import json, sys, pytest
from pytest_dgxspark.fixtures import probes_read
class Recorder:
    def pytest_collection_finish(self, session):
        print("PROBES", json.dumps(sorted(probes_read(session))))
for args in json.loads(sys.argv[1]):
    pytest.main(["suites", "--site", "sites/tirosh-home", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                plugins=[Recorder()])
"""


@pytest.mark.slow
def test_the_gpu_chain_reads_the_driver_nvml_and_runtime_probes_and_the_whole_suite_reads_every_probe() -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    selections = [["-m", "gpu"], [], ["-k", "static_ip"]]
    out = subprocess.run([sys.executable, "-c", COLLECT, json.dumps(selections)], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    read = [json.loads(ln.split(" ", 1)[1]) for ln in out.stdout.splitlines() if ln.startswith("PROBES ")]
    assert read == [["containerd", "nvidia_driver", "nvml"], ["containerd", "hardening", "network", "nvidia_driver", "nvml", "rke2",
                                                                    "upkeep"],
                    ["network"]], out.stdout[-2000:] + out.stderr[-2000:]
