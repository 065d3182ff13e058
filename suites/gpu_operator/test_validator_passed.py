"""GPU Operator layer: the operator's validator passed on every GPU node (ADR 0002 §5-5)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.kube.objects import pod_summary
from pytest_dgxspark.kube.podstate import in_words, pod_story


@pytest.mark.rule("ADR-0002.validator-passed")
def test_validator_ready_and_cuda_validation_succeeded(gpu_nodes: list[Any], operator_pods: Any, cluster: Any, evidence: Any) -> None:
    problems: list[str] = []
    seen: dict[str, Any] = {}
    stories: list[dict[str, Any]] = []
    for gpu in gpu_nodes:
        validator = operator_pods.of_daemonset("nvidia-operator-validator", gpu.name)
        cuda = operator_pods.named("nvidia-cuda-validator-", gpu.name)
        seen[gpu.name] = {"validator": [pod_summary(p) for p in validator], "cuda-validator": [pod_summary(p) for p in cuda]}
        if gpu.node is None:
            problems.append(f"{gpu.spec.name} has no Node")
        if not validator:
            problems.append(f"on {gpu.name}: no nvidia-operator-validator pod")
        elif not operator_pods.ready(validator):
            for pod in validator:
                story = pod_story(cluster, pod)
                stories.append(story.as_evidence())
                problems.append(f"on {gpu.name}: {story.summary()}")
        if not any((p.get("status") or {}).get("phase") == "Succeeded" for p in cuda):
            problems.append(f"on {gpu.name}: no Succeeded nvidia-cuda-validator pod ({in_words(cuda)})")
    evidence.record("validators", seen)
    evidence.record("validator pods not Ready (container states, logs, events)", stories)
    require(gpu_nodes, "the inventory names no GPU host (dgxspark_gpu: true)")
    require(problems == [], f"{cluster.where}: GPU Operator validation did not pass: " + " | ".join(problems))
