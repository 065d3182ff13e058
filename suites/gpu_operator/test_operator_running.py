"""GPU Operator layer: the operator pod is Ready and its ClusterPolicy found GPU nodes to manage (ADR 0002 §5-5)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_dgxspark.checking import finding, require
from pytest_dgxspark.kube.objects import clusterpolicy_readiness, pod_ready, pod_summary
from pytest_dgxspark.kube.podstate import pod_story

OPERATOR_POD = re.compile(r"^gpu-operator-[a-z0-9]+-[a-z0-9]{5}$")


def _operator_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("app") == "gpu-operator" or labels.get("app.kubernetes.io/component") == "gpu-operator" \
                or OPERATOR_POD.match(pod["metadata"]["name"]):
            found.append(pod)
    return found


@pytest.mark.rule("ADR-0002.operator-running")
def test_operator_pod_is_ready(cluster: Any, operator_namespace: str, evidence: Any) -> None:
    pods = _operator_pods(cluster.list("pods", namespace=operator_namespace))
    evidence.record("operator pods", [pod_summary(p) for p in pods])
    if not any(pod_ready(p) for p in pods):
        stories = [pod_story(cluster, p) for p in pods[:3]]
        evidence.record("operator pods not Ready (container states, logs, events)", [s.as_evidence() for s in stories])
        finding(f"{cluster.where}: no Ready gpu-operator pod in namespace {operator_namespace}: "
                + (" | ".join(s.summary() for s in stories) or "there is none (is the HelmChart installed?)"))


@pytest.mark.rule("ADR-0002.operator-running")
def test_clusterpolicy_exists_and_the_operator_found_gpu_nodes(cluster: Any, evidence: Any) -> None:
    # The operator's own faults: no ClusterPolicy, no status (never reconciled), NoGPUNodes / NFDLabelsMissing (these
    # also report state `ready`) or ReconcileFailed. OperandNotReady is an operand's problem: operator-components.
    policies = cluster.list("clusterpolicies")
    states = {p["metadata"]["name"]: clusterpolicy_readiness(p) for p in policies}
    evidence.record("ClusterPolicy status", {
        name: {"state": r.state, "reason": r.reason, "message": r.message, "reconciled": r.ready}
        for name, r in states.items()
    })
    require(policies, f"{cluster.where}: no ClusterPolicy (nvidia.com/v1): the operator has not created cluster-policy")
    faults = [
        f"ClusterPolicy {name} is {r.state or 'without state'} ({r.reason or 'no reason'}): {r.message}"
        for name, r in states.items() if r.operator_fault or r.state is None
    ]
    require(faults == [], (
        f"{cluster.where}: the GPU Operator itself is not working: {'; '.join(faults)} (NoGPUNodes/NFDLabelsMissing: NFD has not "
        "labelled the GPU node feature.node.kubernetes.io/pci-10de.present; ReconcileFailed: see the gpu-operator log; "
        "no state: never reconciled)"
    ))
