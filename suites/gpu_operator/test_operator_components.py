"""GPU Operator layer: every operand has a Ready pod on every GPU node and the ClusterPolicy is reconciled (ADR 0002 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.data.values import dig
from pytest_dgxspark.kube.objects import clusterpolicy_readiness, pod_summary
from pytest_dgxspark.kube.podstate import pod_story

# DaemonSet -> the chart value that can disable it (None: always deployed)
COMPONENTS = {
    "nvidia-container-toolkit-daemonset": "toolkit.enabled",
    "nvidia-device-plugin-daemonset": "devicePlugin.enabled",
    "gpu-feature-discovery": "gfd.enabled",
    "nvidia-dcgm-exporter": "dcgmExporter.enabled",
}
# The operator's validation (DaemonSet nvidia-operator-validator, ClusterPolicy state-operator-validation) is the
# subject of ADR-0002.validator-passed: judged there, so that a failed validation over Ready operands is its own cause.
VALIDATION_STATE = "state-operator-validation"


def _policy_states_not_ready(cluster: Any) -> dict[str, list[str]]:
    """ClusterPolicy name -> the operand states its message says are not ready."""
    found = {}
    for policy in cluster.list("clusterpolicies"):
        readiness = clusterpolicy_readiness(policy)
        states = [s for s in readiness.states_not_ready if s != VALIDATION_STATE]
        if not readiness.ready and (states or not readiness.states_not_ready):
            found[policy["metadata"]["name"]] = states or [f"{readiness.reason}: {readiness.message}"]
    return found


@pytest.mark.rule("ADR-0002.operator-components")
def test_operands_are_ready_on_every_gpu_node(
    gpu_nodes: list[Any], operator_pods: Any, operator_namespace: str, site_values: dict[str, Any], evidence: Any,
    cluster: Any,
) -> None:
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true)")
    missing_nodes = [g.spec.name for g in gpu_nodes if g.node is None]
    require(missing_nodes == [], f"{cluster.where}: GPU hosts without a Node: {', '.join(missing_nodes)}")
    wanted = [ds for ds, key in COMPONENTS.items() if key is None or dig(site_values, key, True) is not False]
    problems: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    stories: list[dict[str, Any]] = []
    for gpu in gpu_nodes:
        for ds in wanted:
            pods = operator_pods.of_daemonset(ds, gpu.name)
            seen.setdefault(gpu.name, {})[ds] = [pod_summary(p) for p in pods]
            if not pods:
                problems.append(f"on {gpu.name}: no {ds} pod")
            elif not operator_pods.ready(pods):
                events = cluster.list("events", namespace=operator_namespace)
                for pod in pods:
                    story = pod_story(cluster, pod, events)
                    stories.append(story.as_evidence())
                    problems.append(f"on {gpu.name}: {story.summary()}")
    policy_states = _policy_states_not_ready(cluster)
    evidence.record("operands per GPU node", seen)
    evidence.record("operand pods not Ready (container states, logs current and previous, events)", stories)
    evidence.record("ClusterPolicy states not ready", policy_states)
    require(problems == [], (
        f"{cluster.where}: GPU Operator operands not Ready in {operator_namespace}: " + " | ".join(problems)
        + "".join(f"; ClusterPolicy {name} says not ready: {', '.join(states)}" for name, states in policy_states.items())
    ))


@pytest.mark.rule("ADR-0002.operator-components")
def test_clusterpolicy_is_reconciled(cluster: Any, evidence: Any) -> None:
    policies = cluster.list("clusterpolicies")
    states = {p["metadata"]["name"]: clusterpolicy_readiness(p) for p in policies}
    evidence.record("ClusterPolicy status", {name: {"state": r.state, "reason": r.reason, "message": r.message}
                                             for name, r in states.items()})
    require(policies, f"{cluster.where}: no ClusterPolicy (nvidia.com/v1) to say whether the operands are ready")
    only_validation = {name for name, r in states.items() if not r.ready and set(r.states_not_ready) == {VALIDATION_STATE}}
    if only_validation:
        evidence.record("ClusterPolicy states left to validator-passed", {name: [VALIDATION_STATE] for name in only_validation})
    not_ready = [
        f"ClusterPolicy {name} is {r.state or 'without state'} ({r.reason or 'no reason'})"
        + (f", operands not ready: {', '.join(s for s in r.states_not_ready if s != VALIDATION_STATE)}"
           if r.states_not_ready else f": {r.message}")
        for name, r in states.items() if not r.ready and name not in only_validation
    ]
    require(not_ready == [], (
        f"{cluster.where}: " + "; ".join(not_ready) + " (the operator's success is 'ClusterPolicy is ready as all "
        "resources have been successfully reconciled')"
    ))
