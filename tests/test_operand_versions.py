"""The GPU Operator release table and the check that the operands run the pinned chart's versions (issue 22, after an
upgrade): the table as data, and the comparison on plain objects, without a testbed."""
from __future__ import annotations

import importlib.util
import shutil
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

def _suite_function(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"suite_{Path(path).stem}", REPO / path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return getattr(module, name)


def _check() -> Any:
    return _suite_function("suites/gpu_operator/test_operand_versions.py", "test_operands_run_the_versions_of_the_pinned_chart")


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


# --- the upgrade rehearsed on the testbed ---------------------------------------------------------------------------

UPGRADED_OPERANDS = {  # provenance key -> (v26.3.2's tag, v26.7.0's tag), from the release table
    "gpu_operator_chart_version": ("v26.3.2", "v26.7.0"), "gpu_operator_image": ("v26.3.2", "v26.7.0"),
    "driver_image_version": ("580.126.20", "595.91.07"), "toolkit_version": ("v1.19.1", "v1.20.0"),
    "device_plugin_version": ("v0.19.2", "v0.20.0"), "gfd_version": ("v0.19.2", "v0.20.0"),
    "dcgm_exporter_version": ("4.5.3-4.8.2-distroless", "4.6.0-4.8.3-distroless"),
    "validator_version": ("v26.3.2", "v26.7.0"), "mig_manager_version": ("v0.14.2", "v0.15.0"),
    "nfd_version": ("v0.18.3", "v0.19.0"),
}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server")
def test_an_upgrade_rehearsal_names_every_operands_old_and_new_version_and_a_half_done_one_names_the_chart_alone(tmp_path):
    """The README's after-upgrade run (`-m gpu --dgxspark-baseline`), rehearsed: a finished upgrade to v26.7.0 is
    ACCEPTED with each operand's version change in its drift; the half-done one regresses helmchart-live and its drift
    shows the chart's version moved while no operand did."""
    from tests.test_e2e import run_suite

    for sub in ("handover", "upgraded", "half"):
        (tmp_path / sub).mkdir()
    first, handover = run_suite(tmp_path / "handover", "--testbed", "healthy")
    assert handover["verdict"] == "ACCEPTED", first.stdout[-3000:]
    baseline = str((tmp_path / "handover" / "reports" / "latest").resolve())
    upgraded = tmp_path / "scn"
    upgraded.mkdir()
    (upgraded / "scenario.yaml").write_text(
        "format: 2\ndescription: healthy after the GPU Operator's upgrade to v26.7.0\nextends: healthy\n"
        "cluster: {gpu_operator: {helmchart: {version: v26.7.0}}}\nexpect: {rules: {}, root_causes: []}\n")
    # tirosh-home after the upgrade of its manifest to v26.7.0 (the baseline's site, by name)
    site = tmp_path / "tirosh-home"
    shutil.copytree(REPO / "pytest_dgxspark/testbed/scenarios/half-done-upgrade/site", site)
    proc, doc = run_suite(tmp_path / "upgraded", "--testbed", str(upgraded), "--site", str(site), "-m", "gpu",
                          "--dgxspark-baseline", baseline)
    assert doc["verdict"] == "ACCEPTED" and doc["drift"]["status_changes"] == [], proc.stdout[-3000:]
    changes = {c["key"]: (c["from"], c["to"]) for c in doc["drift"]["provenance"] if c["node"] is None}
    assert changes == UPGRADED_OPERANDS
    assert "cluster: toolkit_version: v1.19.1 -> v1.20.0" in proc.stdout
    proc, doc = run_suite(tmp_path / "half", "--testbed", "half-done-upgrade", "--site", str(site), "-m", "gpu",
                          "--dgxspark-baseline", baseline)
    assert doc["verdict"] == "REJECTED" and doc["root_causes"] == ["ADR-0002.helmchart-live"], proc.stdout[-3000:]
    assert {"rule": "ADR-0002.helmchart-live", "from": "passed", "to": "failed"} in doc["drift"]["regressed"]
    assert [(c["key"], c["from"], c["to"]) for c in doc["drift"]["provenance"] if c["node"] is None] == [
        ("gpu_operator_chart_version", "v26.3.2", "v26.7.0")]
    said = next(t["message"] for r in doc["rules"] if r["id"] == "ADR-0002.helmchart-live" for t in r["tests"]
                if t["nodeid"].endswith("test_operands_run_the_versions_of_the_pinned_chart"))
    assert "toolkit runs v1.19.1 (DaemonSet gpu-operator/nvidia-container-toolkit-daemonset), the chart gives v1.20.0" in said


def test_provenance_records_each_operands_version_under_its_own_key():
    from pytest_dgxspark.probes.provenance import cluster_facts

    lists = {"daemonsets": workloads("v26.3.2")["DaemonSet"], "deployments": workloads("v26.3.2")["Deployment"],
             "helmcharts": [{"metadata": {"name": "gpu-operator"}, "spec": {"version": "v26.3.2"}}]}

    class Cached:
        def cached(self, kind: str) -> list[dict[str, Any]] | None:
            return lists.get(kind)

    facts = cluster_facts(Cached())
    assert {k: facts[k] for k in UPGRADED_OPERANDS} == {k: old for k, (old, _new) in UPGRADED_OPERANDS.items()}


def _job(version: str, state: str) -> dict[str, Any]:
    from pytest_dgxspark.testbed.components import helm_job_env

    conditions = {"complete": [{"type": "Complete", "status": "True"}],
                  "failed": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                              "message": "Job has reached the specified backoff limit"}]}[state]
    return {"metadata": {"name": "helm-install-gpu-operator", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "helm", "env": helm_job_env("gpu-operator", {"version": version, "chart": "gpu-operator"})}]}}},
            "status": {"conditions": conditions, **({"succeeded": 1} if state == "complete" else {"failed": 1})}}


@pytest.mark.parametrize(("job", "said"), [
    (_job("v26.7.0", "failed"), "Job kube-system/helm-install-gpu-operator (chart v26.7.0) is not complete (succeeded "
                                "None, failed 1, Job has reached the specified backoff limit)"),
    (_job("v26.3.2", "complete"), "Job kube-system/helm-install-gpu-operator installed chart v26.3.2, but the live "
                                  "HelmChart pins v26.7.0: helm-controller has not run the pinned version's install"),
], ids=["failed", "an-earlier-versions-job"])
def test_the_install_job_must_be_the_pinned_versions_and_complete(job, said):
    cluster = Cluster("v26.7.0", "v26.3.2")
    cluster.lists["jobs"] = [job]
    with pytest.raises(pytest.fail.Exception) as failed:
        _suite_function("suites/gpu_operator/test_helmchart_live.py", "test_helm_install_job_completed")(
            cluster, Site(), Evidence())
    assert said in str(failed.value)
    cluster.lists["jobs"] = [_job("v26.7.0", "complete")]
    _suite_function("suites/gpu_operator/test_helmchart_live.py", "test_helm_install_job_completed")(cluster, Site(), Evidence())


def test_a_scenario_at_a_chart_version_the_table_does_not_give_is_refused_before_bring_up_naming_the_key(tmp_path):
    from pytest_dgxspark.testbed import scenario, scenariocheck

    (tmp_path / "scenario.yaml").write_text(
        "format: 2\ndescription: upgraded past the table\nextends: healthy\n"
        "cluster: {gpu_operator: {helm_job: failed, deployed_chart: v26.7.2, helmchart: {version: v26.7.0}}}\n")
    problems = scenariocheck.bring_up_problems(scenario.load(tmp_path))
    assert len(problems) == 1 and "cluster.gpu_operator.deployed_chart: 'v26.7.2' has no operand versions in " \
        "gpu-operator-releases.yaml (known: v26.3.0, v26.3.1, v26.3.2, v26.3.3, v26.7.0)" in problems[0]
