"""RKE2 layer: every inventory host is a Ready Node (ADR 0001 §5-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.kube.objects import node_condition
from pytest_dgxspark.site.model import HostSpec


@pytest.mark.rule("ADR-0001.node-ready")
def test_node_is_ready(host_spec: HostSpec, host_node: dict[str, Any], evidence: Any) -> None:
    ready = node_condition(host_node, "Ready") or {}
    evidence.record("Ready condition", ready)
    evidence.record("unschedulable", (host_node.get("spec") or {}).get("unschedulable", False))
    require(ready.get("status") == "True", (
        f"{host_spec.where}: Node {host_node['metadata']['name']} is not Ready: "
        f"{ready.get('reason')}: {ready.get('message')}"
    ))
