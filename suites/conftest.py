"""Shared fixtures of the conformance checks: GPU nodes, the operator namespace, node lookups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_dgxspark.data.values import dig
from pytest_dgxspark.site.model import helm_values


@dataclass(frozen=True)
class GpuNode:
    """A GPU host of the inventory and its Node object (None when the cluster has no such Node)."""

    spec: Any
    node: dict[str, Any] | None

    @property
    def name(self) -> str:
        return self.node["metadata"]["name"] if self.node else self.spec.name

    @property
    def labels(self) -> dict[str, str]:
        return (self.node or {}).get("metadata", {}).get("labels") or {}

    @property
    def capacity(self) -> dict[str, str]:
        return (self.node or {}).get("status", {}).get("capacity") or {}

    @property
    def allocatable(self) -> dict[str, str]:
        return (self.node or {}).get("status", {}).get("allocatable") or {}


@pytest.fixture(scope="session")
def gpu_nodes(cluster: Any, targets: Any) -> list[GpuNode]:
    """The Nodes of the inventory's GPU hosts (matched by name, then by InternalIP)."""
    return [GpuNode(spec, cluster.node_for(spec)) for spec in targets.hosts if spec.gpu]


@pytest.fixture(scope="session")
def site_values(site: Any) -> dict[str, Any]:
    """The site HelmChart's valuesContent as a mapping."""
    return helm_values(site.helmchart)


@pytest.fixture(scope="session")
def operator_namespace(site: Any) -> str:
    """The namespace the GPU Operator is installed in (the site HelmChart's targetNamespace)."""
    return dig(site.helmchart, "spec.targetNamespace") or "gpu-operator"


@pytest.fixture
def host_node(host_spec: Any, cluster: Any) -> dict[str, Any]:
    """The Node of the current host (no SSH needed); fails naming the host and the cluster's Nodes when there is none."""
    spec = host_spec
    node = cluster.node_for(spec)
    if node is None:
        names = [n["metadata"]["name"] for n in cluster.nodes]
        pytest.fail(
            f"{spec.label}: no Node named {spec.name!r} or with InternalIP {spec.address} in {cluster.where}; "
            f"the cluster's Nodes are {', '.join(names) or 'none'}",
            pytrace=False,
        )
    return node
