"""Filters of the suite_rbac role: the suite's kubeconfig from the operator's (its clusters) and the bound tokens."""
from __future__ import annotations

from typing import Any


def _named(config: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    for entry in config.get(kind) or []:
        if entry.get("name") == name:
            return entry
    raise ValueError(f"the controller kubeconfig has no {kind[:-1]} {name!r}")


def suite_rbac_kubeconfig(operator: dict[str, Any], identities: list[dict[str, str]], user: str) -> dict[str, Any]:
    """A kubeconfig whose contexts are named as the operator's (so the site's rke2_context_name and argocd_context
    still name them) and point at the same clusters, each with the suite's bearer token as user `<user>@<context>`.

    `identities`: [{context, token}], or the registered results of the token task ({item: context, token}). The
    operator's own credentials (client keys, tokens) are never copied.
    """
    clusters, users, contexts = [], [], []
    for identity in identities:
        name = identity.get("context") or identity["item"]
        context = _named(operator, "contexts", name).get("context") or {}
        cluster = _named(operator, "clusters", context.get("cluster", ""))
        if not any(c["name"] == cluster["name"] for c in clusters):
            clusters.append({"name": cluster["name"], "cluster": dict(cluster.get("cluster") or {})})
        users.append({"name": f"{user}@{name}", "user": {"token": identity["token"]}})
        contexts.append({"name": name, "context": {"cluster": cluster["name"], "user": f"{user}@{name}"}})
    return {"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": contexts[0]["name"],
            "clusters": clusters, "users": users, "contexts": contexts}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"suite_rbac_kubeconfig": suite_rbac_kubeconfig}
