"""Filters that rename RKE2's admin kubeconfig to the site context and merge it, new entries first."""
from __future__ import annotations

import ipaddress
from typing import Any

from ansible.errors import AnsibleFilterError

_KINDS = (("clusters", "cluster"), ("users", "user"), ("contexts", "context"))


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def _server_url(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"https://{host}:{port}"


def rke2_kubeconfig_rename(admin: dict[str, Any], name: str, address: str, port: int = 6443) -> dict[str, Any]:
    """Return RKE2's kubeconfig with cluster, user and context named ``name`` and the server at ``address``."""
    if _is_loopback(address):
        raise AnsibleFilterError(f"rke2_api_address must be the node's reachable address, not loopback {address!r}")
    entries = {}
    for plural, singular in _KINDS:
        items = admin.get(plural) if isinstance(admin, dict) else None
        if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0].get(singular), dict):
            raise AnsibleFilterError(
                f"RKE2's rke2.yaml must hold exactly one {singular}; found {len(items) if isinstance(items, list) else 0}"
            )
        entries[singular] = dict(items[0][singular])
    entries["cluster"]["server"] = _server_url(address, port)
    entries["context"].update(cluster=name, user=name)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": entries["cluster"]}],
        "users": [{"name": name, "user": entries["user"]}],
        "contexts": [{"name": name, "context": entries["context"]}],
        "current-context": name,
    }


def rke2_kubeconfig_merge(existing: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Return ``existing`` with ``new``'s entries first, replacing same-named ones; keep its current-context."""
    existing = existing or {}
    if not isinstance(existing, dict):
        raise AnsibleFilterError(f"the kubeconfig to merge into must be a mapping, found {type(existing).__name__}")
    merged = {key: value for key, value in existing.items() if key not in {p for p, _ in _KINDS}}
    merged.setdefault("apiVersion", "v1")
    merged.setdefault("kind", "Config")
    merged.setdefault("preferences", {})
    for plural, _ in _KINDS:
        names = {item["name"] for item in new[plural]}
        kept = [item for item in existing.get(plural) or [] if item.get("name") not in names]
        merged[plural] = list(new[plural]) + kept
    if not merged.get("current-context"):
        merged["current-context"] = new["current-context"]
    return merged


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        return {"rke2_kubeconfig_rename": rke2_kubeconfig_rename, "rke2_kubeconfig_merge": rke2_kubeconfig_merge}
