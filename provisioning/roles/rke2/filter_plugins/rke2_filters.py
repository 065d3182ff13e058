"""Filters of the rke2 role: versions, checksum files, registries.yaml, and the live Node against the site."""
from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

# `rke2 --version` prints "rke2 version v1.34.10+rke2r1 (<commit>)" then "go version go1.24.4 X:boringcrypto".
_VERSION_LINE = re.compile(r"^rke2 version (v\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?\+rke2r\d+)\b", re.M)
_PINNED = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:-[0-9A-Za-z.]+)?\+rke2r(\d+)$")
_CHECKSUM_LINE = re.compile(r"^([0-9a-fA-F]{64})\s+\*?(\S.*?)\s*$")


def rke2_version_of(output: str) -> str:
    """The release in `rke2 --version` output, or '' when the output has no version line."""
    match = _VERSION_LINE.search(output or "")
    return match.group(1) if match else ""


def rke2_version_key(version: str) -> list[int]:
    """(major, minor, patch, rke2 revision) of a release name, for ordering; an error for any other string."""
    match = _PINNED.match(version or "")
    if not match:
        raise AnsibleFilterError(f"not an RKE2 release name like v1.34.10+rke2r1: {version!r}")
    return [int(part) for part in match.groups()]


def rke2_checksums(text: str, source: str = "checksum file") -> dict[str, str]:
    """{file name: sha256} of a sha256sum-style file ("<hex>  <name>" or "<hex> *<name>"); blank and # lines skipped."""
    found: dict[str, str] = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _CHECKSUM_LINE.match(line)
        if not match:
            raise AnsibleFilterError(f"{source}:{number}: expected '<sha256>  <file name>', found {line[:120]!r}")
        found[match.group(2).rsplit("/", 1)[-1]] = match.group(1).lower()
    return found


def rke2_registries(mirror: str, registries: list[str], explicit: dict[str, Any], tls: dict[str, Any],
                    auth: dict[str, Any]) -> dict[str, Any]:
    """The registries.yaml document: mirrors (explicit, else every registry sent to https://<mirror>) and configs."""
    mirrors = {name: {"endpoint": list(endpoints)} for name, endpoints in (explicit or {}).items()}
    if not mirrors and mirror:
        mirrors = {name: {"endpoint": [f"https://{mirror}"]} for name in registries}
    configs: dict[str, Any] = {}
    for host, settings in (tls or {}).items():
        configs.setdefault(host, {})["tls"] = dict(settings)
    for host, creds in (auth or {}).items():
        if not isinstance(creds, dict) or not ({"username", "password"} <= set(creds) or "auth" in creds
                                               or "identitytoken" in creds):
            raise AnsibleFilterError(f"rke2_registry_auth[{host!r}] must hold username and password (or auth / identitytoken)")
        configs.setdefault(host, {})["auth"] = dict(creds)
    document: dict[str, Any] = {"mirrors": mirrors}
    if configs:
        document["configs"] = configs
    return document


def _domain(label: str) -> str:
    key = label.partition("=")[0]
    return key.partition("/")[0] if "/" in key else ""


def rke2_owned_by_others(labels: list[str], domains: list[str]) -> list[str]:
    """The labels whose key prefix is one of `domains` or a subdomain of one (set at registration only)."""
    return [label for label in labels if any(_domain(label) == d or _domain(label).endswith("." + d) for d in domains)]


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
        return {"rke2_version_of": rke2_version_of, "rke2_version_key": rke2_version_key,
                "rke2_checksums": rke2_checksums, "rke2_registries": rke2_registries,
                "rke2_owned_by_others": rke2_owned_by_others,
                "rke2_missing_labels": rke2_missing_labels, "rke2_missing_taints": rke2_missing_taints}
