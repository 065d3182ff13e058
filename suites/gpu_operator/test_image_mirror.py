"""GPU Operator layer (air-gapped sites): every GPU Operator image comes from the site's mirror (ADR 0002 §7)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.data.values import image_registry
from pytest_dgxspark.data.yamlload import loads
from pytest_dgxspark.probes import rke2
from pytest_dgxspark.probes.rke2 import REGISTRIES_FILE as REGISTRIES_YAML


def _mirrored_registries(text: str, mirror_host: str, where: str) -> set[str]:
    """Registries that RKE2's registries.yaml sends to the mirror (`mirrors: {<registry>: {endpoint: [...]}}`)."""
    try:
        doc = loads(text, f"{where}: {REGISTRIES_YAML}") or {}
    except ValueError as error:
        unreadable(f"{where}: {REGISTRIES_YAML} is not valid YAML, so where containerd pulls from cannot be read: "
                   f"{str(error).splitlines()[0]}")
    found = set()
    for registry, entry in ((doc.get("mirrors") or {}) if isinstance(doc, dict) else {}).items():
        endpoints = [str(e) for e in ((entry or {}).get("endpoint") or [])]
        if any(e.split("://", 1)[-1].split("/", 1)[0] == mirror_host for e in endpoints):
            found.add(str(registry))
    return found


@pytest.mark.rule("ADR-0002.image-mirror")
def test_operator_images_come_from_the_mirror(
    site: Any, cluster: Any, operator_namespace: str, connections: Any, targets: Any, evidence: Any
) -> None:
    if not site.airgap and not site.mirror_registry:
        not_applicable(f"{site.root}/rke2/vars.yml: the site is not air-gapped (airgap: false, no mirror_registry)")
    mirror = str(site.mirror_registry or "").rstrip("/")
    require(mirror, f"{site.root}/rke2/vars.yml: airgap is true but no mirror_registry names the mirror")
    images: dict[str, list[str]] = {}
    for pod in cluster.list("pods", namespace=operator_namespace):
        spec = pod.get("spec") or {}
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            images.setdefault(container.get("image", ""), []).append(pod["metadata"]["name"])
    evidence.record("images", sorted(images))
    require(images, f"{cluster.where}: no pods in {operator_namespace} to check")
    mirror_host = mirror.split("/", 1)[0]
    # Either the images name the mirror, or every GPU node's containerd pulls their registry through it
    # (RKE2's registries.yaml mirrors: the pod spec keeps nvcr.io/..., containerd fetches from the mirror).
    per_node = []
    for spec in targets.hosts:
        if spec.gpu:
            target = connections.host(spec).connect()
            text = completed(rke2.read(target, connections.probe_settings).registries, target).stdout
            per_node.append(_mirrored_registries(text, mirror_host, target.where))
    via_registries_yaml = set.intersection(*per_node) if per_node else set()
    evidence.record(f"registries sent to {mirror_host} by {REGISTRIES_YAML} on every GPU node", sorted(via_registries_yaml))
    outside = sorted(
        image for image in images
        if not image.startswith(mirror + "/") and image_registry(image) not in via_registries_yaml | {mirror_host}
        and "*" not in via_registries_yaml
    )
    require(outside == [], f"{cluster.where}: GPU Operator images not from the mirror {mirror} (neither named so nor sent there by "
        f"{REGISTRIES_YAML}): {', '.join(outside)}")
