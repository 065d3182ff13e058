"""Fixtures of the GPU Operator layer: operand pods by DaemonSet and node."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.kube.objects import pod_ready


class OperatorPods:
    """Pods of the operator namespace, indexed by owning DaemonSet and node."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    def of_daemonset(self, name: str, node: str | None = None) -> list[dict[str, Any]]:
        found = []
        for pod in self.pods:
            owners = (pod["metadata"].get("ownerReferences") or [])
            # only the DaemonSet's own pods: a look-alike pod without owner is not the operator's component
            owned = any(o.get("kind") == "DaemonSet" and o.get("name") == name for o in owners)
            if owned and (node is None or (pod.get("spec") or {}).get("nodeName") == node):
                found.append(pod)
        return found

    def named(self, prefix: str, node: str | None = None) -> list[dict[str, Any]]:
        return [
            p for p in self.pods
            if p["metadata"]["name"].startswith(prefix) and (node is None or (p.get("spec") or {}).get("nodeName") == node)
        ]

    @staticmethod
    def ready(pods: list[dict[str, Any]]) -> bool:
        return bool(pods) and any(pod_ready(p) for p in pods)


@pytest.fixture
def operator_pods(cluster: Any, operator_namespace: str) -> OperatorPods:
    """The pods of the GPU Operator's namespace."""
    return OperatorPods(cluster.list("pods", namespace=operator_namespace))
