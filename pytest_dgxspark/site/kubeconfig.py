"""A kubeconfig validated before anything connects: a mapping with the run's context, its cluster and user."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_yaml

_EXPECTED = "expected a kubeconfig (apiVersion: v1, kind: Config, clusters, contexts, users)"


def _named(entries: Any, name: str, section: str, path: Path, problems: list[str]) -> dict | None:
    if not isinstance(entries, list):
        problems.append(f"{path}: {section}: expected a list, got {type(entries).__name__}")
        return None
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            problems.append(f"{path}: {section}.{index}: expected a mapping with a name")
            return None
    found = {e["name"]: e for e in entries}
    if name not in found:
        names = ", ".join(sorted(found)) or "none"
        problems.append(f"{path}: {section}: no entry named {name!r} (found: {names})")
        return None
    body = found[name].get(section[:-1])
    if not isinstance(body, dict):
        problems.append(f"{path}: {section}.{name}.{section[:-1]}: expected a mapping")
        return None
    return body


def kubeconfig_problems(path: Path, context: str) -> list[str]:
    """Every reason `path` cannot serve the context `context` (empty list: usable)."""
    try:
        data = load_yaml(path)
    except ValueError as exc:
        return [str(exc)]
    if data is None:
        return [f"{path}: empty; {_EXPECTED}"]
    if not isinstance(data, dict):
        return [f"{path}: top level is a {type(data).__name__}; {_EXPECTED}"]
    problems: list[str] = []
    ctx = _named(data.get("contexts", []), context, "contexts", path, problems)
    if ctx is None:
        return problems
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster_name, str) or not isinstance(user_name, str):
        return [f"{path}: contexts.{context}.context: expected cluster and user names"]
    cluster = _named(data.get("clusters", []), cluster_name, "clusters", path, problems)
    if cluster is not None and not (isinstance(cluster.get("server"), str) and cluster["server"].startswith(("https://", "http://"))):
        problems.append(f"{path}: clusters.{cluster_name}.cluster.server: expected the API server's URL (https://host:6443)")
    _named(data.get("users", []), user_name, "users", path, problems)
    return problems


def context_server(path: Path, context: str) -> str | None:
    """The API server URL the kubeconfig's `context` points at (None when it names none): read, never dialled."""
    try:
        data = load_yaml(path)
    except ValueError:
        return None
    problems: list[str] = []
    if not isinstance(data, dict):
        return None
    ctx = _named(data.get("contexts", []), context, "contexts", path, problems)
    if ctx is None or not isinstance(ctx.get("cluster"), str):
        return None
    cluster = _named(data.get("clusters", []), ctx["cluster"], "clusters", path, problems)
    return cluster.get("server") if cluster is not None and isinstance(cluster.get("server"), str) else None


def client_certificate(path: Path, context: str) -> str | None:
    """The PEM client certificate the context's user presents (client-certificate-data, or the file
    client-certificate names, relative to the kubeconfig), None when it authenticates otherwise (a token). Only the
    public certificate is read, never the key."""
    import base64

    data = load_yaml(path)
    problems: list[str] = []
    ctx = _named((data or {}).get("contexts", []), context, "contexts", path, problems) if isinstance(data, dict) else None
    user = _named(data.get("users", []), str(ctx.get("user")), "users", path, problems) if ctx else None
    if not user:
        return None
    if isinstance(user.get("client-certificate-data"), str):
        return base64.b64decode(user["client-certificate-data"]).decode("ascii", "replace")
    if isinstance(user.get("client-certificate"), str):
        return (Path(path).parent / user["client-certificate"]).read_text(encoding="ascii", errors="replace")
    return None
