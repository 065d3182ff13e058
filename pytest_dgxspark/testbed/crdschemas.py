"""Structural schemas of the custom resources the testbed serves, where their fields are sourced.

HelmChart and HelmChartConfig (helm.cattle.io/v1): the spec fields of helm-controller's
`pkg/apis/helm.cattle.io/v1/types.go` @21a911f as listed in shared/reference/rke2-provisioning-facts.md §2.1. A real
apiserver prunes fields a structural schema does not declare and, under fieldValidation=Strict, refuses them. The
ClusterPolicy and CiliumNode schemas are not sourced here, so they keep every field (preserve-unknown-fields).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

_STR, _BOOL, _INT = {"type": "string"}, {"type": "boolean"}, {"type": "integer"}
_OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_NAME_REF = {"type": "object", "properties": {"name": _STR}}
_VALUES_SECRETS = {"type": "array", "items": {"type": "object", "properties": {
    "name": _STR, "keys": {"type": "array", "items": _STR}, "ignoreUpdates": _BOOL}}}
_CONDITIONS = {"type": "array", "items": {"type": "object", "properties": {
    "type": _STR, "status": _STR, "reason": _STR, "message": _STR, "lastUpdateTime": _STR, "lastTransitionTime": _STR}}}

HELMCHART_SPEC = {"type": "object", "properties": {
    "chart": _STR, "repo": _STR, "version": _STR, "targetNamespace": _STR, "createNamespace": _BOOL, "valuesContent": _STR,
    "set": {"type": "object", "additionalProperties": {"x-kubernetes-int-or-string": True}}, "valuesSecrets": _VALUES_SECRETS,
    "chartContent": _STR, "repoCA": _STR, "repoCAConfigMap": _NAME_REF, "authSecret": _NAME_REF,
    "authPassCredentials": _BOOL, "dockerRegistrySecret": _NAME_REF, "plainHTTP": _BOOL, "insecureSkipTLSVerify": _BOOL,
    "bootstrap": _BOOL, "jobImage": _STR, "backOffLimit": _INT, "timeout": _STR, "failurePolicy": _STR, "takeOwnership": _BOOL,
    "serverSide": _BOOL, "helmVersion": _STR, "podSecurityContext": _OPEN, "securityContext": _OPEN}}
HELMCHARTCONFIG_SPEC = {"type": "object", "properties": {
    "valuesContent": _STR, "values": _OPEN, "valuesSecrets": _VALUES_SECRETS, "failurePolicy": _STR}}

SCHEMAS: dict[str, dict[str, Any]] = {
    "helmcharts": {"type": "object", "properties": {"apiVersion": _STR, "kind": _STR, "metadata": {"type": "object"},
                                                    "spec": HELMCHART_SPEC, "status": {"type": "object", "properties": {
                                                        "jobName": _STR, "conditions": _CONDITIONS}}}},
    "helmchartconfigs": {"type": "object", "properties": {"apiVersion": _STR, "kind": _STR, "metadata": {"type": "object"},
                                                          "spec": HELMCHARTCONFIG_SPEC}},
}


# CustomResourceDefinitions taken from their project (ClusterPolicy: the GPU Operator's own, trimmed by trim.py): the
# stand-in and the real control plane serve the same one, so `kubectl explain clusterpolicy.spec.driver` answers on both.
CRD_DIR = Path(__file__).parent / "controlplane" / "crds"
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def sourced_crd(plural: str, group: str) -> dict[str, Any] | None:
    """The project's own CustomResourceDefinition of `plural.group`, when one is kept in CRD_DIR (the package's own
    file: read with libyaml's safe loader where PyYAML has it, 0.6 s less per testbed process for ClusterPolicy's)."""
    path = CRD_DIR / f"{plural}.{group}.yaml"
    return yaml.load(path.read_text(), Loader=SAFE_LOADER) if path.is_file() else None  # noqa: S506 - a safe loader


def schema(plural: str, group: str = "") -> dict[str, Any]:
    """The openAPIV3Schema of a custom resource: its sourced CRD's, SCHEMAS', or everything kept when not sourced."""
    crd = sourced_crd(plural, group) if group else None
    if crd is not None:
        return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return SCHEMAS.get(plural, {"type": "object", "x-kubernetes-preserve-unknown-fields": True})


def prune(plural: str, obj: dict[str, Any]) -> list[str]:
    """Drop the fields the resource's structural schema does not declare (apiserver pruning); returns their paths."""
    dropped: list[str] = []

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if node.get("x-kubernetes-preserve-unknown-fields") or not isinstance(value, dict):
            if isinstance(value, list) and "items" in node:
                for i, item in enumerate(value):
                    walk(item, node["items"], f"{path}[{i}]")
            return
        props = node.get("properties")
        if props is None:
            return
        for key in list(value):
            if key not in props:
                del value[key]
                dropped.append(f"{path}.{key}".lstrip("."))
            else:
                walk(value[key], props[key], f"{path}.{key}")

    top = schema(plural)
    for key in list(obj):
        if key == "metadata":
            continue
        if key not in (top.get("properties") or {}) and not top.get("x-kubernetes-preserve-unknown-fields"):
            del obj[key]
            dropped.append(key)
        elif key in (top.get("properties") or {}):
            walk(obj[key], top["properties"][key], key)
    return dropped
