"""What a run checks: the site's hosts and kubeconfig context, or a testbed standing in for them."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.catalog.rules import reaching_owner
from pytest_dgxspark.site.model import HostSpec, Site, load_inventory

targets_key = pytest.StashKey["Targets"]()


@dataclass
class Targets:
    """The run's targets. Host names are known at configure time; addresses once the target is up."""

    site: Site
    host_names: tuple[str, ...]
    gpu_host_names: tuple[str, ...]
    context: str
    management_context: str | None
    simulated: bool
    testbed_ref: str | None = None
    hosts: tuple[HostSpec, ...] = ()
    kubeconfig: Path | None = None
    testbed: Any = field(default=None, repr=False)

    @property
    def started(self) -> bool:
        return bool(self.hosts) or not self.simulated

    def prerequisites(self) -> dict[str, tuple[tuple[str, str | None], ...]]:
        """What reaching each target depends on: on a single-server site the API is that server's rke2-server."""
        servers = [h.name for h in (self.hosts or self.site.hosts) if h.role == "server"]
        if len(servers) == 1:
            owner = reaching_owner("api-server")
            return {f"api:{self.context}": ((owner, servers[0]),)} if owner else {}
        return {}

    def host(self, name: str) -> HostSpec:
        for spec in self.hosts:
            if spec.name == name:
                return spec
        raise KeyError(f"{name}: not a host of this run (hosts: {', '.join(self.host_names)})")


def site_targets(site: Site, kubeconfig: Path | None, hosts: tuple[HostSpec, ...]) -> Targets:
    """Targets of a real site: the plan's hosts (the site's inventory or an explicit one) and kubeconfig context."""
    return Targets(
        site=site,
        host_names=tuple(h.name for h in hosts),
        gpu_host_names=tuple(h.name for h in hosts if h.gpu),
        context=site.context,
        management_context=site.management_context,
        simulated=False,
        hosts=hosts,
        kubeconfig=kubeconfig,
    )


def testbed_targets(site: Site, ref: str, scenario: Any) -> Targets:
    """Targets of a testbed scenario, before it is started: host names come from the scenario."""
    nodes = scenario.data.get("nodes") or {}
    names = tuple(nodes)
    gpu = tuple(n for n, spec in nodes.items() if (spec or {}).get("gpu", True))
    return Targets(
        site=site, host_names=names, gpu_host_names=gpu, context=site.context,
        management_context=site.management_context, simulated=True, testbed_ref=ref,
    )


def attach_testbed(targets: Targets, testbed: Any) -> None:
    """Fill in the addresses and credentials a started testbed wrote (inventory, ssh_config, kubeconfig)."""
    _, hosts = load_inventory(Path(testbed.inventory), ssh_config=str(testbed.ssh_config))
    targets.testbed = testbed
    targets.hosts = hosts
    targets.kubeconfig = Path(testbed.kubeconfig)
