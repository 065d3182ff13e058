"""Device-plugin layer: GPU nodes carry the nvidia.com/* labels of GFD and the operator (ADR 0002 §5-5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require

# NFD's PCI labels for NVIDIA (vendor 10de) the GPU Operator reads (controllers/state_manager.go)
NFD_NVIDIA_PCI = ("feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/pci-0302_10de.present",
                  "feature.node.kubernetes.io/pci-0300_10de.present")


@pytest.mark.rule("ADR-0002.node-gpu-labels")
def test_gpu_nodes_carry_nvidia_labels(gpu_nodes: list[Any], cluster: Any, evidence: Any) -> None:
    problems: dict[str, list[str]] = {}
    for gpu in gpu_nodes:
        labels = gpu.labels
        evidence.record(f"{gpu.name} nvidia.com labels", {k: v for k, v in labels.items() if k.startswith("nvidia.com/")})
        found = problems.setdefault(gpu.name, [])
        if gpu.node is None:
            found.append("no Node for this GPU host")
        if labels.get("nvidia.com/gpu.present") != "true":
            found.append(f"nvidia.com/gpu.present is {labels.get('nvidia.com/gpu.present')!r} (the operator sets it from NFD PCI labels)")
        # gpu.present alone proves little when the site also sets it through RKE2 (ADR 0001's label list): the
        # operator derives it from node feature discovery's NVIDIA PCI label, which must be there too.
        nfd = [k for k in NFD_NVIDIA_PCI if labels.get(k) == "true"]
        if not nfd:
            found.append(f"no NFD NVIDIA PCI label ({' / '.join(NFD_NVIDIA_PCI)}): node feature discovery has not "
                         "seen the GPU, so nvidia.com/gpu.present is not the operator's")
        product = labels.get("nvidia.com/gpu.product")
        if not product:
            found.append("no nvidia.com/gpu.product label (GFD)")
        expected = gpu.spec.vars.get("dgxspark_gpu_product")
        # with time-slicing (renameByDefault false) GFD appends -SHARED to the product
        if product and product.endswith("-SHARED"):
            evidence.record(f"{gpu.name} time-slicing", f"nvidia.com/gpu.product {product!r} carries -SHARED")
            product = product.removesuffix("-SHARED")
        if product and expected and product != str(expected).replace(" ", "-"):
            found.append(f"nvidia.com/gpu.product is {product!r}, the inventory says {expected!r}")
        count = labels.get("nvidia.com/gpu.count", "")
        if not count.isdigit() or int(count) < 1:
            found.append(f"nvidia.com/gpu.count is {count!r}, expected a whole number >= 1")
        if "nvidia.com/gpu.memory" not in labels:
            evidence.record(f"{gpu.name} gpu.memory", "absent: expected on unified-memory GPUs such as GB10")
        if not found:
            del problems[gpu.name]
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true)")
    require(problems == {}, f"{cluster.where}: GPU node labels missing or wrong: " + " | ".join(
        f"on {node}: " + "; ".join(found) for node, found in problems.items()))
