"""The simulated GPU Operator and helm-controller (testbed/controllers.py) without binaries: every bundled world is
written settled (what they would write is already there, so they write nothing at start), and what they write once
the objects they read change: a DaemonSet with an unavailable pod, a stopped operator, a node NFD no longer labels,
a failed install Job."""
from __future__ import annotations

import copy

import pytest

from pytest_dgxspark.testbed import controllers, objects, scenario
from pytest_dgxspark.testbed.world import make_context

KINDS = {"ClusterPolicy": "clusterpolicies", "DaemonSet": "daemonsets", "Deployment": "deployments", "Node": "nodes",
         "HelmChart": "helmcharts", "Job": "jobs"}


def _objects(name: str) -> controllers.Objects:
    sc = scenario.load(name)
    world = objects.build_workload(make_context(sc, {n: f"172.29.9.{4 * i + 2}" for i, n in enumerate(sc.nodes)}))
    out: controllers.Objects = {kind: {} for kind in controllers.PATHS}
    for obj in world.objects:
        if obj["kind"] in KINDS:
            out[KINDS[obj["kind"]]][controllers._key(obj)] = copy.deepcopy(obj)
    return out


@pytest.mark.parametrize("name", [name for name, _ in scenario.bundled()])
def test_every_bundled_world_is_written_as_its_controllers_leave_it(name):
    assert controllers.wanted(_objects(name), "2026-12-03T00:00:00Z") == []


def _policy_status(objs: controllers.Objects) -> dict:
    (policy,) = objs["clusterpolicies"].values()
    status = controllers.clusterpolicy_status(policy, objs, "NOW")
    assert status is not None
    return status


def test_an_unavailable_operand_makes_the_clusterpolicy_not_ready_naming_its_state_in_reconcile_order():
    objs = _objects("healthy")
    (policy,) = objs["clusterpolicies"].values()
    assert policy["status"]["state"] == "ready" and controllers.wanted(objs, "NOW") == []
    for ds in ("nvidia-device-plugin-daemonset", "nvidia-container-toolkit-daemonset"):
        objs["daemonsets"][("gpu-operator", ds)]["status"].update(numberUnavailable=1, numberReady=0)
    ((kind, obj, status),) = controllers.wanted(objs, "NOW")
    assert (kind, obj["metadata"]["name"], status["state"]) == ("clusterpolicies", "cluster-policy", "notReady")
    message = "ClusterPolicy is not ready, states not ready: [state-container-toolkit state-device-plugin]"
    assert [(c["type"], c["status"], c["reason"], c["message"], c["lastTransitionTime"]) for c in status["conditions"]] == [
        ("Ready", "False", "OperandNotReady", message, "NOW"), ("Error", "True", "OperandNotReady", message, "NOW")]
    policy["status"] = status  # written; the operand comes back: ready again, each condition changed anew
    for ds in ("nvidia-device-plugin-daemonset", "nvidia-container-toolkit-daemonset"):
        objs["daemonsets"][("gpu-operator", ds)]["status"].update(numberUnavailable=0, numberReady=1)
    again = _policy_status(objs)
    assert (again["state"], [c["reason"] for c in again["conditions"]]) == ("ready", ["Reconciled", "Ready"])
    # a condition whose status did not change keeps its transition time
    assert controllers.clusterpolicy_status({"status": again}, objs, "LATER")["conditions"] == again["conditions"]


def test_a_stopped_operator_writes_nothing_and_a_node_without_nfds_label_is_no_gpu_node():
    objs = _objects("healthy")
    objs["deployments"][("gpu-operator", "gpu-operator")]["status"].pop("availableReplicas")
    objs["daemonsets"][("gpu-operator", "nvidia-device-plugin-daemonset")]["status"]["numberUnavailable"] = 1
    assert controllers.wanted(objs, "NOW") == []
    objs["deployments"][("gpu-operator", "gpu-operator")]["status"]["availableReplicas"] = 1
    for node in objs["nodes"].values():
        node["metadata"]["labels"].pop(controllers.NFD_GPU)
    status = _policy_status(objs)
    assert (status["state"], status["conditions"][0]["reason"], status["conditions"][0]["message"]) == (
        "ready", "NoGPUNodes", "No GPU node found, watching for new nodes to join the cluster.")


def test_a_failed_install_job_fails_its_helmchart_and_a_chart_without_its_job_is_left_alone():
    objs = _objects("healthy")
    job = objs["jobs"][("kube-system", "helm-install-gpu-operator")]
    job["status"]["conditions"] = [{"type": "FailureTarget", "status": "True"},
                                   {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    ((kind, chart, status),) = controllers.wanted(objs, "NOW")
    assert (kind, chart["metadata"]["name"], status["jobName"]) == ("helmcharts", "gpu-operator", "helm-install-gpu-operator")
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("JobCreated", "Job created"), ("Failed", "Job failed")]
    del objs["jobs"][("kube-system", "helm-install-gpu-operator")]
    assert controllers.wanted(objs, "NOW") == []


def test_the_controllers_process_imports_nothing_of_the_world_builder():
    import subprocess
    import sys

    code = ("import sys, pytest_dgxspark.testbed.controllers; "
            "print(sorted(m for m in sys.modules if m.startswith('pytest_dgxspark.testbed.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "gpuoperator" not in loaded and "scenario" not in loaded and "controllers" in loaded
