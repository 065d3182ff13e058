"""Fixtures of the runtime layer: what the running kubelet is wired to."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_dgxspark.checking import completed, unreadable
from pytest_dgxspark.parsing import kubelet_runtime_endpoint, split_cmdline

DEFAULT_CONFIG_DIR = "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d"
KUBELET_CMDLINE = "pid=$(pgrep -o -x kubelet) && cat /proc/$pid/cmdline"
# kubelet --container-runtime-endpoint default (Kubernetes >= 1.27): what a kubelet uses when nothing sets it
KUBELET_DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"


@dataclass(frozen=True)
class KubeletInfo:
    """The running kubelet's command line, its config files and the runtime endpoint they give."""

    running: bool
    cmdline: str
    config_files: tuple[str, ...]
    endpoint: str | None

    @property
    def effective_endpoint(self) -> str:
        """The endpoint the running kubelet dials: its flag or config, else the kubelet's own default."""
        return self.endpoint or KUBELET_DEFAULT_ENDPOINT

    def require_running(self, where: str) -> None:
        """Without a kubelet process its runtime endpoint cannot be observed: that is no finding, the check errors."""
        if not self.running:
            unreadable(f"{where}: no kubelet process (pgrep -x kubelet), so the runtime endpoint the kubelet uses "
                       "cannot be observed; runtime-rke2-containerd judges the missing kubelet")


def _flag(cmdline: str, name: str) -> str | None:
    match = re.search(rf"--{name}(?:=|\s+)(\S+)", cmdline)
    return match.group(1).strip("'\"") if match else None


@pytest.fixture
def kubelet(host_target: Any, evidence: Any) -> KubeletInfo:
    """The kubelet of the current host, read from its process and config files (effective, not rendered config)."""
    proc = completed(host_target.cached(KUBELET_CMDLINE), host_target)
    cmdline = split_cmdline(proc.stdout) if proc.rc == 0 else ""
    files = [f for f in (_flag(cmdline, "config"),) if f]
    config_dir = _flag(cmdline, "config-dir") or DEFAULT_CONFIG_DIR
    texts = []
    for path in files:
        texts.append(completed(host_target.cached(f"cat {shlex.quote(path)}"), host_target).stdout)
    listing = completed(host_target.cached(f"ls -1 {shlex.quote(config_dir)}/*.conf 2>/dev/null | LC_ALL=C sort; true"), host_target)
    dropins = [line.strip() for line in listing.stdout.splitlines() if line.strip()]
    for path in dropins:
        texts.append(host_target.cached(f"cat {shlex.quote(path)}").stdout)
    info = KubeletInfo(proc.rc == 0 and bool(cmdline), cmdline, tuple(files + dropins), kubelet_runtime_endpoint(texts, cmdline))
    evidence.record("kubelet", {"running": info.running, "cmdline": cmdline, "config_files": list(info.config_files),
                                "containerRuntimeEndpoint": info.endpoint})
    return info
