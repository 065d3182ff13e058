"""Fixtures of the RKE2 layer: the effective RKE2 config of a host and the Node metadata it must give."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytest_dgxspark.checking import completed
from pytest_dgxspark.probes.rke2 import CONFIG_FILE, Rke2Config, Rke2Host


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
def node_metadata(host_spec: Any, site: Any, evidence: Any) -> ExpectedMetadata:
    """The Node labels and taints the current host must have (its own host vars, else the site's for GPU hosts)."""
    expected = expected_metadata(host_spec, site)
    evidence.record("expected node metadata", {"labels": list(expected.labels), "labels from": expected.labels_from,
                                               "taints": list(expected.taints), "taints from": expected.taints_from})
    return expected


@pytest.fixture
def rke2_config(host_target: Any, rke2_probe: Rke2Host, evidence: Any) -> Rke2Config:
    """The effective RKE2 config of the current host, as RKE2 reads it (last value wins, key+ appends)."""
    base = completed(rke2_probe.config_file, host_target)
    dropins = completed(rke2_probe.dropins, host_target)
    evidence.record(CONFIG_FILE, {"exit_status": base.rc, "content": base.stdout, "stderr": base.stderr})
    evidence.record("config.yaml.d", dropins.stdout)
    found = rke2_probe.effective()
    if found.error is None:
        evidence.record("effective config", found.merged)
    return found
