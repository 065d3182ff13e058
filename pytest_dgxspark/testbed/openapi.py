"""/openapi/v2 and /openapi/v3: schemas of the served kinds, as kubectl apply, explain and validation read them.

Built-in schemas (field names, types, required fields, descriptions) come from the models of the official Python
client, which are generated from the real Kubernetes OpenAPI document; custom resources publish their CRD's
structural schema (`x-kubernetes-preserve-unknown-fields`). Paths carry `x-kubernetes-group-version-kind` and the
`fieldValidation` parameter, so kubectl leaves validation to the server (`fieldValidation=Strict`).
"""

from __future__ import annotations

import copy
import datetime
import functools
import hashlib
import json
import types
import typing
from typing import Any

from pytest_dgxspark.testbed import crdschemas, patches, resources
from pytest_dgxspark.testbed.resources import Resource

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
META_TYPES = {"ObjectMeta", "ListMeta", "OwnerReference", "ManagedFieldsEntry", "LabelSelector", "LabelSelectorRequirement",
              "Condition", "Status", "StatusDetails", "StatusCause", "DeleteOptions", "Preconditions"}
PACKAGES = {"": "io.k8s.api.core.v1", "apps": "io.k8s.api.apps.v1", "batch": "io.k8s.api.batch.v1",
            "authorization.k8s.io": "io.k8s.api.authorization.v1", "authentication.k8s.io": "io.k8s.api.authentication.v1",
            "coordination.k8s.io": "io.k8s.api.coordination.v1", "node.k8s.io": "io.k8s.api.node.v1",
            "apiextensions.k8s.io": "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1"}
MODELS = {"nodes": "V1Node", "namespaces": "V1Namespace", "pods": "V1Pod", "events": "CoreV1Event", "services": "V1Service",
          "endpoints": "V1Endpoints", "configmaps": "V1ConfigMap", "secrets": "V1Secret", "serviceaccounts": "V1ServiceAccount",
          "daemonsets": "V1DaemonSet", "deployments": "V1Deployment", "replicasets": "V1ReplicaSet", "jobs": "V1Job",
          "leases": "V1Lease", "runtimeclasses": "V1RuntimeClass", "customresourcedefinitions": "V1CustomResourceDefinition",
          "selfsubjectaccessreviews": "V1SelfSubjectAccessReview", "selfsubjectrulesreviews": "V1SelfSubjectRulesReview",
          "selfsubjectreviews": "V1SelfSubjectReview"}
# core types reached first through another group's kinds (a DaemonSet's pod template is core/v1)
CORE_FIRST = ("V1PodTemplateSpec", "V1PodSpec")
# the one field description the client's models leave out on every kind (k8s.io/api types.go, each kind's metadata)
OBJECT_META = ("Standard object's metadata. More info: "
               "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json")


def _go_name(cls_name: str) -> str:
    for prefix in ("CoreV1", "V1"):
        if cls_name.startswith(prefix):
            return cls_name[len(prefix):]
    return cls_name


class _Builder:
    """Walks the client's pydantic models into OpenAPI schemas named like the real document's."""

    def __init__(self) -> None:
        from kubernetes.client import models

        self.models = models
        self.schemas: dict[str, dict[str, Any]] = {}
        self.names: dict[type, str] = {}

    def name_of(self, cls: type, package: str) -> str:
        if cls not in self.names:
            short = _go_name(cls.__name__)
            self.names[cls] = f"{META}.{short}" if short in META_TYPES else f"{package}.{short}"
            self.schemas[self.names[cls]] = {}  # placeholder against cycles
            self.schemas[self.names[cls]] = self.model(cls, package)
        return self.names[cls]

    def model(self, cls: Any, package: str) -> dict[str, Any]:
        doc = (cls.__doc__ or "").split("Attributes:")[0].strip()
        props: dict[str, Any] = {}
        required = []
        for name, field in cls.model_fields.items():
            key = field.serialization_alias or field.alias or name
            schema, optional = self.type_of(field.annotation, package)
            description = field.description or (OBJECT_META if key == "metadata" and "ObjectMeta" in str(schema) else None)
            if description:
                schema = {"allOf": [schema], "description": description} if "$ref" in schema else \
                    {**schema, "description": description}
            props[key] = _patch_strategy(cls.__name__, key, schema)
            if not optional:
                required.append(key)
        out: dict[str, Any] = {"type": "object", "description": " ".join(doc.split()), "properties": props}
        if required:
            out["required"] = sorted(required)
        return out

    def type_of(self, annotation: Any, package: str) -> tuple[dict[str, Any], bool]:
        optional = False
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            return self.type_of(typing.get_args(annotation)[0], package)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            optional = len(args) < len(typing.get_args(annotation))
            if len(args) > 1:  # int or string
                return {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}, optional
            schema, _ = self.type_of(args[0], package)
            return schema, optional
        if origin in (list, typing.List):
            return {"type": "array", "items": self.type_of(typing.get_args(annotation)[0], package)[0]}, optional
        if origin in (dict, typing.Dict):
            return {"type": "object", "additionalProperties": self.type_of(typing.get_args(annotation)[1], package)[0]}, optional
        if annotation is str:
            return {"type": "string"}, optional
        if annotation is bool:
            return {"type": "boolean"}, optional
        if annotation is int:
            return {"type": "integer", "format": "int64"}, optional
        if annotation is float:
            return {"type": "number", "format": "double"}, optional
        if annotation in (datetime.datetime, datetime.date):
            return {"type": "string", "format": "date-time"}, optional
        if annotation is bytes:
            return {"type": "string", "format": "byte"}, optional
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            return {"$ref": f"#/components/schemas/{self.name_of(annotation, package)}"}, optional
        return {"x-kubernetes-preserve-unknown-fields": True}, optional


def _patch_strategy(owner: str, key: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The `x-kubernetes-patch-*` extensions of k8s.io/api's struct tags, which kubectl reads to build strategic merge
    patches (without them it sends a keyed list whole, and the server would merge it by key)."""
    if key in patches.MERGED_PRIMITIVES and owner == "V1ObjectMeta":
        return {**schema, "x-kubernetes-patch-strategy": "merge"}
    if key not in patches.MERGE_KEYS or schema.get("type") != "array" or (key == "ports" and owner not in patches.MERGED_PORTS):
        return schema
    merge_key = patches.SERVICE_PORT_KEY if (key, owner) == ("ports", "V1ServiceSpec") else patches.MERGE_KEYS[key]
    strategy = "merge,retainKeys" if key == "volumes" else "merge"
    return {**schema, "x-kubernetes-patch-merge-key": merge_key, "x-kubernetes-patch-strategy": strategy}


def _gvk(r: Resource) -> dict[str, str]:
    return {"group": r.group, "kind": r.kind, "version": r.version}


@functools.lru_cache(maxsize=1)
def _schemas() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(components.schemas, plural -> schema name) for every served kind."""
    b = _Builder()
    for cls_name in CORE_FIRST:
        b.name_of(getattr(b.models, cls_name), PACKAGES[""])
    kinds: dict[str, str] = {}
    for r in resources.RESOURCES:
        model = MODELS.get(r.plural)
        if model is not None:
            name = b.name_of(getattr(b.models, model), PACKAGES.get(r.group, PACKAGES[""]))
        else:
            name = f"{'.'.join(reversed(r.group.split('.')))}.{r.version}.{r.kind}"
            published = copy.deepcopy(crdschemas.schema(r.plural))
            published.setdefault("properties", {}).update({"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                                           "metadata": {"allOf": [{"$ref": f"#/components/schemas/{META}.ObjectMeta"}]}})
            b.schemas[name] = published
        b.schemas[name]["x-kubernetes-group-version-kind"] = [_gvk(r)]
        kinds[r.plural] = name
    b.name_of(b.models.V1Status, PACKAGES[""])
    return b.schemas, kinds


def _ref(name: str, v2: bool) -> dict[str, str]:
    return {"$ref": f"#/{'definitions' if v2 else 'components/schemas'}/{name}"}


def _operation(r: Resource, verb: str, action: str, schema: str, v2: bool, patch: bool = False) -> dict[str, Any]:
    params: list[dict[str, Any]] = [{"name": "dryRun", "in": "query", "schema": {"type": "string"}, "uniqueItems": True},
                                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}, "uniqueItems": True}]
    if action in ("put", "post", "patch"):
        params.append({"name": "fieldValidation", "in": "query", "schema": {"type": "string"}, "uniqueItems": True,
                       "description": "fieldValidation instructs the server on how to handle objects in the request "
                       "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict"})
    if patch:
        params.append({"name": "force", "in": "query", "schema": {"type": "boolean"}, "uniqueItems": True})
    if v2:
        for p in params:
            p["type"] = p.pop("schema")["type"]
    op: dict[str, Any] = {"operationId": f"{verb}{r.kind}", "parameters": params, "tags": [r.group_version.replace("/", "_")],
                          "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(r)}
    ok = {"description": "OK", **({"schema": _ref(schema, True)} if v2 else
                                  {"content": {"application/json": {"schema": _ref(schema, False)}}})}
    op["responses"] = {"200": ok, "401": {"description": "Unauthorized"}}
    if action in ("put", "post", "patch"):
        # kubectl computes a strategic merge patch only where the PATCH operation accepts one: built-in kinds
        kinds = tuple(k for k in PATCH_TYPES if r.builtin or "strategic" not in k) if patch else ("*/*",)
        body_schema = {"type": "object"} if patch else _ref(schema, v2)
        if v2:
            op["parameters"].append({"name": "body", "in": "body", "required": True, "schema": body_schema})
            op["consumes"] = list(kinds)
        else:
            op["requestBody"] = {"content": {k: {"schema": body_schema} for k in kinds}, "required": True}
    return op


def _paths(r: Resource, schema: str, v2: bool) -> dict[str, dict[str, Any]]:
    base = "/api/v1" if not r.group else f"/apis/{r.group_version}"
    scope = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    if r.virtual:
        return {scope: {"post": _operation(r, "create", "post", schema, v2)}}
    item: dict[str, Any] = {"get": _operation(r, "read", "get", schema, v2)}
    if r.writable:
        item.update({"put": _operation(r, "replace", "put", schema, v2), "patch": _operation(r, "patch", "patch", schema, v2, True),
                     "delete": _operation(r, "delete", "delete", schema, v2)})
    collection: dict[str, Any] = {"get": _operation(r, "list", "list", schema, v2)}
    if r.writable:
        collection["post"] = _operation(r, "create", "post", schema, v2)
    named = {"parameters": [{"name": "name", "in": "path", "required": True, **({"type": "string"} if v2 else {"schema": {"type": "string"}})}]}
    return {scope: collection, f"{scope}/{{name}}": {**item, **named}}


def _group_paths(gv: str) -> str:
    return "api/v1" if gv == "v1" else f"apis/{gv}"


@functools.lru_cache(maxsize=64)
def v3_document(gv: str, version: str) -> str | None:
    """The OpenAPI 3.0 document of one group-version (`api/v1`, `apis/apps/v1`), as JSON text; None when not served."""
    served = [r for r in resources.RESOURCES if _group_paths(r.group_version) == gv]
    if not served:
        return None
    schemas, kinds = _schemas()
    paths: dict[str, Any] = {}
    for r in served:
        paths.update(_paths(r, kinds[r.plural], False))
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": version}, "paths": paths,
           "components": {"schemas": schemas, "securitySchemes": {"BearerToken": {
               "type": "apiKey", "name": "authorization", "in": "header", "description": "Bearer Token authentication"}}}}
    return json.dumps(doc, sort_keys=True)


def v3_root(version: str) -> dict[str, Any]:
    """`/openapi/v3`: every group-version's document with its content hash, as kubectl's openapi3 client discovers them."""
    paths = {}
    for gv in sorted({_group_paths(r.group_version) for r in resources.RESOURCES}):
        text = v3_document(gv, version) or ""
        digest = hashlib.sha512(text.encode()).hexdigest().upper()
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
    return {"paths": paths}


@functools.lru_cache(maxsize=4)
def v2_document(version: str) -> str:
    """`/openapi/v2` (Swagger 2.0, JSON): the same schemas under `definitions`."""
    schemas, kinds = _schemas()
    text = json.dumps(schemas).replace("#/components/schemas/", "#/definitions/")
    paths: dict[str, Any] = {}
    for r in resources.RESOURCES:
        paths.update(_paths(r, kinds[r.plural], True))
    return json.dumps({"swagger": "2.0", "info": {"title": "Kubernetes", "version": version}, "paths": paths,
                       "definitions": json.loads(text),
                       "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
                       "security": [{"BearerToken": []}]}, sort_keys=True)


def unknown_fields(r: Resource, obj: dict[str, Any]) -> list[str]:
    """Fields of `obj` its kind's schema does not have (`spec.foo`), as strict field validation reports them."""
    schemas, kinds = _schemas()
    found: list[str] = []

    def resolve(schema: dict[str, Any]) -> dict[str, Any]:
        while True:
            if "$ref" in schema:
                schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
            elif "allOf" in schema:
                schema = schema["allOf"][0]
            else:
                return schema

    def walk(value: Any, schema: dict[str, Any], path: str) -> None:
        schema = resolve(schema)
        if schema.get("x-kubernetes-preserve-unknown-fields") or not schema:
            return
        if isinstance(value, dict):
            if "properties" in schema:
                for key, sub in value.items():
                    if key not in schema["properties"]:
                        found.append(f"{path}{key}")
                    else:
                        walk(sub, schema["properties"][key], f"{path}{key}.")
            elif "additionalProperties" in schema:
                for key, sub in value.items():
                    walk(sub, schema["additionalProperties"], f"{path}{key}.")
        elif isinstance(value, list) and "items" in schema:
            for i, sub in enumerate(value):
                walk(sub, schema["items"], f"{path[:-1]}[{i}].")

    walk(obj, schemas[kinds[r.plural]], "")
    return found
