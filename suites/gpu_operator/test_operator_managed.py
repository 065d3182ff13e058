"""GPU Operator layer: no standalone device plugin or toolkit outside the operator (ADR 0002 §6-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require

STANDALONE_MARKS = ("k8s-device-plugin", "nvidia-device-plugin", "container-toolkit", "nvidia-container-runtime")


def _main_images(daemonset: dict[str, Any]) -> list[str]:
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c.get("image", "") for c in spec.get("containers") or []]


def _operator_owned(daemonset: dict[str, Any], namespace: str) -> bool:
    """Owned by a ClusterPolicy (the operator's own operands, wherever it runs), or labelled managed-by gpu-operator
    in the site's operator namespace."""
    meta = daemonset["metadata"]
    owners = meta.get("ownerReferences") or []
    managed = (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpu-operator"
    return any(o.get("kind") == "ClusterPolicy" for o in owners) or (meta.get("namespace") == namespace and managed)


@pytest.mark.rule("ADR-0002.operator-managed")
def test_no_standalone_device_plugin_or_toolkit(cluster: Any, operator_namespace: str, evidence: Any) -> None:
    standalone = []
    for ds in cluster.list("daemonsets"):
        name, images = ds["metadata"]["name"], _main_images(ds)
        marked = any(m in name for m in STANDALONE_MARKS) or any(m in i for i in images for m in STANDALONE_MARKS)
        if marked and not _operator_owned(ds, operator_namespace):
            standalone.append(f"{ds['metadata'].get('namespace')}/{name} ({', '.join(images)})")
    evidence.record("standalone NVIDIA DaemonSets", standalone)
    require(standalone == [], (
        f"{cluster.where}: device plugin/toolkit DaemonSets outside the GPU Operator (ADR 0002 §6-1 keeps them in the "
        f"operator): {'; '.join(standalone)}"
    ))
