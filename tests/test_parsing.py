"""Parsers of real outputs: captures kept in the repo (pytest_dgxspark/testbed/captures, source on line 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dgxspark import parsing as p
from pytest_dgxspark import siterepo
from pytest_dgxspark.testbed import captures
OPEN_AARCH64 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 16:27:23 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)\n"
)
PROPRIETARY_X86 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\nGCC version:  gcc version 12.3.0\n"


def _capture(name: str) -> str:
    """A capture's bytes without its source line; a missing capture fails (they are part of the repo)."""
    return captures.body(name)


def test_open_module_version_file_is_open_flavour() -> None:
    driver = p.parse_proc_driver_version(OPEN_AARCH64)
    assert driver == p.DriverVersion("580.95.05", "open", "aarch64", "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)")


@pytest.mark.parametrize("version", ["580.126.09", "580.142", "580.173.02"])
def test_open_module_versions_of_any_length_parse(version: str) -> None:
    assert p.parse_proc_driver_version(OPEN_AARCH64.replace("580.95.05", version)).version == version


def test_proprietary_module_version_file_is_proprietary() -> None:
    driver = p.parse_proc_driver_version(PROPRIETARY_X86)
    assert (driver.version, driver.flavour, driver.arch) == ("550.54.15", "proprietary", "x86_64")


@pytest.mark.parametrize(("name", "version"), [("proc-driver-nvidia-version-open-x86_64.txt", "565.57.01"),
                                               ("proc-driver-nvidia-version-open-x86_64-arch.txt", "525.60.11"),
                                               ("proc-driver-nvidia-version-open-aarch64-jetson.txt", "35.3.1")])
def test_captured_open_module_version_files_are_open_flavour(name: str, version: str) -> None:
    driver = p.parse_proc_driver_version(_capture(name))
    arch = "aarch64" if "aarch64" in name else "x86_64"
    assert (driver.version, driver.flavour, driver.arch) == (version, "open", arch)


def test_every_capture_names_its_public_source() -> None:
    names = sorted(path.name for path in captures.DIR.glob("*.txt"))
    assert len(names) >= 10
    for name in names:
        assert captures.source(name).startswith(("github.com/", "docs.", "forums.")), name
        assert captures.body(name).strip(), name


def test_garbage_is_not_a_driver_version() -> None:
    assert p.parse_proc_driver_version("cat: /proc/driver/nvidia/version: No such file or directory") is None


def test_module_loaded_matches_exact_name() -> None:
    modules = "nvidia_uvm 1994752 0 - Live 0x0\nnvidia_modeset 1597440 0 - Live 0x0\n"
    assert not p.module_loaded(modules, "nvidia")
    assert p.module_loaded(modules + "nvidia 104857600 2 nvidia_uvm, Live 0x0\n", "nvidia")


def test_gb10_csv_memory_not_available_is_none_and_units_dropped() -> None:
    rows = p.parse_nvidia_smi_csv("index, name, memory.total [MiB], memory.used [MiB]\n0, NVIDIA GB10, [N/A], [N/A]\n")
    assert rows == [{"index": "0", "name": "NVIDIA GB10", "memory.total": None, "memory.used": None}]


def test_noheader_csv_is_keyed_by_position() -> None:
    assert p.parse_nvidia_smi_csv("0, NVIDIA GB10, [N/A], [N/A]") == [{"0": "0", "1": "NVIDIA GB10", "2": None, "3": None}]


def test_smi_list_counts_gpus_not_mig_devices() -> None:
    text = _capture("h100-mig-nvidia-smi-L.txt")
    gpus = p.parse_nvidia_smi_list(text)
    assert len(gpus) == 1
    assert gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert gpus[0].uuid == "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    assert gpus[0].mig_devices == ("1g.10gb",) * 7


def test_captured_h100_q_dump_lists_eight_gpus_with_their_memory() -> None:
    text = _capture("h100-8gpu-nvidia-smi-q.txt")
    assert "Attached GPUs                             : 8" in text
    assert text.count("Product Name                          : NVIDIA H100 80GB HBM3") == 8
    assert text.count("        Total                             : 81559 MiB") == 8


def test_smi_list_gb10_line() -> None:
    gpus = p.parse_nvidia_smi_list("GPU 0: NVIDIA GB10 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)\n")
    assert [(g.index, g.name, g.mig_devices) for g in gpus] == [(0, "NVIDIA GB10", ())]


@pytest.mark.parametrize(
    ("raw", "runtime", "version", "k3s"),
    [
        ("containerd://1.7.17-k3s1", "containerd", (1, 7, 17), True),
        ("containerd://2.1.5-k3s1", "containerd", (2, 1, 5), True),
        ("containerd://2.0.5-k3s1.32", "containerd", (2, 0, 5), True),
        ("containerd://2.2.6-k3s1", "containerd", (2, 2, 6), True),
        ("containerd://1.7.27-1", "containerd", (1, 7, 27), False),
        ("docker://24.0.7", "docker", (24, 0, 7), False),
    ],
)
def test_container_runtime_versions(raw: str, runtime: str, version: tuple[int, ...], k3s: bool) -> None:
    parsed = p.parse_runtime_version(raw)
    assert (parsed.runtime, parsed.version, parsed.k3s) == (runtime, version, k3s)


def test_unparsable_runtime_version_is_none() -> None:
    assert p.parse_runtime_version("") is None


def _policy(state: str, reason: str, status: str = "True", kind: str = "Ready") -> dict:
    return {"status": {"state": state, "conditions": [{"type": kind, "status": status, "reason": reason, "message": "m"}]}}


def test_clusterpolicy_ready_needs_reconciled() -> None:
    assert p.clusterpolicy_readiness(_policy("ready", "Reconciled")).ready


@pytest.mark.parametrize("reason", ["NoGPUNodes", "NFDLabelsMissing"])
def test_clusterpolicy_ready_without_gpu_nodes_is_not_ready(reason: str) -> None:
    result = p.clusterpolicy_readiness(_policy("ready", reason))
    assert not result.ready and result.reason == reason


def test_clusterpolicy_not_ready_reports_error_condition() -> None:
    result = p.clusterpolicy_readiness(_policy("notReady", "OperandNotReady", kind="Error"))
    assert not result.ready and result.reason == "OperandNotReady"


def test_clusterpolicy_without_status_is_not_ready() -> None:
    assert not p.clusterpolicy_readiness({}).ready


def test_h100_label_set_parses() -> None:
    text = _capture("h100-mig-node-labels.txt")
    labels = json.loads(text)
    assert labels["nvidia.com/gpu.present"] == "true"
    assert p.parse_labels([f"{k}={v}" for k, v in labels.items()]) == labels


def test_taints_parse_with_and_without_value() -> None:
    assert p.parse_taint("nvidia.com/gpu=present:NoSchedule") == p.Taint("nvidia.com/gpu", "present", "NoSchedule")
    assert p.parse_taint("dedicated:NoExecute") == p.Taint("dedicated", "", "NoExecute")


def test_kubelet_endpoint_from_config_dir_file() -> None:
    conf = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n"
    assert p.kubelet_runtime_endpoint([conf], "kubelet --config-dir=/x") == "unix:///run/k3s/containerd/containerd.sock"


def test_kubelet_endpoint_flag_wins_over_config() -> None:
    conf = "containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock\n"
    cmd = p.split_cmdline("kubelet\x00--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock\x00")
    assert p.kubelet_runtime_endpoint([conf], cmd) == "unix:///var/run/cri-dockerd.sock"


def test_rke2_config_merge_last_wins_lists_replace_plus_appends() -> None:
    merged = p.merge_rke2_config([
        {"cni": "canal", "node-label": ["a=1"], "node-taint": ["x=y:NoSchedule"]},
        {"cni": "cilium", "node-label": ["b=2"]},
        {"node-taint+": ["z:NoExecute"]},
    ])
    assert merged == {"cni": "cilium", "node-label": ["b=2"], "node-taint": ["x=y:NoSchedule", "z:NoExecute"]}


def test_config_values_as_lists_and_bools() -> None:
    assert p.as_list("multus,cilium") == ["multus", "cilium"]
    assert p.as_list(None) == []
    assert p.as_bool("true") and not p.as_bool("false") and p.as_bool(None, default=True)


def test_ip_addr_json_dynamic_flag() -> None:
    text = json.dumps([{"ifname": "enP7s7", "addr_info": [
        {"family": "inet", "local": "192.168.10.21", "prefixlen": 24, "dynamic": True},
        {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]}])
    addresses = p.parse_ip_addr_json(text)
    assert addresses[0] == p.HostAddress("enP7s7", "192.168.10.21", 24, True)
    assert not addresses[1].dynamic


def test_netplan_dhcp_detection() -> None:
    defs = p.netplan_dhcp_interfaces([{"network": {"ethernets": {"enP7s7": {"dhcp4": True}}}},
                                      {"network": {"ethernets": {"eth1": {"dhcp4": False, "addresses": ["10.0.0.2/24"]}}}}])
    assert p.netplan_uses_dhcp(defs["enP7s7"]) and not p.netplan_uses_dhcp(defs["eth1"])


def test_exact_chart_versions() -> None:
    assert p.exact_chart_version("v26.3.2") and p.exact_chart_version("25.10.1")
    for loose in ("latest", ">=26.3.0", "v26.3.x", "~26.3", "", None, "26.3"):
        assert not p.exact_chart_version(loose)


def test_image_tags_and_registries() -> None:
    assert p.image_tag("nvcr.io/nvidia/k8s-device-plugin:v0.19.2") == "v0.19.2"
    assert p.image_tag("localhost:5000/cilium/cilium@sha256:abc") == "sha256:abc"
    assert p.image_registry("nvcr.io/nvidia/gpu-operator:v26.3.2") == "nvcr.io"
    assert p.image_registry("busybox:1.36") == "docker.io"


def test_make_rules_and_recipe_closure() -> None:
    text = (".PHONY: a\nrke2/server/install: rke2/check\n\t$(ANSIBLE) playbooks/rke2-server-install.yml\n"
            "rke2/check:\n\t@test -f x \\\n\t  || exit 2\n")
    rules = siterepo.parse_make_rules(text)
    assert rules["rke2/server/install"][0] == ["rke2/check"]
    assert siterepo.make_recipe_closure(rules, "rke2/server/install") == ["$(ANSIBLE) playbooks/rke2-server-install.yml", "@test -f x  || exit 2"]


def test_ansible_references_find_roles_and_includes() -> None:
    text = "- hosts: all\n  roles:\n    - rke2_common\n  tasks:\n    - ansible.builtin.include_tasks: extra.yml # gpu-operator\n"
    files, roles = siterepo.ansible_references(text)
    assert files == ["extra.yml"] and "rke2_common" in roles
    assert not siterepo.GPU_OPERATOR_REFERENCE.search(siterepo.strip_yaml_comments(text))
    assert siterepo.GPU_OPERATOR_REFERENCE.search("kind: HelmChart") and not siterepo.GPU_OPERATOR_REFERENCE.search("kind: HelmChartConfig")


def test_nvml_probe_result_takes_last_json_line() -> None:
    assert p.nvml_probe_result('warning\n{"init": 0, "count": 1}\n') == {"init": 0, "count": 1}
    with pytest.raises(ValueError):
        p.nvml_probe_result("Traceback ...")


def test_pod_ready_and_summary() -> None:
    pod = {"metadata": {"name": "x", "namespace": "gpu-operator"}, "spec": {"nodeName": "gpu-01", "containers": [{"image": "i"}]},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "initContainerStatuses": [{"name": "toolkit-validation", "state": {"waiting": {"reason": "PodInitializing"}}}]}}
    assert p.pod_ready(pod)
    assert p.pod_summary(pod)["waiting"] == ["toolkit-validation: PodInitializing"]


def test_clusterpolicy_operand_not_ready_is_not_an_operator_fault_and_names_its_states() -> None:
    message = "ClusterPolicy is not ready, states not ready: [state-operator-validation state-device-plugin]"
    policy = {"status": {"state": "notReady", "conditions": [
        {"type": "Ready", "status": "False", "reason": "Error", "message": ""},
        {"type": "Error", "status": "True", "reason": "OperandNotReady", "message": message}]}}
    result = p.clusterpolicy_readiness(policy)
    assert (result.ready, result.reason, result.operator_fault) == (False, "OperandNotReady", False)
    assert result.states_not_ready == ("state-operator-validation", "state-device-plugin")


@pytest.mark.parametrize("reason", ["NoGPUNodes", "NFDLabelsMissing", "ReconcileFailed"])
def test_clusterpolicy_operator_faults(reason: str) -> None:
    assert p.clusterpolicy_readiness(_policy("ready", reason)).operator_fault


def test_reconciled_clusterpolicy_is_no_operator_fault() -> None:
    result = p.clusterpolicy_readiness(_policy("ready", "Reconciled"))
    assert result.ready and not result.operator_fault and result.states_not_ready == ()


RKE2_CONTAINERD_V3 = """# File generated by rke2. DO NOT EDIT. Use config-v3.toml.tmpl instead.
version = 3
[plugins."io.containerd.cri.v1.runtime"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc"]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia"]
  runtime_type = "io.containerd.runc.v2"
"""


def test_containerd_v3_config_cdi_and_runtimes() -> None:
    cri = p.parse_containerd_config(RKE2_CONTAINERD_V3)
    assert cri == p.ContainerdCri(3, True, ("/etc/cdi", "/var/run/cdi"), ("nvidia", "runc"))
    assert cri.cdi_enabled


def test_containerd_cdi_defaults_follow_the_config_version() -> None:
    assert p.parse_containerd_config("version = 3\n").cdi_enabled  # containerd 2.x: CDI on by default
    assert not p.parse_containerd_config('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n').cdi_enabled
    disabled = p.parse_containerd_config('version = 3\n[plugins."io.containerd.cri.v1.runtime"]\nenable_cdi = false\n')
    assert not disabled.cdi_enabled


def test_containerd_config_that_is_not_toml_is_none() -> None:
    assert p.parse_containerd_config("version = = 3") is None


def test_the_proprietary_module_on_aarch64_is_recognised():
    text = ("NVRM version: NVIDIA UNIX Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U22)  "
            "Thu Sep 25 17:55:53 UTC 2025\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n")
    driver = p.parse_proc_driver_version(text)
    assert (driver.version, driver.flavour, driver.arch) == ("580.95.05", "proprietary", "aarch64")
    x86 = p.parse_proc_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024")
    assert (x86.version, x86.flavour, x86.arch) == ("550.54.15", "proprietary", "x86_64")


def test_api_endpoints_match_by_address_and_port():
    assert p.same_endpoint("https://127.0.0.1:6443/", "https://localhost:6443")
    assert p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.5:6443")
    assert not p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.6:6443")
    assert not p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.5:9345")
    assert p.addresses_of("10.0.0.5") == {"10.0.0.5"}


@pytest.mark.parametrize(("name", "cuda"), [("gb10-nvidia-smi.txt", "13.0"), ("h100-8gpu-nvidia-smi.txt", "12.7"),
                                            ("b200-nvidia-smi.txt", "13.3")])
def test_provenance_reads_the_cuda_version_of_every_captured_header(name: str, cuda: str) -> None:
    from pytest_dgxspark import provenance

    assert provenance._CUDA.search(_capture(name)).group(1) == cuda  # R610 says "CUDA UMD Version"
