"""Filters that compare a live Node with the site's configured labels and taints."""
from __future__ import annotations

from typing import Any


def _taint_string(taint: dict[str, Any]) -> str:
    value = taint.get("value") or ""
    key = f"{taint['key']}={value}" if value else taint["key"]
    return f"{key}:{taint['effect']}"


def _normalise_taint(taint: str) -> str:
    head, _, effect = taint.rpartition(":")
    key, _, value = head.partition("=")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def rke2_missing_labels(node: dict[str, Any], desired: list[str]) -> list[str]:
    """Return the ``key=value`` labels the Node does not carry with exactly that value."""
    live = (node.get("metadata") or {}).get("labels") or {}
    return [label for label in desired if live.get(label.partition("=")[0]) != label.partition("=")[2]]


def rke2_missing_taints(node: dict[str, Any], desired: list[str]) -> list[str]:
    """Return the ``key=value:Effect`` taints the Node does not carry."""
    live = {_taint_string(t) for t in (node.get("spec") or {}).get("taints") or []}
    return [taint for taint in desired if _normalise_taint(taint) not in live]


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        return {"rke2_missing_labels": rke2_missing_labels, "rke2_missing_taints": rke2_missing_taints}
