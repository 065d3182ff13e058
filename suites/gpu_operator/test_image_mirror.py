"""GPU Operator layer (air-gapped sites): every GPU Operator image comes from the site's mirror (ADR 0002 §7)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable


@pytest.mark.rule("ADR-0002.image-mirror")
def test_operator_images_come_from_the_mirror(site: Any, cluster: Any, operator_namespace: str, evidence: Any) -> None:
    if not site.airgap and not site.mirror_registry:
        not_applicable(f"{site.root}/rke2/vars.yml: the site is not air-gapped (airgap: false, no mirror_registry)")
    mirror = str(site.mirror_registry or "").rstrip("/")
    assert mirror, f"{site.root}/rke2/vars.yml: airgap is true but no mirror_registry names the mirror"
    images: dict[str, list[str]] = {}
    for pod in cluster.list("pods", namespace=operator_namespace):
        spec = pod.get("spec") or {}
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            images.setdefault(container.get("image", ""), []).append(pod["metadata"]["name"])
    evidence.record("images", sorted(images))
    outside = sorted(image for image in images if not image.startswith(mirror + "/"))
    assert images, f"{cluster.where}: no pods in {operator_namespace} to check"
    assert outside == [], f"{cluster.where}: GPU Operator images not from the mirror {mirror}: {outside}"
