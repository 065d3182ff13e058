"""Connections of one run: hosts over SSH (testinfra, one ControlMaster each) and clusters, with caches."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from pytest_dgxspark.checking import TargetError, timed_out
from pytest_dgxspark.targets.cluster import Cluster, ClusterUnreachable, transient, with_retries
from pytest_dgxspark.targets.ssh import HostTarget, HostUnreachable

__all__ = [
    "Cluster",
    "ClusterUnreachable",
    "Connections",
    "HostTarget",
    "HostUnreachable",
    "connections_key",
    "timed_out",
    "transient",
    "with_retries",
]


_MAX_CONTROL_BASE = 60


class Connections:
    """Everything one run connects to, built lazily from Targets, closed at session end.

    It opens and closes; what runs over a connection once it is open (the gathering step, provenance) is called by
    the fixtures. `settings` are the probes' settings, carried for the fixtures; the transport reads only their
    `command_timeout_s` (the limit of a command whose caller names none)."""

    def __init__(self, targets: Any, settings: Any) -> None:
        self.targets = targets
        self.probe_settings = settings
        # a ControlPath must fit a unix socket name (108 bytes with ssh's random suffix): fall back to /tmp
        base = tempfile.gettempdir()
        self._control_dir = tempfile.mkdtemp(prefix="dgxs-ssh-", dir=base if len(base) <= _MAX_CONTROL_BASE else "/tmp")
        self.hosts: dict[str, HostTarget] = {
            spec.name: HostTarget(spec, self._control_dir, i) for i, spec in enumerate(targets.hosts)
        }
        for host in self.hosts.values():  # --dgxspark-command-timeout: a check's command that names no limit
            host.command_timeout_s = self.probe_settings.command_timeout_s
        self._cluster: Cluster | None = None
        self._management: Cluster | None = None
        self._opened = False

    def host(self, spec: Any) -> HostTarget:
        """The HostTarget of an inventory host."""
        return self.hosts[spec.name]

    @property
    def opened(self) -> bool:
        """Whether open_all has run (the hosts are connected and gathered, or known unreachable)."""
        return self._opened

    def open_all(self, after_connect: Callable[[HostTarget], Any] | None = None) -> list[Any]:
        """Open every host's SSH master at once (16 hosts cost one connect time, not sixteen), and run
        `after_connect` on each host as soon as its master is open (the fixtures pass the gathering step); once per
        run. Returns what `after_connect` gave for each host that opened."""
        if self._opened:
            return []
        self._opened = True

        def open_one(target: HostTarget) -> Any:
            try:
                target.connect()
            except TargetError:
                return None  # marked unreachable: each check of this host reports it as an error
            return after_connect(target) if after_connect is not None else target

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(self.hosts)))) as pool:
            return [g for g in pool.map(open_one, self.hosts.values()) if g is not None]

    @property
    def cluster(self) -> Cluster:
        """The RKE2 cluster (the site's context of the kubeconfig)."""
        if self._cluster is None:
            if self.targets.kubeconfig is None:
                raise ClusterUnreachable(
                    f"no kubeconfig for context {self.targets.context!r}: give the site's kubeconfig (sites/<site>/rke2/"
                    "kubeconfig.yml, KUBECONFIG or ~/.kube/config) or run with --testbed",
                    target=f"api:{self.targets.context}",
                )
            self._cluster = Cluster(self.targets.kubeconfig, self.targets.context)
            self._cluster.management = self.management
        return self._cluster

    @property
    def management(self) -> Cluster | None:
        """The Argo CD management cluster, or None when the site names none."""
        context = getattr(self.targets, "management_context", None)
        if not context:
            return None
        if self._management is None:
            self._management = Cluster(self.targets.kubeconfig, context)
            self._management.is_management = True
        return self._management

    def cluster_if_open(self) -> Cluster | None:
        """The cluster when it was already used in this run, else None (never connects)."""
        return self._cluster

    def close(self) -> None:
        """Close every SSH master connection (all at once, as they were opened) and remove the control directory."""
        def close_one(target: HostTarget) -> None:
            try:
                target.close()
            except (OSError, subprocess.SubprocessError):
                pass

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(self.hosts)))) as pool:
            list(pool.map(close_one, self.hosts.values()))
        shutil.rmtree(self._control_dir, ignore_errors=True)


connections_key = pytest.StashKey[Connections]()
