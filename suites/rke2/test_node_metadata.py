"""RKE2 layer: the live Node's labels and taints are the site's (ADR 0001 §5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.kube.objects import node_taints, parse_labels, parse_taint
from pytest_dgxspark.site.model import HostSpec

OPERATOR_OWNED_LABELS = ("nvidia.com/gpu.present",)
SYSTEM_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "node.cilium.io/", "ToBeDeletedByClusterAutoscaler")


@pytest.mark.rule("ADR-0001.node-metadata")
def test_node_labels_are_the_site_labels(
    host_spec: HostSpec, host_node: dict[str, Any], node_metadata: Any, evidence: Any
) -> None:
    live = host_node["metadata"].get("labels") or {}
    wanted = parse_labels(node_metadata.labels)
    wrong = {}
    for key, value in wanted.items():
        if live.get(key) == value:
            continue
        if key in OPERATOR_OWNED_LABELS:
            evidence.warn(f"{key} is owned by the GPU Operator (set from NFD labels); vars ask {value!r}, live {live.get(key)!r}")
            continue
        wrong[key] = {"vars": value, "live": live.get(key)}
    for key in OPERATOR_OWNED_LABELS:
        if key in wanted:
            evidence.warn(f"{node_metadata.labels_from} sets operator-owned label {key}; remove it")
    evidence.record("labels", {"vars": wanted, "live": {k: live.get(k) for k in wanted}})
    require(wrong == {}, (
        f"{host_spec.where}: Node {host_node['metadata']['name']} labels differ from {node_metadata.labels_from}: "
        + ", ".join(f"{k} is {v['live'] if v['live'] is not None else 'unset'}, wants {v['vars']}" for k, v in wrong.items())
    ))


@pytest.mark.rule("ADR-0001.node-metadata")
def test_node_taints_are_the_site_taints(
    host_spec: HostSpec, host_node: dict[str, Any], node_metadata: Any, evidence: Any
) -> None:
    live = sorted(t for t in node_taints(host_node) if not t.key.startswith(SYSTEM_TAINT_PREFIXES))
    wanted = sorted(parse_taint(t) for t in node_metadata.taints)
    evidence.record("taints", {"vars": [t.__dict__ for t in wanted], "live": [t.__dict__ for t in live]})
    require(live == wanted, (
        f"{host_spec.where}: Node {host_node['metadata']['name']} taints "
        f"{', '.join(f'{t.key}={t.value}:{t.effect}' for t in live) or 'none'} differ from {node_metadata.taints_from} "
        f"{', '.join(node_metadata.taints) or 'none'} (taints are set at registration only; "
        "use kubectl taint to converge)"
    ))
