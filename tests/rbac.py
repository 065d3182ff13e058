"""The suite's shipped RBAC (provisioning/roles/suite_rbac) rendered, and what it allows a request, as RBAC decides.

Used by the tests that hold the role to what a run actually requests (tests/test_suite_rbac.py): a rule allows a
request when its apiGroups, resources (with subresource, e.g. pods/log) and verbs match, or for a non-resource path
its nonResourceURLs and verbs; a Role's rules only in its own namespace. Deny rules do not exist in RBAC.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import yaml

from pytest_dgxspark.testbed.requestinfo import RequestInfo

ROLE = Path(__file__).resolve().parents[1] / "provisioning" / "roles" / "suite_rbac"
VARS = {"suite_rbac_service_account": "dgxspark-suite", "suite_rbac_namespace": "kube-system",
        "suite_rbac_namespace_prefix": "dgxspark-cuda-", "suite_rbac_configmap_namespace": "kube-system",
        "suite_rbac_argocd_namespace": "argocd"}
USER = f"system:serviceaccount:{VARS['suite_rbac_namespace']}:{VARS['suite_rbac_service_account']}"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def rendered(template: str) -> list[dict[str, Any]]:
    """The objects of one of the role's templates, with the role's defaults."""
    text = jinja2.Template((ROLE / "templates" / template).read_text(), undefined=jinja2.StrictUndefined).render(VARS)
    return [doc for doc in yaml.safe_load_all(text) if doc]


@dataclass(frozen=True)
class Grant:
    """One rule of a role bound to the suite's ServiceAccount; `namespace` None for a ClusterRole's."""

    verbs: tuple[str, ...]
    groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    namespace: str | None = None

    def allows(self, info: RequestInfo) -> bool:
        if not ("*" in self.verbs or info.verb in self.verbs):
            return False
        if info.resource is None:
            return self.namespace is None and any(p == info.path or (p.endswith("*") and info.path.startswith(p[:-1]))
                                                  for p in self.paths)
        if self.namespace is not None and info.namespace != self.namespace:
            return False
        return ("*" in self.groups or info.group in self.groups) and \
            ("*" in self.resources or info.resource_path in self.resources)


def grants(objects: list[dict[str, Any]]) -> list[Grant]:
    """The rules of every role that a binding in `objects` binds to the suite's ServiceAccount."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("ClusterRole", "Role")}
    found: list[Grant] = []
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        subjects = {(s["kind"], s.get("namespace"), s["name"]) for s in binding.get("subjects") or []}
        if ("ServiceAccount", VARS["suite_rbac_namespace"], VARS["suite_rbac_service_account"]) not in subjects:
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role.get("rules") or []:
            found.append(Grant(tuple(rule["verbs"]), tuple(rule.get("apiGroups") or ()), tuple(rule.get("resources") or ()),
                               tuple(rule.get("nonResourceURLs") or ()), where))
    return found


def allowed(rules: list[Grant], info: RequestInfo) -> bool:
    return any(rule.allows(info) for rule in rules)


def own_namespace_write(info: RequestInfo) -> bool:
    """What the role's ValidatingAdmissionPolicy admits of the suite's writes: only in dgxspark-cuda-* namespaces
    (a Namespace by its own name)."""
    prefix = VARS["suite_rbac_namespace_prefix"]
    if info.group == "" and info.resource == "namespaces":
        return info.name.startswith(prefix) or (info.verb == "create" and not info.name)
    return info.namespace.startswith(prefix)
