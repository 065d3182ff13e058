"""GPU Operator layer: the operator's validator passed on every GPU node (ADR 0002 §5-5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.parsing import pod_summary
from pytest_dgxspark.checking import require


@pytest.mark.rule("ADR-0002.validator-passed")
def test_validator_ready_and_cuda_validation_succeeded(gpu_nodes: list[Any], operator_pods: Any, cluster: Any, evidence: Any) -> None:
    problems: dict[str, list[str]] = {}
    seen: dict[str, Any] = {}
    for gpu in gpu_nodes:
        validator = operator_pods.of_daemonset("nvidia-operator-validator", gpu.name)
        cuda = operator_pods.named("nvidia-cuda-validator-", gpu.name)
        seen[gpu.name] = {"validator": [pod_summary(p) for p in validator], "cuda-validator": [pod_summary(p) for p in cuda]}
        if gpu.node is None:
            problems.setdefault(gpu.spec.name, []).append("no Node for this GPU host")
        if not operator_pods.ready(validator):
            problems.setdefault(gpu.name, []).append(f"nvidia-operator-validator not Ready: {seen[gpu.name]['validator'] or 'no pod'}")
        if not any((p.get("status") or {}).get("phase") == "Succeeded" for p in cuda):
            problems.setdefault(gpu.name, []).append(f"no Succeeded nvidia-cuda-validator pod: {seen[gpu.name]['cuda-validator'] or 'none'}")
    evidence.record("validators", seen)
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true)")
    require(problems == {}, f"{cluster.where}: GPU Operator validation did not pass: {problems}")
