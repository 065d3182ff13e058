"""A real control plane kept across testbeds (testbed/keptplane.py): each testbed that attaches finds only its own
world (the previous testbed's objects, namespaces, CRDs, nodes and pods gone; the namespaces it relabelled put back),
its audit starts at its attach, one testbed holds the plane at a time, a killed holder loses it, and `plane down`
leaves no process, netns or address slot behind."""
from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import realplane_available

# slow: a real control plane started and two testbeds attached to it (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(realplane_available.why_not() is not None, reason=realplane_available.why_not() or "")]


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from pytest_dgxspark.testbed import keptplane, netns

    directory = tmp_path_factory.mktemp("kept")
    plane = keptplane.start(directory)
    yield plane
    assert keptplane.stop(directory) == []
    assert not Path("/run/netns", plane.netns).exists()
    assert [lk for lk in netns._slot_dir().glob("*.lock") if netns._owner(lk) == str(directory)] == []
    assert [p for p in plane.pids if keptplane.realplane.is_ours(p, directory)] == []


def _admin(testbed):
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(testbed.kubeconfig), context=testbed.contexts["workload"]))


def _crds(testbed) -> set[str]:
    from kubernetes import client, config

    api = client.ApiextensionsV1Api(config.new_client_from_config(str(testbed.kubeconfig),
                                                                   context=testbed.contexts["workload"]))
    return {c.metadata.name for c in api.list_custom_resource_definition().items}


def test_a_testbed_on_a_kept_plane_finds_its_own_world_and_nothing_of_the_one_before(kept, tmp_path):
    from kubernetes import client

    from pytest_dgxspark.testbed import Testbed

    first = Testbed("two-node", tmp_path / "a", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        core = _admin(first)
        assert sorted(n.metadata.name for n in core.list_node().items) == ["cpu-01", "gpu-01"]
        assert "clusterpolicies.nvidia.com" in _crds(first)
        # what a run leaves: its CUDA-sample namespace with a pod, and a label on a namespace the server made
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="dgxspark-cuda-left")))
        core.create_namespaced_config_map("dgxspark-cuda-left", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="left"), data={"a": "b"}))
        core.patch_namespace("default", {"metadata": {"labels": {"left-by": "first"}}})
        first_pods = {(p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items}
        assert first_pods
    finally:
        first.down()
    assert not (kept.directory / "attached.json").exists()

    second = Testbed("system-containerd-cri", tmp_path / "b", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        core = _admin(second)
        assert [n.metadata.name for n in core.list_node().items] == ["gpu-01"]
        assert [n.status.node_info.container_runtime_version for n in core.list_node().items] == ["containerd://1.7.28"]
        names = {n.metadata.name for n in core.list_namespace().items}
        assert "dgxspark-cuda-left" not in names
        assert "left-by" not in (core.read_namespace("default").metadata.labels or {})
        crds = _crds(second)
        assert "logs.kwok.x-k8s.io" in crds  # the plane's own, kept
        from pytest_dgxspark.testbed import objects, realworld, scenario
        from pytest_dgxspark.testbed.world import make_context

        sc = scenario.load("system-containerd-cri")
        world = objects.build_workload(make_context(sc, {"gpu-01": "172.29.9.2"}))
        assert crds == {c["metadata"]["name"] for c in realworld.crds(world)} | {"logs.kwok.x-k8s.io"}
        pods = {(p.metadata.namespace, p.metadata.name) for p in core.list_pod_for_all_namespaces().items}
        assert pods == {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in world.objects if o["kind"] == "Pod"}
        # the audit this testbed reads starts at its attach: none of the first testbed's requests
        paths = [r["path"] for r in second.requests()]
        assert paths and not any("dgxspark-cuda-left" in p for p in paths)
        from pytest_dgxspark.testbed import realplane

        everything = realplane.audited_requests(kept.audit_log, "system:admin")
        assert any("dgxspark-cuda-left" in r["path"] for r in everything)  # the plane's log has the first's
        assert everything[-len(paths):] == second.requests()  # ... and this testbed's are its tail from the attach
        # one testbed at a time
        from pytest_dgxspark.testbed import TestbedError

        with pytest.raises(TestbedError, match="is held by the testbed in .*give each concurrent testbed its own plane"):
            Testbed("healthy", tmp_path / "c", api="real", plane=kept.directory, _without_hosts=True).up()
    finally:
        second.down()


def test_a_scenario_with_api_faults_is_refused_a_kept_plane_before_anything_starts(kept, tmp_path):
    from pytest_dgxspark.testbed import Testbed, TestbedError

    with pytest.raises(TestbedError, match="api-flaky: its cluster.faults need a control plane of its own"):
        Testbed("api-flaky", tmp_path / "f", api="real", plane=kept.directory, _without_hosts=True).up()
    assert not (kept.directory / "attached.json").exists()


def test_a_killed_holder_loses_the_plane_to_the_next_testbed(kept, tmp_path):
    """A testbed process killed with SIGKILL (no teardown): the next attach stops its kwok and takes the plane."""
    script = ("import sys, time\nfrom pytest_dgxspark.testbed import Testbed\n"
              f"t = Testbed('healthy', {str(tmp_path / 'k')!r}, api='real', plane={str(kept.directory)!r}, _without_hosts=True).up()\n"
              "print('up', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        holder = json.loads((kept.directory / "attached.json").read_text())
        assert holder["testbed"] == str(tmp_path / "k") and len(holder["pids"]) == 3  # its kwok, kwokrun and controllers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        # its kwok, kwokrun and controllers live on (own sessions) and its state.json says up: still a holder, until they are gone
        for pid in holder["pids"]:
            os.killpg(pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
    from pytest_dgxspark.testbed import Testbed

    nxt = Testbed("healthy", tmp_path / "n", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        assert json.loads((kept.directory / "attached.json").read_text())["testbed"] == str(tmp_path / "n")
        assert [n.metadata.name for n in _admin(nxt).list_node().items] == ["gpu-01"]
    finally:
        nxt.down()
    from pytest_dgxspark.testbed.orchestrator import teardown

    teardown(tmp_path / "k")  # the killed testbed's netns and slot (its plane is no longer its to free)
    assert not (kept.directory / "attached.json").exists()



def test_each_attach_runs_a_controller_manager_that_never_saw_the_world_before(kept, tmp_path):
    """node-not-ready leaves gpu-01 NotReady; the next world's gpu-01 is Ready. A controller manager kept across the
    attach would judge the new gpu-01 on the old one's health and mark its pods not Ready (seen under load: the
    toolkit pod of site-model-alias, the gpu-injection root cause it does not declare). Each attach starts its own."""
    from pytest_dgxspark.testbed import Testbed, keptplane, realplane

    def controller_managers() -> list[int]:
        return [p for p in keptplane.load(kept.directory).pids if keptplane._is_controller_manager(p)]

    first = Testbed("node-not-ready", tmp_path / "a", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        (before,) = controller_managers()
    finally:
        first.down()
    offset = kept.audit_log.stat().st_size
    second = Testbed("site-model-alias", tmp_path / "b", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        (after,) = controller_managers()
        assert after != before and not realplane.is_ours(before, kept.directory)
        nodes = _admin(second).list_node().items
        assert [(n.metadata.name, [c.status for c in n.status.conditions if c.type == "Ready"]) for n in nodes] == [
            ("gpu-01", ["True"])]
        assert not [t for n in nodes for t in (n.spec.taints or []) if t.key.startswith("node.kubernetes.io/")]
        toolkit = [p for p in _admin(second).list_pod_for_all_namespaces().items
                   if p.metadata.name.startswith("nvidia-container-toolkit-daemonset")]
        assert [[c.status for c in p.status.conditions if c.type == "Ready"] for p in toolkit] == [["True"]]
        marked = [r for r in keptplane.audited_since(kept.directory, offset,
                                                      "system:serviceaccount:kube-system:node-controller")
                  if r["method"] in ("PUT", "PATCH") and r["path"].startswith("/api/v1/namespaces/")
                  and r["path"].endswith("/status")]
        assert marked == []
    finally:
        second.down()


def test_the_simulated_operator_and_helm_controller_act_through_the_api(kept, tmp_path):
    """healthy's world is written settled: controllers.py writes nothing at its start. An operand DaemonSet that loses
    a pod makes its ClusterPolicy notReady (and ready again when it comes back), a failed install Job fails its
    HelmChart: each written by the controllers' own user, on a watch."""
    from kubernetes import client, config, watch

    from pytest_dgxspark.testbed import Testbed, keptplane

    offset = kept.audit_log.stat().st_size
    bed = Testbed("healthy", tmp_path / "h", api="real", plane=kept.directory, _without_hosts=True).up()
    try:
        assert (tmp_path / "h" / "controllers.ready").is_file()
        api_client = config.new_client_from_config(str(bed.kubeconfig), context=bed.contexts["workload"])
        apps, custom = client.AppsV1Api(api_client), client.CustomObjectsApi(api_client)

        def writes() -> list[str]:
            return [r["path"] for r in keptplane.audited_since(kept.directory, offset, "testbed:controllers")
                    if r["method"] in ("PUT", "PATCH", "POST", "DELETE")]

        assert writes() == []  # the world is what the controllers would write

        def policy_until(state: str) -> dict:
            for event in watch.Watch().stream(custom.list_cluster_custom_object, "nvidia.com", "v1", "clusterpolicies",
                                              timeout_seconds=20):
                if (event["object"].get("status") or {}).get("state") == state:
                    return event["object"]
            raise AssertionError(f"cluster-policy did not become {state} within 20 s")

        def operand(unavailable: int) -> None:
            apps.patch_namespaced_daemon_set_status("nvidia-device-plugin-daemonset", "gpu-operator", {"status": {
                "numberUnavailable": unavailable, "numberReady": 1 - unavailable, "numberAvailable": 1 - unavailable}})

        operand(1)
        policy = policy_until("notReady")
        assert [c["message"] for c in policy["status"]["conditions"]] == [
            "ClusterPolicy is not ready, states not ready: [state-device-plugin]"] * 2
        operand(0)
        assert policy_until("ready")["status"]["conditions"][0]["reason"] == "Reconciled"
        # a chart of its own (healthy's install Job has completed, and a finished Job's conditions do not change)
        custom.create_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", {
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": {"name": "probe"},
            "spec": {"chart": "probe", "targetNamespace": "default"}})
        batch = client.BatchV1Api(api_client)
        helm = {"name": "helm", "image": "rancher/klipper-helm:v0.9.8-build20250709"}
        batch.create_namespaced_job("kube-system", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "helm-install-probe"},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [helm]}}}})

        def chart_until(condition: str) -> dict:
            for event in watch.Watch().stream(custom.list_namespaced_custom_object, "helm.cattle.io", "v1", "kube-system",
                                              "helmcharts", timeout_seconds=20):
                chart = event["object"]
                if chart["metadata"]["name"] == "probe" and \
                        condition in [c["type"] for c in (chart.get("status") or {}).get("conditions") or []]:
                    return chart
            raise AssertionError(f"the probe HelmChart had no {condition} condition within 20 s")

        assert chart_until("JobCreated")["status"]["jobName"] == "helm-install-probe"
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            batch.patch_namespaced_job_status("helm-install-probe", "kube-system", {"status": {
                "startTime": now, "failed": 1, "conditions": [
                    {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": now},
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": now}]}})
        except client.exceptions.ApiException as exc:
            raise AssertionError(exc.body) from exc
        assert [(c["type"], c["reason"]) for c in chart_until("Failed")["status"]["conditions"]] == [
            ("JobCreated", "Job created"), ("Failed", "Job failed")]
        assert writes() == ["/apis/nvidia.com/v1/clusterpolicies/cluster-policy/status"] * 2 + [
            "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/probe/status"] * 2
    finally:
        bed.down()
