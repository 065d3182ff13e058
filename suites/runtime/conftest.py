"""Fixtures of the runtime layer: what the running kubelet is wired to (probes/containerd.py reads it)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.probes.containerd import KubeletInfo, read_kubelet


@pytest.fixture
def kubelet(host_target: Any, evidence: Any) -> KubeletInfo:
    """The kubelet of the current host, read from its process and config files (effective, not rendered config)."""
    info = read_kubelet(host_target)
    evidence.record("kubelet", {"running": info.running, "cmdline": info.cmdline, "config_files": list(info.config_files),
                                "containerRuntimeEndpoint": info.endpoint})
    return info
