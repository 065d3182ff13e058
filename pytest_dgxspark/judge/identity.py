"""Whether the targets are a testbed, from the targets themselves (API header, Node annotation, host file)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_dgxspark.probes.system import IDENTITY as HOST_COMMAND  # the host file, gathered with the probes
from pytest_dgxspark.probes.system import IDENTITY_FILE as HOST_FILE

# What a testbed says on every interface (docs/internals.md "Self-identification"); a real site never does.
API_HEADER = "X-Dgxspark-Testbed"
NODE_ANNOTATION = "testbed.dgxspark.io/scenario"

identity_key = pytest.StashKey["TargetIdentity"]()


@dataclass
class TargetIdentity:
    """Every sign, seen on a target, that it is simulated; empty for a real site."""

    signs: list[str] = field(default_factory=list)
    _hosts_seen: set[str] = field(default_factory=set)
    _clusters_seen: set[str] = field(default_factory=set)

    @property
    def simulated(self) -> bool:
        return bool(self.signs)

    def add(self, sign: str) -> None:
        if sign not in self.signs:
            self.signs.append(sign)


def of(config: pytest.Config) -> TargetIdentity:
    if identity_key not in config.stash:
        config.stash[identity_key] = TargetIdentity()
    return config.stash[identity_key]


def observe_host(config: pytest.Config, target: Any) -> None:
    """Read the host's /etc/dgxspark-testbed once (over the connection already open; a missing file is a real host)."""
    identity = of(config)
    if target.name in identity._hosts_seen or not getattr(target, "connected", False):
        return
    identity._hosts_seen.add(target.name)
    try:
        result = target.cached(HOST_COMMAND, timeout=15)
    except Exception:  # noqa: BLE001 - an unreachable host is reported by its checks, not here
        return
    scenario = (result.stdout or "").strip().splitlines()[0] if result.rc == 0 and (result.stdout or "").strip() else ""
    if scenario:
        identity.add(f"host {target.name}: {HOST_FILE} names testbed scenario {scenario!r}")


def observe_cluster(config: pytest.Config, cluster: Any) -> None:
    """One GET /version read for the testbed's header (once per context; a failure says nothing either way)."""
    identity = of(config)
    if cluster.context in identity._clusters_seen:
        return
    identity._clusters_seen.add(cluster.context)
    try:
        api = cluster.api
        method, url, headers, _, _ = api.param_serialize("GET", "/version", header_params={"Accept": "application/json"},
                                                         auth_settings=["BearerToken"])
        response = api.call_api(method, url, header_params=headers, _request_timeout=(5, 15))
        response.read()
        value = response.getheader(API_HEADER)
    except Exception:  # noqa: BLE001 - the API's own checks report an unreachable API
        return
    if value:
        identity.add(f"Kubernetes API of context {cluster.context!r}: answers with {API_HEADER}: {value}")


def observe_nodes(config: pytest.Config, cluster: Any) -> None:
    """Nodes already listed in this run (the cache only: never an API call) carrying the testbed's annotation."""
    nodes = cluster.cached("nodes") if cluster is not None else None
    for node in nodes or []:
        scenario = ((node.get("metadata") or {}).get("annotations") or {}).get(NODE_ANNOTATION)
        if scenario:
            name = (node.get("metadata") or {}).get("name")
            of(config).add(f"Node {name}: annotation {NODE_ANNOTATION}: {scenario}")


def signs(config: pytest.Config, connections: Any = None) -> list[str]:
    """Every sign of a testbed seen so far (Node annotations from the cache included)."""
    if connections is not None:
        observe_nodes(config, connections.cluster_if_open())
    return list(of(config).signs)


def simulation_signs(config: pytest.Config, targets: Any) -> list[str]:
    """Why this run is SIMULATED: --testbed, and every sign the targets gave (API header, Node annotation, host file)."""
    from pytest_dgxspark.targets.connections import connections_key

    given = [f"--testbed {targets.testbed_ref}"] if targets.simulated else []
    return given + signs(config, config.stash.get(connections_key, None))
