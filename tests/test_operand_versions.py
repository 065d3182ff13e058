"""The GPU Operator release table and the check that the operands run the pinned chart's versions (issue 22, after an
upgrade): the table as data, and the comparison on plain objects, without a testbed."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_dgxspark.catalog.releases import (
    ReleaseTableError,
    chart_images,
    load_releases,
    running_operands,
    tag_matches,
)
from pytest_dgxspark.checking import NotApplicable
from pytest_dgxspark.kube.operands import against_the_chart, with_set

REPO = Path(__file__).resolve().parent.parent
REFERENCE_VALUES = Path("/work/shared/reference/gpu-operator-v26.3.2-values.yaml")


def test_every_found_release_names_an_image_for_every_operand_and_its_sources():
    table = load_releases()
    assert {"v26.3.0", "v26.3.1", "v26.3.2", "v26.3.3", "v26.7.0"} <= set(table.known())
    for release in table.releases.values():
        assert release.sources, release.chart
        if release.found:
            assert set(release.images) == set(table.operands), release.chart


def test_the_table_gives_v26_3_2_and_v26_7_0_as_nvidia_published_them():
    table = load_releases()
    old, new = table.release("v26.3.2"), table.release("26.7.0")
    assert old is not None and new is not None
    assert dict(old.images) == {
        "operator": "nvcr.io/nvidia/gpu-operator:v26.3.2", "driver": "nvcr.io/nvidia/driver:580.126.20",
        "toolkit": "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1", "device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.19.2",
        "gfd": "nvcr.io/nvidia/k8s-device-plugin:v0.19.2", "dcgm-exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
        "validator": "nvcr.io/nvidia/gpu-operator:v26.3.2", "mig-manager": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.14.2",
        "nfd": "registry.k8s.io/nfd/node-feature-discovery:v0.18.3"}
    assert new.images["toolkit"].endswith(":v1.20.0") and new.images["device-plugin"].endswith(":v0.20.0")
    assert new.images["dcgm-exporter"].endswith(":4.6.0-4.8.3-distroless") and new.images["driver"].endswith(":595.91.07")


@pytest.mark.skipif(not REFERENCE_VALUES.is_file(), reason="the shared reference material is not on this machine")
def test_v26_3_2_is_what_the_reference_values_yaml_says():
    values = yaml.safe_load(REFERENCE_VALUES.read_text())
    images = load_releases().release("v26.3.2").images  # type: ignore[union-attr]
    for operand, key in (("driver", "driver"), ("toolkit", "toolkit"), ("device-plugin", "devicePlugin"), ("gfd", "gfd"),
                         ("dcgm-exporter", "dcgmExporter"), ("mig-manager", "migManager")):
        section = values[key]
        assert images[operand] == f"{section['repository']}/{section['image']}:{section['version']}"


def test_a_version_nvidia_does_not_give_is_recorded_as_not_found_with_what_was_checked():
    release = load_releases().release("v26.7.1")
    assert release is not None and release.found is False and release.images == {}
    assert any(s.startswith("checked: ") for s in release.sources)
    assert load_releases().release("v99.1.0") is None


def test_a_malformed_table_is_refused_naming_the_file_and_entry(tmp_path):
    path = tmp_path / "releases.yaml"
    path.write_text(yaml.safe_dump({
        "operands": {"toolkit": {"kind": "DaemonSet", "workload": "t", "values": "toolkit", "image": "container-toolkit"}},
        "releases": [{"chart": "v1.0.0", "found": True, "sources": ["x"], "images": {"toolkit": "r/k8s-device-plugin:v1"}},
                     {"chart": "v1.0.1", "found": True, "sources": [], "images": {}}]}))
    with pytest.raises(ReleaseTableError) as error:
        load_releases(path)
    said = str(error.value)
    assert f"{path}: releases[0] (v1.0.0): images.toolkit 'r/k8s-device-plugin:v1' is not a container-toolkit image" in said
    assert f"{path}: releases[1] (v1.0.1): no sources named" in said
    assert "images must name every operand ['toolkit'], got []" in said


def test_chart_values_replace_an_operands_repository_image_or_version():
    release = load_releases().release("v26.3.2")
    assert release is not None
    images = chart_images(release, {"devicePlugin": {"version": "v0.17.1"}, "toolkit": {"repository": "mirror.local/nvidia"},
                                    "node-feature-discovery": {"image": {"repository": "mirror.local/nfd", "tag": "v0.18.2"}}})
    assert images["device-plugin"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
    assert images["gfd"] == "nvcr.io/nvidia/k8s-device-plugin:v0.19.2"  # gfd has its own gfd.version
    assert images["toolkit"] == "mirror.local/nvidia/container-toolkit:v1.19.1"
    assert images["nfd"] == "mirror.local/nfd:v0.18.2"


def test_a_driver_tag_may_carry_the_nodes_os_and_no_other_tag_may():
    assert tag_matches("driver", "580.126.20-ubuntu24.04", "580.126.20")
    assert not tag_matches("driver", "580.126.200", "580.126.20")
    assert not tag_matches("toolkit", "v1.19.1-ubi9", "v1.19.1")
    assert tag_matches("toolkit", "1.19.1", "v1.19.1")


def ds(name: str, *containers: tuple[str, str], namespace: str = "gpu-operator") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"spec": {"containers": [{"name": n, "image": i} for n, i in containers]}}}}


def workloads(release: str, **swap: str) -> dict[str, list[dict[str, Any]]]:
    """Every operand's workload running `release`'s images, with `swap` (operand -> image) in place of some."""
    table = load_releases()
    images = {**table.release(release).images, **swap}  # type: ignore[union-attr]
    out: dict[str, list[dict[str, Any]]] = {"DaemonSet": [], "Deployment": []}
    for name, operand in table.operands.items():
        out[operand.kind].append(ds(operand.workload, ("sidecar", "busybox:1"), (name, images[name])))
    return out


def test_the_operands_container_is_found_by_its_image_name_not_its_position():
    found = running_operands(workloads("v26.3.2"), "gpu-operator")
    assert found["toolkit"].image == "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1" and found["toolkit"].container == "toolkit"
    assert found["operator"].where == "Deployment gpu-operator/gpu-operator"
    assert running_operands(workloads("v26.3.2"), "elsewhere") == {}


def test_a_half_done_upgrade_names_each_operand_found_against_the_charts():
    new = load_releases().release("v26.7.0")
    assert new is not None
    seen, wrong = against_the_chart(new, {}, workloads("v26.3.2"), "gpu-operator")
    assert len(wrong) == len(load_releases().operands)
    assert "toolkit runs v1.19.1 (DaemonSet gpu-operator/nvidia-container-toolkit-daemonset), the chart gives v1.20.0" in wrong
    assert "device-plugin runs v0.19.2 (DaemonSet gpu-operator/nvidia-device-plugin-daemonset), the chart gives v0.20.0" in wrong
    assert seen["validator"]["found"] == "nvcr.io/nvidia/gpu-operator:v26.3.2"


def test_operands_of_the_pinned_chart_pass_and_a_pinned_value_is_honoured():
    release = load_releases().release("v26.3.2")
    assert release is not None
    assert against_the_chart(release, {}, workloads("v26.3.2"), "gpu-operator")[1] == []
    old_plugin = workloads("v26.3.2", **{"device-plugin": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"})
    assert against_the_chart(release, {"devicePlugin": {"version": "v0.17.1"}}, old_plugin, "gpu-operator")[1] == []
    assert against_the_chart(release, {}, old_plugin, "gpu-operator")[1] == [
        "device-plugin runs v0.17.1 (DaemonSet gpu-operator/nvidia-device-plugin-daemonset), the chart gives v0.19.2"]


def test_a_disabled_or_absent_operand_or_one_pinned_by_digest_is_no_mismatch():
    release = load_releases().release("v26.3.2")
    assert release is not None
    found = workloads("v26.3.2", toolkit="nvcr.io/nvidia/k8s/container-toolkit@sha256:" + "a" * 64)
    found["DaemonSet"] = [d for d in found["DaemonSet"] if d["metadata"]["name"] != "nvidia-dcgm-exporter"]
    seen, wrong = against_the_chart(release, {"migManager": {"enabled": False}}, found, "gpu-operator")
    assert wrong == []
    assert seen["mig-manager"]["note"] == "disabled in the chart values"
    assert seen["dcgm-exporter"]["note"] == "no nvidia-dcgm-exporter in gpu-operator"
    assert seen["toolkit"]["note"].startswith("pinned by digest")


def test_the_helmcharts_set_is_laid_over_its_values():
    assert with_set({"toolkit": {"enabled": True}}, {"toolkit.version": "v1.19.0", "gfd.version": "v0.19.0"}) == {
        "toolkit": {"enabled": True, "version": "v1.19.0"}, "gfd": {"version": "v0.19.0"}}


# --- the check itself, on stand-ins for the cluster and the site ---------------------------------------------------

def _check() -> Any:
    spec = importlib.util.spec_from_file_location("operand_versions_check", REPO / "suites/gpu_operator/test_operand_versions.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.test_operands_run_the_versions_of_the_pinned_chart


class Cluster:
    where = "Kubernetes API of context 'x'"

    def __init__(self, version: str | None, running: str) -> None:
        chart = {"metadata": {"name": "gpu-operator", "namespace": "kube-system"},
                 "spec": {"targetNamespace": "gpu-operator", "valuesContent": "driver:\n  enabled: true\n",
                          **({"version": version} if version else {})}}
        self.lists = {"helmcharts": [chart], **{k.lower() + "s": v for k, v in workloads(running).items()}}

    def list(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [i for i in self.lists[kind] if namespace is None or i["metadata"]["namespace"] == namespace]


class Site:
    helmchart = {"metadata": {"name": "gpu-operator", "namespace": "kube-system"}}


class Evidence:
    def __init__(self) -> None:
        self.items: dict[str, Any] = {}

    def record(self, name: str, value: Any) -> None:
        self.items[name] = value


def test_the_check_fails_naming_the_operands_of_a_half_done_upgrade():
    with pytest.raises(pytest.fail.Exception) as failed:
        _check()(Cluster("v26.7.0", "v26.3.2"), Site(), "gpu-operator", Evidence())
    said = str(failed.value)
    assert "the operands do not run the versions of GPU Operator v26.7.0 that HelmChart kube-system/gpu-operator pins: " in said
    assert "operator runs v26.3.2 (Deployment gpu-operator/gpu-operator), the chart gives v26.7.0" in said


def test_the_check_passes_on_the_pinned_charts_operands():
    evidence = Evidence()
    _check()(Cluster("v26.3.2", "v26.3.2"), Site(), "gpu-operator", evidence)
    assert evidence.items["chart version the live HelmChart pins"] == "v26.3.2"


def test_a_chart_version_the_table_does_not_give_is_not_applicable_and_says_what_was_checked():
    with pytest.raises(NotApplicable) as skipped:
        _check()(Cluster("v26.7.1", "v26.3.2"), Site(), "gpu-operator", Evidence())
    assert skipped.value.reason.startswith("gpu-operator-releases.yaml has no operand versions for GPU Operator v26.7.1 "
                                           "(checked: NVIDIA/gpu-operator tags")
    with pytest.raises(NotApplicable) as unpinned:
        _check()(Cluster(None, "v26.3.2"), Site(), "gpu-operator", Evidence())
    assert "pins no spec.version" in unpinned.value.reason
