"""The testbed's cluster side: the simulated API server, scheduler/kubelet, faults and scenarios."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import urllib3
import yaml

from pytest_dgxspark.targets.core import Core
from pytest_dgxspark.testbed import Testbed
from pytest_dgxspark.testbed.scenario import ScenarioError, bundled, deep_merge, load
from tests.conftest import alias_bomb

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402

VECTORADD_LOG = Path("/work/shared/reference/cuda-vectoradd-logs.txt")
RULE_IDS_HINT = ("ADR-0001.", "ADR-0002.", "SPARK.")


def _up(tmp: Path, scenario: str | Path) -> Testbed:
    return Testbed(scenario, tmp, _without_hosts=True).up()


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory):
    tb = _up(tmp_path_factory.mktemp("healthy"), "healthy")
    try:
        yield tb
    finally:
        tb.down()


def _api(tb: Testbed, role: str = "workload", retries: object = True) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(tb.kubeconfig), context=tb.contexts[role], client_configuration=configuration)
    if retries is not True:
        configuration.retries = retries
    return client.ApiClient(configuration)


def _wait(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not reached within the timeout")


def _cuda_pod(name: str, gpus: int = 1, restart: str = "Never") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": restart, "containers": [{
                "name": "cuda-vectoradd", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


@pytest.mark.slow
def test_kubeconfig_names_the_site_contexts_and_points_at_node_ips(healthy: Testbed) -> None:
    kc = yaml.safe_load(healthy.kubeconfig.read_text())
    assert healthy.contexts == {"workload": "tirosh-home/rke2/gpu", "management": "tirosh-home/k3s/argocd"}
    assert {c["name"] for c in kc["clusters"]} == {"tirosh-home/rke2/gpu", "tirosh-home/k3s/argocd"}
    assert "default" not in {u["name"] for u in kc["users"]}
    servers = {c["cluster"]["server"] for c in kc["clusters"]}
    assert all(s.startswith("https://172.29.") and s.endswith(":6443") for s in servers), servers


@pytest.mark.slow
def test_gb10_node_is_shaped_like_a_real_rke2_gpu_node(healthy: Testbed) -> None:
    nodes = client.CoreV1Api(_api(healthy)).list_node().items
    assert [n.metadata.name for n in nodes] == ["gpu-01"]
    node = nodes[0]
    labels = node.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB10"
    assert labels["nvidia.com/gpu.family"] == "blackwell"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("12", "1")
    assert labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["node-role.kubernetes.io/control-plane"] == "true"
    assert labels["node.tirosh.ai/role"] == "gpu"
    assert "nvidia.com/gpu.memory" not in labels
    assert node.status.allocatable["nvidia.com/gpu"] == "1"
    info = node.status.node_info
    assert (info.container_runtime_version, info.kubelet_version, info.architecture) == (
        "containerd://2.1.5-k3s1", "v1.34.10+rke2r1", "arm64")
    assert info.kernel_version == "6.17.0-1014-nvidia"
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("True", "KubeletReady")
    server = yaml.safe_load(healthy.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server == f"https://{ {a.type: a.address for a in node.status.addresses}['InternalIP'] }:6443"


@pytest.mark.slow
def test_gpu_operator_is_installed_in_nri_mode_without_driver_pod(healthy: Testbed) -> None:
    api = _api(healthy)
    pods = client.CoreV1Api(api).list_namespaced_pod("gpu-operator").items
    names = [p.metadata.name for p in pods]
    assert not any(n.startswith("nvidia-driver-daemonset") for n in names)
    validator = next(p for p in pods if p.metadata.name.startswith("nvidia-cuda-validator-"))
    assert validator.status.phase == "Succeeded"
    ds = {d.metadata.name: d for d in client.AppsV1Api(api).list_namespaced_daemon_set("gpu-operator").items}
    assert ds["nvidia-driver-daemonset"].status.desired_number_scheduled == 0
    assert ds["nvidia-device-plugin-daemonset"].status.number_ready == 1
    assert client.NodeV1Api(api).list_runtime_class().items == []
    co = client.CustomObjectsApi(api)
    cp = co.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    ready = next(c for c in cp["status"]["conditions"] if c["type"] == "Ready")
    assert (cp["status"]["state"], ready["reason"]) == ("ready", "Reconciled")
    chart = co.get_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", "gpu-operator")
    assert chart["spec"]["version"] == "v26.3.2" and "nriPluginEnabled: true" in chart["spec"]["valuesContent"]
    job = client.BatchV1Api(api).read_namespaced_job("helm-install-gpu-operator", "kube-system")
    assert any(c.type == "Complete" and c.status == "True" for c in job.status.conditions)
    plugin = next(p for p in pods if p.metadata.name.startswith("nvidia-device-plugin-daemonset-"))
    log = client.CoreV1Api(api).read_namespaced_pod_log(plugin.metadata.name, "gpu-operator", tail_lines=3)
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log
    assert len(log.splitlines()) == 3


@pytest.mark.slow
def test_cilium_mirrors_site_values_and_kube_proxy_runs(healthy: Testbed) -> None:
    api = _api(healthy)
    co = client.CustomObjectsApi(api)
    hcc = co.get_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmchartconfigs", "rke2-cilium")
    values = yaml.safe_load(hcc["spec"]["valuesContent"])
    assert values["kubeProxyReplacement"] is False and values["hubble"]["enabled"] is False
    assert values["encryption"] == {"enabled": False, "type": "wireguard"}
    assert [n["metadata"]["name"] for n in co.list_cluster_custom_object("cilium.io", "v2", "ciliumnodes")["items"]] == ["gpu-01"]
    pods = client.CoreV1Api(api).list_namespaced_pod("kube-system", label_selector="component=kube-proxy").items
    assert [p.metadata.name for p in pods] == ["kube-proxy-gpu-01"]


@pytest.mark.slow
def test_requests_without_credentials_get_a_401_status(healthy: Testbed) -> None:
    server = yaml.safe_load(healthy.kubeconfig.read_text())["clusters"][0]["cluster"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(server["certificate-authority-data"]).decode())
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(server["server"] + "/api/v1/nodes", context=ctx, timeout=5)
    assert info.value.code == 401
    assert json.loads(info.value.read()) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                             "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


@pytest.mark.slow
def test_bearer_token_from_the_argocd_secret_is_accepted(healthy: Testbed) -> None:
    secrets = client.CoreV1Api(_api(healthy, "management")).list_namespaced_secret(
        "argocd", label_selector="argocd.argoproj.io/secret-type=cluster").items
    assert len(secrets) == 1
    data = {k: base64.b64decode(v).decode() for k, v in secrets[0].data.items()}
    server = yaml.safe_load(healthy.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert data["server"] == server and data["name"] == "tirosh-home-rke2-gpu"
    cfg = json.loads(data["config"])
    ctx = ssl.create_default_context(cadata=base64.b64decode(cfg["tlsClientConfig"]["caData"]).decode())
    req = urllib.request.Request(server + "/version", headers={"Authorization": f"Bearer {cfg['bearerToken']}"})
    with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
        assert json.loads(resp.read())["gitVersion"] == "v1.34.10+rke2r1"


@pytest.mark.slow
def test_label_and_field_selectors(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    def names(**kw) -> set[str]:
        return {p.metadata.name.rsplit("-", 1)[0] for p in v1.list_pod_for_all_namespaces(**kw).items}
    assert names(label_selector="app in (nvidia-device-plugin-daemonset,gpu-feature-discovery)") == {
        "nvidia-device-plugin-daemonset", "gpu-feature-discovery"}
    assert "nvidia-device-plugin-daemonset" not in names(label_selector="app notin (nvidia-device-plugin-daemonset),app")
    assert names(label_selector="!app,component=etcd") == {"etcd-gpu"}
    assert len(v1.list_pod_for_all_namespaces(label_selector="app==gpu-operator,app!=x").items) == 1
    assert names(field_selector="status.phase=Succeeded,metadata.namespace=gpu-operator") == {"nvidia-cuda-validator"}
    assert all(p.spec.node_name == "gpu-01" for p in v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-01").items)
    assert v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=nope").items == []
    with pytest.raises(client.ApiException) as info:
        v1.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert info.value.status == 400 and "field label not supported: spec.bogus" in info.value.body


@pytest.mark.slow
def test_cuda_pod_is_scheduled_runs_and_succeeds_with_the_vectoradd_log(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "cuda-ok"}})
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    created = v1.create_namespaced_pod("cuda-ok", _cuda_pod("cuda-vectoradd"))
    for event in w.stream(v1.list_namespaced_pod, "cuda-ok", resource_version=created.metadata.resource_version, timeout_seconds=10):
        seen.append((event["type"], event["object"].status.phase))
        if event["object"].status.phase in ("Succeeded", "Failed"):
            w.stop()
    assert seen[-1] == ("MODIFIED", "Succeeded"), seen
    assert ("MODIFIED", "Running") in seen
    pod = v1.read_namespaced_pod("cuda-vectoradd", "cuda-ok")
    assert pod.spec.node_name == "gpu-01"
    assert pod.status.container_statuses[0].state.terminated.reason == "Completed"
    expected = "".join(l + "\n" for l in VECTORADD_LOG.read_text().splitlines() if not l.startswith("# SOURCE"))
    assert v1.read_namespaced_pod_log("cuda-vectoradd", "cuda-ok") == expected
    assert Core(v1.api_client).read_namespaced_pod_log("cuda-vectoradd", "cuda-ok") == expected  # the suite's call
    with pytest.raises(client.ApiException) as refused:  # as kube-apiserver 1.34 answers (seen on the real plane)
        v1.read_namespaced_pod_log("cuda-vectoradd", "cuda-ok", _headers={"Accept": "text/plain"})
    assert refused.value.status == 406 and "application/json, application/yaml" in json.loads(refused.value.body)["message"]
    reasons = [e.reason for e in v1.list_namespaced_event("cuda-ok", field_selector="involvedObject.name=cuda-vectoradd").items]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    with pytest.raises(client.ApiException) as info:
        v1.create_namespaced_pod("cuda-ok", _cuda_pod("cuda-vectoradd"))
    assert info.value.status == 409 and json.loads(info.value.body)["reason"] == "AlreadyExists"


def _gpu_pod_with(image: str, name: str) -> dict:
    pod = _cuda_pod(name)
    pod["spec"]["containers"][0]["image"] = image
    return pod


@pytest.mark.slow
def test_an_image_without_the_nodes_architecture_fails_with_exec_format_error(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "cuda-arch"}})
    v1.create_namespaced_pod("cuda-arch", _gpu_pod_with("nvcr.io/nvidia/k8s/cuda-sample:nbody", "nbody"))
    pod = _wait(lambda: (p := v1.read_namespaced_pod("nbody", "cuda-arch")).status.phase in ("Succeeded", "Failed") and p)
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, term.reason, term.exit_code) == ("Failed", "Error", 255)
    assert v1.read_namespaced_pod_log("nbody", "cuda-arch") == "exec /cuda-samples/nbody: exec format error\n"


@pytest.mark.slow
def test_an_unknown_tag_ends_in_image_pull_back_off_with_the_real_event(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "cuda-typo"}})
    image = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.4"
    v1.create_namespaced_pod("cuda-typo", _gpu_pod_with(image, "typo"))
    pod = _wait(lambda: (p := v1.read_namespaced_pod("typo", "cuda-typo")).status.container_statuses and
                p.status.container_statuses[0].state.waiting and
                p.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff" and p)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.message == f'Back-off pulling image "{image}"'
    events = [(e.type, e.reason, e.message) for e in v1.list_namespaced_event(
        "cuda-typo", field_selector="involvedObject.name=typo").items]
    assert ("Warning", "Failed", f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and '
            f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found') in events
    assert [r for _, r, _ in events] == ["Scheduled", "Pulling", "Failed", "Failed", "BackOff", "Failed"]
    v1.delete_namespaced_pod("typo", "cuda-typo")  # a Pending pod keeps its GPU: free it for the next tests
    _wait(lambda: not v1.list_namespaced_pod("cuda-typo").items)


@pytest.mark.slow
def test_only_nvidias_vectoradd_sample_prints_test_passed(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "cuda-other"}})
    v1.create_namespaced_pod("cuda-other", _gpu_pod_with("busybox:1.36", "other"))
    pod = _wait(lambda: (p := v1.read_namespaced_pod("other", "cuda-other")).status.phase in ("Succeeded", "Failed") and p)
    assert pod.status.phase == "Succeeded"
    assert "Test PASSED" not in v1.read_namespaced_pod_log("other", "cuda-other")


def test_a_bad_image_catalogue_entry_is_rejected_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("description: x\nextends: healthy\ncluster:\n  images:\n"
                                            "    my/cuda:1: {arch: [riscv64]}\n")
    with pytest.raises(ScenarioError) as raised:
        load(tmp_path)
    assert str(raised.value) == (f"{tmp_path / 'scenario.yaml'}: cluster.images['my/cuda:1'].arch: ['riscv64'], "
                                 "expected a list of amd64/arm64")


@pytest.mark.slow
def test_namespace_delete_removes_its_pods(healthy: Testbed) -> None:
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "doomed"}})
    v1.create_namespaced_pod("doomed", {"metadata": {"name": "sleeper"}, "spec": {"containers": [{"name": "s", "image": "busybox:1.36"}]}})
    deleted = v1.delete_namespace("doomed")
    assert (deleted["status"] if isinstance(deleted, dict) else deleted.status.to_dict()).get("phase") == "Terminating"
    _wait(lambda: "doomed" not in {n.metadata.name for n in v1.list_namespace().items})
    with pytest.raises(client.ApiException) as info:
        v1.read_namespaced_pod("sleeper", "doomed")
    assert info.value.status == 404 and json.loads(info.value.body)["message"] == 'pods "sleeper" not found'
    with pytest.raises(client.ApiException) as info:
        v1.delete_namespace("kube-system")
    assert info.value.status == 403


@pytest.mark.slow
def test_requests_are_recorded_without_secrets(healthy: Testbed) -> None:
    client.CoreV1Api(_api(healthy)).list_namespace(label_selector="kubernetes.io/metadata.name=default")

    def recorded() -> list[dict]:  # the server writes a request's line once its answer is sent: a loaded machine reads first
        found = [r for r in healthy.requests() if r["path"] == "/api/v1/namespaces" and r["method"] == "GET"]
        return found if found and found[-1]["query"] else []
    mine = _wait(recorded)
    assert mine[-1]["query"] == {"labelSelector": "kubernetes.io/metadata.name=default"}
    assert set(mine[-1]) >= {"cluster", "method", "path", "query", "status", "time", "duration_ms", "user_agent"}
    assert mine[-1]["status"] == 200 and mine[-1]["cluster"] == "workload"
    assert "Bearer" not in (healthy.directory / "requests.jsonl").read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_works_unchanged(healthy: Testbed) -> None:
    def kubectl(*args: str) -> str:
        proc = subprocess.run(["kubectl", "--kubeconfig", str(healthy.kubeconfig), *args], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    out = kubectl("get", "nodes,pods", "-A", "-o", "wide")
    assert "node/gpu-01" in out and "containerd://2.1.5-k3s1" in out and "Completed" in out
    assert "cluster-policy   ready" in kubectl("get", "clusterpolicy")
    assert "helm-install-gpu-operator" in kubectl("get", "helmcharts", "-A")
    assert "argocd" in kubectl("--context", "tirosh-home/k3s/argocd", "get", "ns")


@pytest.mark.slow
def test_a_second_gpu_pod_waits_for_the_one_gpu_and_runs_once_the_first_is_done(healthy: Testbed) -> None:
    """kube-scheduler moves an unschedulable pod back to its queue when an assigned pod finishes or goes: two CUDA
    samples at once on the one GB10 run one after the other (two suite runs at once against one cluster)."""
    v1 = client.CoreV1Api(_api(healthy))
    v1.create_namespace({"metadata": {"name": "two-at-once"}})
    try:
        for name in ("first", "second"):
            v1.create_namespaced_pod("two-at-once", _cuda_pod(name))
        done = _wait(lambda: all(p.status.phase == "Succeeded" for p in v1.list_namespaced_pod("two-at-once").items)
                     and v1.list_namespaced_pod("two-at-once").items, timeout=30)
        assert sorted(p.metadata.name for p in done) == ["first", "second"]
        reasons = {name: [e.reason for e in v1.list_namespaced_event(
            "two-at-once", field_selector=f"involvedObject.name={name}").items] for name in ("first", "second")}
        waited = [name for name, seen in reasons.items() if "FailedScheduling" in seen]
        assert len(waited) == 1 and reasons[waited[0]][:2] == ["FailedScheduling", "Scheduled"], reasons
        assert "FailedScheduling" not in reasons[{"first": "second", "second": "first"}[waited[0]]], reasons
    finally:
        v1.delete_namespace("two-at-once")


@pytest.mark.slow
def test_pending_pod_gets_failed_scheduling_in_real_wording(tmp_path: Path) -> None:
    tb = _up(tmp_path, "cuda-pending")
    try:
        v1 = client.CoreV1Api(_api(tb))
        v1.create_namespace({"metadata": {"name": "cuda"}})
        v1.create_namespaced_pod("cuda", _cuda_pod("cuda-vectoradd"))
        events = _wait(lambda: v1.list_namespaced_event("cuda", field_selector="involvedObject.name=cuda-vectoradd").items)
        assert [(e.type, e.reason) for e in events] == [("Warning", "FailedScheduling")]
        assert events[0].message == ("0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are available: "
                                     "1 No preemption victims found for incoming pod.")
        pod = v1.read_namespaced_pod("cuda-vectoradd", "cuda")
        assert pod.status.phase == "Pending" and pod.spec.node_name is None
        assert (pod.status.conditions[0].type, pod.status.conditions[0].reason) == ("PodScheduled", "Unschedulable")
        with pytest.raises(client.exceptions.ApiException) as info:  # kube-apiserver: no node to proxy the log from
            v1.read_namespaced_pod_log("cuda-vectoradd", "cuda")
        assert info.value.status == 400 and "pod cuda-vectoradd does not have a host assigned" in info.value.body
    finally:
        tb.down()


@pytest.mark.slow
def test_failing_cuda_pod_ends_failed_with_a_real_message(tmp_path: Path) -> None:
    tb = _up(tmp_path, "cuda-failing")
    try:
        v1 = client.CoreV1Api(_api(tb))
        v1.create_namespace({"metadata": {"name": "cuda"}})
        v1.create_namespaced_pod("cuda", _cuda_pod("cuda-vectoradd"))
        pod = _wait(lambda: (p := v1.read_namespaced_pod("cuda-vectoradd", "cuda")).status.phase == "Failed" and p)
        assert pod.status.reason == "UnexpectedAdmissionError"
        assert "error calling nvml.Init: Unknown Error" in pod.status.message
        with pytest.raises(client.exceptions.ApiException) as info:  # the kubelet never started the container
            v1.read_namespaced_pod_log("cuda-vectoradd", "cuda")
        assert info.value.status == 400 and "is waiting to start" in info.value.body
    finally:
        tb.down()


@pytest.mark.slow
def test_api_faults_inject_errors_latency_and_drops(tmp_path: Path) -> None:
    scenario = tmp_path / "faulty"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({
        "description": "faults", "extends": "healthy",
        "cluster": {"faults": {"latency_ms": 50, "error_rate": 0.3, "drop_rate": 0.2, "paths": "^/api/v1/nodes", "seed": 3}}}))
    tb = _up(tmp_path / "tb", scenario)
    try:
        v1 = client.CoreV1Api(_api(tb, retries=False))
        outcomes = []
        for _ in range(30):
            try:
                v1.list_node(_request_timeout=5)
                outcomes.append("ok")
            except client.ApiException as exc:
                outcomes.append(exc.status)
            except Exception:  # noqa: BLE001 - a dropped connection surfaces as a urllib3 error
                outcomes.append("drop")
        assert {"ok", 500, "drop"} <= set(outcomes), outcomes
        v1.list_namespace()  # other paths are untouched
        records = [r for r in tb.requests() if r["path"] == "/api/v1/nodes"]
        assert all(r["duration_ms"] >= 50 for r in records)
        assert {r.get("fault") for r in records} >= {"error", "drop", None}
    finally:
        tb.down()


@pytest.mark.slow
def test_unreachable_cluster_has_nothing_listening(tmp_path: Path) -> None:
    tb = _up(tmp_path, "api-unreachable")
    try:
        v1 = client.CoreV1Api(_api(tb, retries=False))
        with pytest.raises(Exception) as info:
            v1.list_node(_request_timeout=2)
        assert "refused" in str(info.value).lower() or "max retries" in str(info.value).lower()
    finally:
        tb.down()


def test_extends_merges_maps_replaces_lists_and_null_deletes() -> None:
    base = {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "keep": True}
    over = {"a": {"b": 2, "c": [3], "d": None}}
    assert deep_merge(base, over) == {"a": {"b": 2, "c": [3]}, "keep": True}
    s = load("device-plugin-crashloop")
    chart = s.cluster["gpu_operator"]["helmchart"]
    assert "devicePlugin:\n  version: v0.17.1" in chart["valuesContent"]  # its own values replace healthy's
    assert chart["repo"] == "https://helm.ngc.nvidia.com/nvidia"  # the rest of healthy's HelmChart is kept
    assert chart["version"] == "v26.3.2" and s.nodes["gpu-01"]["kube"]["ready"] is True
    assert s.management["registered"] is True
    assert s.expect["root_causes"] == ["ADR-0002.operator-components"]


@pytest.mark.slow
def test_every_bundled_scenario_loads_with_description_and_valid_expect() -> None:
    names = [name for name, _ in bundled()]
    assert {"healthy", "driver-not-loaded", "proprietary-driver", "nvml-missing", "docker-cri", "canal-cni",
            "device-plugin-crashloop", "clusterpolicy-not-ready", "gpu-not-allocatable", "cuda-pending", "cuda-failing",
            "argocd-unregistered", "two-node", "api-flaky", "host-unreachable"} <= set(names)
    for name in names:
        s = load(name)
        assert s.description and s.expect["rules"], name
        assert all(r.startswith(RULE_IDS_HINT) for r in list(s.expect["rules"]) + s.expect["root_causes"]), name
        assert set(s.expect["root_causes"]) <= {r for r, st in s.expect["rules"].items() if st in ("failed", "error")}, name


def _built(name: str):
    from pytest_dgxspark.testbed import objects
    from pytest_dgxspark.testbed.resources import pod_status_text
    from pytest_dgxspark.testbed.world import make_context

    sc = load(name)
    world = objects.build_workload(make_context(sc, {n: f"10.0.0.{i}" for i, n in enumerate(sc.nodes, 1)}))
    pods = {o["metadata"]["name"].rsplit("-", 1)[0]: pod_status_text(o)[1] for o in world.objects
            if o["kind"] == "Pod" and o["metadata"].get("namespace") == "gpu-operator"}
    policy = world.find("ClusterPolicy", "cluster-policy")
    return world, pods, policy["status"]["conditions"][0]["message"] if policy else None


NOT_READY = "ClusterPolicy is not ready, states not ready: "
WAITING = {"nvidia-container-toolkit-daemonset": "Init:0/1", "nvidia-operator-validator": "Init:0/4",
           "nvidia-device-plugin-daemonset": "Init:0/2", "nvidia-dcgm-exporter": "Init:0/1", "gpu-feature-discovery": "Init:0/1"}


@pytest.mark.parametrize(("name", "not_running", "message"), [
    ("healthy", {}, "ClusterPolicy is ready as all resources have been successfully reconciled"),
    ("nvml-missing", WAITING, NOT_READY + "[state-container-toolkit state-operator-validation state-device-plugin "
                                          "state-dcgm-exporter gpu-feature-discovery]"),
    ("proprietary-driver", WAITING, NOT_READY + "[state-container-toolkit state-operator-validation state-device-plugin "
                                                "state-dcgm-exporter gpu-feature-discovery]"),
    ("driver-not-loaded", {**WAITING, "nvidia-driver-daemonset": "CrashLoopBackOff"},
     NOT_READY + "[state-driver state-container-toolkit state-operator-validation state-device-plugin "
                 "state-dcgm-exporter gpu-feature-discovery]"),
    ("device-plugin-crashloop", {"nvidia-device-plugin-daemonset": "CrashLoopBackOff",
                                 "nvidia-operator-validator": "Init:CrashLoopBackOff"},
     NOT_READY + "[state-operator-validation state-device-plugin]"),
    ("gpu-not-allocatable-fresh", {"nvidia-operator-validator": "Init:CrashLoopBackOff"},
     NOT_READY + "[state-operator-validation]"),
    ("containerd-nri-disabled", {**WAITING, "nvidia-container-toolkit-daemonset": "CrashLoopBackOff",
                                 "nvidia-operator-validator": "Init:1/4"},
     NOT_READY + "[state-container-toolkit state-operator-validation state-device-plugin state-dcgm-exporter "
                 "gpu-feature-discovery]"),
    ("clusterpolicy-not-ready", {}, "No GPU node found, watching for new nodes to join the cluster."),
])
def test_the_operators_start_up_order_follows_the_host_facts(name: str, not_running: dict, message: str) -> None:
    world, pods, policy_message = _built(name)
    assert {p: s for p, s in pods.items() if s not in ("Running", "Completed")} == not_running
    assert policy_message == message
    gpu = world.find("Node", "gpu-01")["status"]["capacity"].get("nvidia.com/gpu")
    assert gpu == ("1" if name == "healthy" else None)


def test_a_failing_driver_validation_logs_nvidia_smis_answer_and_retries() -> None:
    world, _, _ = _built("nvml-missing")
    key = next(k for k in world.logs if k.startswith("gpu-operator/nvidia-operator-validator-") and k.endswith("/driver-validation"))
    assert world.logs[key].splitlines()[:3] == [
        "running command chroot with args [/host nvidia-smi]",
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver is "
        "properly installed and present in your system.",
        "Please also try adding directory that contains libnvidia-ml.so to your system PATH."]
    assert world.logs[key].count("failed to validate the driver, retrying after 5 seconds") == 3
    plugin = next(k for k in world.logs if k.startswith("gpu-operator/nvidia-device-plugin-daemonset-") and "toolkit-validation" in k)
    assert world.logs[plugin] == "waiting for nvidia container stack to be setup\n" * 3
    labels = world.find("Node", "gpu-01")["metadata"]["labels"]
    assert "nvidia.com/gpu.product" not in labels and labels["nvidia.com/gpu.deploy.driver"] == "pre-installed"


def test_operands_are_owned_by_the_clusterpolicy_and_the_nfd_less_node_loses_gpu_present() -> None:
    world, _, _ = _built("healthy")
    policy = world.find("ClusterPolicy", "cluster-policy")
    plugin = world.find("DaemonSet", "nvidia-device-plugin-daemonset")
    assert plugin["metadata"]["ownerReferences"][0]["uid"] == policy["metadata"]["uid"]
    world, _, _ = _built("clusterpolicy-not-ready")
    assert world.find("Node", "gpu-01")["metadata"]["labels"]["nvidia.com/gpu.present"] == "false"


# Rules no bundled scenario makes a root cause yet, and why (remove one when a scenario covers it).
ROOT_CAUSE_GAPS: set[str] = set()  # hardening-baseline is one where the site declares hardening (hardening-*)


@pytest.mark.slow
def test_every_rule_but_the_known_gaps_is_a_root_cause_in_some_bundled_scenario() -> None:
    from pytest_dgxspark.catalog.rules import load_catalog

    rule_ids = {rule.id for rule in load_catalog()}
    causes = {rid for name, _ in bundled() for rid in load(name).expect["root_causes"]}
    assert causes <= rule_ids
    assert rule_ids - causes == ROOT_CAUSE_GAPS


def test_bad_scenario_is_rejected_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("description: x\nnodes: {n: {role: boss}}\nbogus: 1\n")
    with pytest.raises(ScenarioError, match=r"scenario.yaml: unknown top-level keys \['bogus'\]"):
        load(tmp_path)


def test_a_scenario_file_repeating_a_key_is_rejected_naming_file_and_lines(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text("description: x\nextends: healthy\ndescription: y\n")
    with pytest.raises(ScenarioError) as raised:
        load(tmp_path)
    assert str(raised.value) == f"{tmp_path / 'scenario.yaml'}: duplicate key 'description' at line 3 (first at line 1)"


@pytest.mark.parametrize(("files", "where"), [
    ({"objects/bomb.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\ndata:\n" + alias_bomb("  ")},
     "objects/bomb.yaml"),
    ({"scenario.yaml": "description: x\nextends: healthy\ncluster:\n  gpu_operator:\n    helmchart:\n"
                       "      valuesContent: |\n" + alias_bomb("        ")},
     "scenario.yaml: cluster.gpu_operator.helmchart.valuesContent"),
], ids=["object-file", "helmchart-values"])
def test_an_alias_bomb_inside_a_scenario_is_rejected_at_load_naming_file_and_key(tmp_path: Path, files, where) -> None:
    (tmp_path / "objects").mkdir()
    (tmp_path / "scenario.yaml").write_text("description: x\nextends: healthy\n")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ScenarioError) as raised:
        load(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path}/{where}: expands to more than 200000 nodes through aliases at line ")


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, _ in bundled() if n != "api-unreachable"])
def test_every_bundled_scenario_serves_objects_the_official_client_accepts(tmp_path: Path, name: str) -> None:
    tb = _up(tmp_path, name)
    try:
        retrying = urllib3.Retry(total=20, status_forcelist=[500], allowed_methods=None, backoff_factor=0)
        api = _api(tb, retries=retrying)
        v1, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
        assert v1.list_node().items
        pods = v1.list_pod_for_all_namespaces().items
        assert all(p.status.phase in ("Pending", "Running", "Succeeded", "Failed") for p in pods)
        apps.list_daemon_set_for_all_namespaces(), apps.list_deployment_for_all_namespaces(), batch.list_job_for_all_namespaces()
        v1.list_namespace(), v1.list_secret_for_all_namespaces()
        assert client.CoreV1Api(_api(tb, "management")).list_namespaced_secret("argocd").items is not None
    finally:
        tb.down()


@pytest.mark.slow
def test_crashlooping_device_plugin_looks_like_kubectl_shows_it(tmp_path: Path) -> None:
    from pytest_dgxspark.testbed.resources import pod_status_text

    tb = _up(tmp_path, "device-plugin-crashloop")
    try:
        v1 = client.CoreV1Api(_api(tb))
        pods = {p.metadata.name.rsplit("-", 1)[0]: p for p in v1.list_namespaced_pod("gpu-operator").items}
        plugin = pods["nvidia-device-plugin-daemonset"]
        state = plugin.status.container_statuses[0]
        assert state.state.waiting.reason == "CrashLoopBackOff" and state.restart_count == 14
        assert state.last_state.terminated.exit_code == 1
        validator = pods["nvidia-operator-validator"]
        raw = v1.api_client.sanitize_for_serialization(validator)
        assert pod_status_text(raw)[1] == "Init:CrashLoopBackOff" and raw["status"]["phase"] == "Pending"
        log = v1.read_namespaced_pod_log(plugin.metadata.name, "gpu-operator")
        assert log.endswith("error getting device memory: Not Supported\n") and 'version="v0.17.1"' in log
        assert v1.read_namespaced_pod_log(plugin.metadata.name, "gpu-operator", previous=True) == log
        name = validator.metadata.name
        waiting = v1.read_namespaced_pod_log(name, "gpu-operator", container="plugin-validation")
        assert waiting.splitlines()[-1].endswith('msg="GPU resources are not yet discovered by the node, retry: 12"')
        gave_up = v1.read_namespaced_pod_log(name, "gpu-operator", container="plugin-validation", previous=True)
        assert gave_up.splitlines()[-2].endswith("retry: 30\"") and gave_up.splitlines()[-1].endswith(
            'level=fatal msg="error validating plugin installation: GPU resources are not discovered by the node"')
        with pytest.raises(client.ApiException) as raised:
            v1.read_namespaced_pod_log(name, "gpu-operator", container="driver-validation", previous=True)
        assert raised.value.status == 400
        assert json.loads(raised.value.body)["message"] == (
            f'previous terminated container "driver-validation" in pod "{name}" not found')
        assert "nvidia.com/gpu" not in v1.read_node("gpu-01").status.allocatable
        cp = client.CustomObjectsApi(_api(tb)).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        assert cp["status"]["state"] == "notReady" and cp["status"]["conditions"][0]["message"] == (
            "ClusterPolicy is not ready, states not ready: [state-operator-validation state-device-plugin]")
    finally:
        tb.down()


@pytest.mark.slow
def test_a_non_gpu_node_gets_its_own_labels_in_config_node_and_inventory(tmp_path: Path) -> None:
    tb = _up(tmp_path, "two-node")
    try:
        inventory = yaml.safe_load(tb.inventory.read_text())["all"]["children"]
        assert inventory["rke2_agents"]["hosts"]["cpu-01"]["rke2_node_labels"] == ["node.tirosh.ai/role=cpu"]
        assert "rke2_node_labels" not in inventory["rke2_servers"]["hosts"]["gpu-01"]  # the site's labels apply
        nodes = {n.metadata.name: n.metadata.labels for n in client.CoreV1Api(_api(tb)).list_node().items}
        assert nodes["cpu-01"]["node.tirosh.ai/role"] == "cpu" and nodes["gpu-01"]["node.tirosh.ai/role"] == "gpu"
    finally:
        tb.down()
