"""Readers of Kubernetes objects and site values, and the captures kept in the repo (pytest_dgxspark/testbed/captures,
source on line 1); each host probe's parsers are tested on them in tests/test_probe_<probe>.py."""

from __future__ import annotations

import json

import pytest

from pytest_dgxspark.data import values
from pytest_dgxspark.kube import objects as p
from pytest_dgxspark.site import repo as siterepo
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


def test_every_capture_names_its_public_source() -> None:
    names = sorted(path.name for path in captures.DIR.glob("*.txt"))
    assert len(names) >= 10
    for name in names:
        assert captures.source(name).startswith(("github.com/", "docs.", "forums.")), name
        assert captures.body(name).strip(), name


def test_captured_h100_q_dump_lists_eight_gpus_with_their_memory() -> None:
    text = _capture("h100-8gpu-nvidia-smi-q.txt")
    assert "Attached GPUs                             : 8" in text
    assert text.count("Product Name                          : NVIDIA H100 80GB HBM3") == 8
    assert text.count("        Total                             : 81559 MiB") == 8


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


def test_config_values_as_lists_and_bools() -> None:
    assert values.as_list("multus,cilium") == ["multus", "cilium"]
    assert values.as_list(None) == []
    assert values.as_bool("true") and not values.as_bool("false") and values.as_bool(None, default=True)


def test_exact_chart_versions() -> None:
    assert p.exact_chart_version("v26.3.2") and p.exact_chart_version("25.10.1")
    for loose in ("latest", ">=26.3.0", "v26.3.x", "~26.3", "", None, "26.3"):
        assert not p.exact_chart_version(loose)


def test_image_tags_and_registries() -> None:
    assert values.image_tag("nvcr.io/nvidia/k8s-device-plugin:v0.19.2") == "v0.19.2"
    assert values.image_tag("localhost:5000/cilium/cilium@sha256:abc") == "sha256:abc"
    assert values.image_registry("nvcr.io/nvidia/gpu-operator:v26.3.2") == "nvcr.io"
    assert values.image_registry("busybox:1.36") == "docker.io"


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


def test_api_endpoints_match_by_address_and_port():
    assert p.same_endpoint("https://127.0.0.1:6443/", "https://localhost:6443")
    assert p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.5:6443")
    assert not p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.6:6443")
    assert not p.same_endpoint("https://10.0.0.5:6443", "https://10.0.0.5:9345")
    assert p.addresses_of("10.0.0.5") == {"10.0.0.5"}


@pytest.mark.parametrize(("name", "cuda"), [("gb10-nvidia-smi.txt", "13.0"), ("h100-8gpu-nvidia-smi.txt", "12.7"),
                                            ("b200-nvidia-smi.txt", "13.3")])
def test_provenance_reads_the_cuda_version_of_every_captured_header(name: str, cuda: str) -> None:
    from pytest_dgxspark.probes import provenance

    assert provenance._CUDA.search(_capture(name)).group(1) == cuda  # R610 says "CUDA UMD Version"
