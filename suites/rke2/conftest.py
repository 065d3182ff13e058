"""Fixtures of the RKE2 layer: the effective RKE2 config of a host."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from pytest_dgxspark.parsing import merge_rke2_config

CONFIG = "/etc/rancher/rke2/config.yaml"
DROPINS = (
    "for f in $(ls -1 /etc/rancher/rke2/config.yaml.d/*.yaml 2>/dev/null | LC_ALL=C sort); "
    "do echo \"### $f\"; cat \"$f\"; done; true"
)


@dataclass(frozen=True)
class Rke2Config:
    """config.yaml merged with config.yaml.d/*.yaml; `error` says why it could not be read."""

    merged: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@pytest.fixture
def rke2_config(host_target: Any, evidence: Any) -> Rke2Config:
    """The effective RKE2 config of the current host, as RKE2 reads it (last value wins, key+ appends)."""
    base = host_target.cached(f"cat {CONFIG}")
    dropins = host_target.cached(DROPINS)
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
