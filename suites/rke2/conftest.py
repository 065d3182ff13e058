"""Fixtures of the RKE2 layer: the effective RKE2 config of a host and the Node metadata it must give."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from pytest_dgxspark.parsing import merge_rke2_config
from pytest_dgxspark.checking import completed

CONFIG = "/etc/rancher/rke2/config.yaml"
DROPINS = (
    "for f in $(ls -1 /etc/rancher/rke2/config.yaml.d/*.yaml 2>/dev/null | LC_ALL=C sort); "
    "do echo \"### $f\"; cat \"$f\"; done; true"
)


@dataclass(frozen=True)
class ExpectedMetadata:
    """The labels and taints one host's Node must carry, and where they come from (for messages)."""

    labels: tuple[str, ...]
    taints: tuple[str, ...]
    labels_from: str
    taints_from: str


def expected_metadata(spec: Any, site: Any) -> ExpectedMetadata:
    """A host's own rke2_node_labels/rke2_node_taints (inventory host vars) win; else the site's for GPU hosts (the
    site vars describe the GPU target, rke2_target_name), else none: a non-GPU agent is not the GPU target."""
    found = {}
    for key in ("rke2_node_labels", "rke2_node_taints"):
        own = (spec.vars or {}).get(key)
        if own is not None:
            found[key] = (tuple(str(v) for v in own), f"inventory host var {key} of {spec.name}")
        elif spec.gpu:
            found[key] = (tuple(str(v) for v in site.vars.get(key) or []), f"{site.root}/rke2/vars.yml {key}")
        else:
            found[key] = ((), f"none ({spec.name} is not a GPU host and sets no host var {key})")
    return ExpectedMetadata(found["rke2_node_labels"][0], found["rke2_node_taints"][0],
                            found["rke2_node_labels"][1], found["rke2_node_taints"][1])


@pytest.fixture
def node_metadata(host_target: Any, site: Any, evidence: Any) -> ExpectedMetadata:
    """The Node labels and taints the current host must have (its own host vars, else the site's for GPU hosts)."""
    expected = expected_metadata(host_target.spec, site)
    evidence.record("expected node metadata", {"labels": list(expected.labels), "labels from": expected.labels_from,
                                               "taints": list(expected.taints), "taints from": expected.taints_from})
    return expected


@dataclass(frozen=True)
class Rke2Config:
    """config.yaml merged with config.yaml.d/*.yaml; `error` says why it could not be read."""

    merged: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@pytest.fixture
def rke2_config(host_target: Any, evidence: Any) -> Rke2Config:
    """The effective RKE2 config of the current host, as RKE2 reads it (last value wins, key+ appends)."""
    base = completed(host_target.cached(f"cat {CONFIG}"), host_target)
    dropins = completed(host_target.cached(DROPINS), host_target)
    evidence.record(CONFIG, {"exit_status": base.rc, "content": base.stdout, "stderr": base.stderr})
    evidence.record("config.yaml.d", dropins.stdout)
    if base.rc != 0:
        return Rke2Config(error=f"{host_target.where}: cannot read {CONFIG}: {base.stderr.strip() or base.rc}")
    try:
        documents = [yaml.safe_load(base.stdout) or {}]
        for chunk in (c for c in dropins.stdout.split("### ") if c.strip()):
            _, _, body = chunk.partition("\n")
            documents.append(yaml.safe_load(body) or {})
    except yaml.YAMLError as error:
        return Rke2Config(error=f"{host_target.where}: RKE2 config is not valid YAML: {error}")
    if not all(isinstance(d, dict) for d in documents):
        return Rke2Config(error=f"{host_target.where}: RKE2 config files must be YAML mappings")
    merged = merge_rke2_config(documents)
    evidence.record("effective config", merged)
    return Rke2Config(merged=merged)
