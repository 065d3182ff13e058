"""The order checks run in: after the rules they depend on, and each target reached first by the rule owning it.

A fault of reaching a target is attributed as it happens (plugin.pytest_runtest_makereport) only when the rule that
owns reaching the target has already run: SSH to a host by host-static-ip's SSH check, the workload API by
kubeconfig-context, which itself comes after rke2-service (on a single-server site the API's prerequisite). So the
terminal shows BLOCKED for a later test on a broken target, as results.json does, instead of ERROR.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

import pytest

from pytest_dgxspark.catalog.rules import Catalog

# fixtures that reach a host over SSH (host_target: the host of the item's parameter; the others: every host)
SSH_FIXTURES_ALL = frozenset({"hosts", "gpu_hosts"})


def needs_api(item: pytest.Item) -> bool:
    """The item reads the workload API (its fixtures include `cluster`, or it takes `connections` itself)."""
    names = getattr(item, "fixturenames", ())
    return "cluster" in names or "connections" in _own_args(item)


def ssh_hosts(item: pytest.Item, all_hosts: Iterable[str]) -> set[str]:
    """The inventory hosts the item reaches over SSH."""
    names = getattr(item, "fixturenames", ())
    if SSH_FIXTURES_ALL & set(names) or "connections" in _own_args(item):
        return set(all_hosts)
    if "host_target" in names:
        callspec = getattr(item, "callspec", None)
        host = callspec.params.get("host_spec") if callspec is not None else None
        return {str(host)} if host is not None else set(all_hosts)
    return set()


def reaches(item: pytest.Item, all_hosts: Iterable[str], api_target: str) -> frozenset[str]:
    """The targets the item's evidence comes through: `ssh:<host>` for each host it reaches, and the API."""
    found = {f"ssh:{host}" for host in ssh_hosts(item, all_hosts)}
    return frozenset(found | ({api_target} if needs_api(item) else set()))


def needs_target(item: pytest.Item, target: str, all_hosts: Iterable[str]) -> bool:
    """Whether the item's evidence comes through `target` (`ssh:<host>` or `api:<context>`)."""
    kind, _, name = target.partition(":")
    if kind == "ssh":
        return name in ssh_hosts(item, all_hosts)
    return True  # an API target: every check that depends on an API rule reads the API


def ranks(catalog: Catalog, items: list[pytest.Item], rule_of: Callable[[pytest.Item], str | None]) -> dict[str, int]:
    """nodeid -> run position (1-based; equal positions keep their collection order) of the items with a rule."""
    order = {r.id: i for i, r in enumerate(catalog.ordered())}
    ssh_rule, api_rule = catalog.owner("ssh"), catalog.owner("api")
    api_slot = order[catalog.owner("api-server")] + 0.5  # type: ignore[index]

    def rank(item: pytest.Item) -> float:
        rid = rule_of(item)
        pos = float(order[rid])  # type: ignore[index]
        if rid == ssh_rule and not needs_api(item):
            return -1.0
        if rid == api_rule:
            return api_slot
        if needs_api(item) and pos < api_slot:
            return api_slot + 0.001 * (pos + 1)
        return pos

    ranked = {i.nodeid: rank(i) for i in items if rule_of(i) in order}
    dense = {value: index + 1 for index, value in enumerate(sorted(set(ranked.values())))}
    return {nodeid: dense[value] for nodeid, value in ranked.items()}


def _own_args(item: pytest.Item) -> tuple[str, ...]:
    """The test function's own parameters (the fixtures it asks for itself)."""
    function = getattr(item, "obj", None)
    try:
        return tuple(inspect.signature(function).parameters) if callable(function) else ()
    except (TypeError, ValueError):
        return ()
