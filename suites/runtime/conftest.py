"""Fixtures of the runtime layer: what the running kubelet is wired to (probes/containerd.py reads it)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.probes.containerd import KubeletInfo, Runtime


@pytest.fixture
def kubelet(containerd_probe: Runtime, evidence: Any) -> KubeletInfo:
    """The kubelet of the current host, read from its process and config files (effective, not rendered config)."""
    info = containerd_probe.kubelet
    evidence.record("kubelet", {"running": info.running, "cmdline": info.cmdline, "config_files": list(info.config_files),
                                "containerRuntimeEndpoint": info.endpoint})
    return info
