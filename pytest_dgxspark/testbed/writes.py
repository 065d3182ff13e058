"""The writing verbs of the simulated API server: create, update (PUT), patch, server-side apply; dry-run."""

from __future__ import annotations

import base64
import json
import random
import secrets
import time
import uuid
from typing import Any

import yaml

from pytest_dgxspark.testbed import (
    bootstrap,
    crdschemas,
    defaults,
    fieldmanager,
    openapi,
    patches,
    protobuf,
    resources,
    tokens,
)
from pytest_dgxspark.testbed.podshape import SUFFIX_ALPHABET, qos_class, ts
from pytest_dgxspark.testbed.reply import (
    ApiError,
    Exchange,
    bad_request,
    conflict,
    details,
    invalid,
    not_found,
    qualified,
)
from pytest_dgxspark.testbed.resources import Resource

# kinds whose registry strategy keeps metadata.generation (built-ins that have a spec; every custom resource)
GENERATION = ("pods", "daemonsets", "deployments", "replicasets", "jobs", "validatingadmissionpolicies",
              "validatingadmissionpolicybindings")


def has_generation(r: Resource) -> bool:
    return r.plural in GENERATION or not r.builtin


def has_status(r: Resource) -> bool:
    return r.plural in resources.WITH_STATUS


def dry_run(query: dict[str, str], options: dict[str, Any] | None = None) -> bool:
    """Whether `dryRun=All` (query, or DeleteOptions.dryRun); 400 for any other value, as metav1 validation answers."""
    values = [query["dryRun"]] if "dryRun" in query else list((options or {}).get("dryRun") or [])
    bad = [v for v in values if v != "All"]
    if bad:
        raise ApiError(400, "BadRequest", f'dryRun: Unsupported value: "{bad[0]}": supported values: "All"')
    return bool(values)


def manager(h: Exchange, query: dict[str, str]) -> str:
    """fieldManager, else the User-Agent up to its first `/` (apiserver's prefixFromUserAgent), at most 128 characters."""
    chosen = query.get("fieldManager") or (h.headers.get("User-Agent") or "").split("/", 1)[0]
    return chosen[:128]


def parse_body(h: Exchange, body: bytes) -> dict[str, Any]:
    kind = (h.headers.get("Content-Type") or "application/json").split(";")[0].strip()
    if kind == protobuf.CONTENT_TYPE:  # kubectl's typed clients: create namespace|configmap|secret, drain
        try:
            return protobuf.decode(body)
        except protobuf.ProtobufError as exc:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media "
                           f"types include: application/json, application/yaml ({exc})") from None
    if kind == "application/cbor":
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types "
                       "include: application/json, application/yaml, application/vnd.kubernetes.protobuf")
    try:
        obj = yaml.safe_load(body or b"{}") if "yaml" in kind else json.loads(body or b"{}")
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"the object provided is unrecognized: {exc}") from None
    if not isinstance(obj, dict):
        raise bad_request("the object provided is unrecognized (must be a JSON object)")
    return obj


def validate_fields(r: Resource, obj: Any, query: dict[str, str]) -> None:
    """fieldValidation=Strict (kubectl's default): unknown fields are a 400, worded as apiserver's strict decoder."""
    if query.get("fieldValidation") != "Strict" or not isinstance(obj, dict):
        return
    unknown = [f for f in openapi.unknown_fields(r, obj) if "$" not in f]
    if unknown:
        raise bad_request(f'{r.kind} in version "{r.version}" cannot be handled as a {r.kind}: strict decoding error: '
                          + ", ".join(f'unknown field "{f}"' for f in unknown))


def _check_type(r: Resource, obj: dict[str, Any]) -> None:
    version, kind = obj.get("apiVersion"), obj.get("kind")
    if version and version != r.group_version:
        raise bad_request(f"the API version in the data ({version}) does not match the expected API version ({r.group_version})")
    if kind and kind != r.kind:
        raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({r.kind})")


def _normalize(r: Resource, obj: dict[str, Any]) -> None:
    obj.update({"apiVersion": r.group_version, "kind": r.kind})
    if not r.builtin:  # a structural schema's undeclared fields are pruned (fieldValidation=Strict refused them before)
        crdschemas.prune(r.plural, obj)
    if r.plural == "secrets" and obj.get("stringData"):
        data = obj.setdefault("data", {}) or {}
        for key, value in obj.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data
    obj.pop("stringData", None)
    if r.plural == "secrets":
        obj.setdefault("type", "Opaque")


# --- create -------------------------------------------------------------------------------------------------------


def admission(h: Exchange, r: Resource, namespace: str | None, obj: dict[str, Any]) -> None:
    store, md = h.server.store, obj.setdefault("metadata", {})
    if not md.get("name") and md.get("generateName"):
        md["name"] = md["generateName"] + "".join(random.choice(SUFFIX_ALPHABET) for _ in range(5))
    if not md.get("name"):
        raise invalid(r, "", "metadata.name", "FieldValueRequired", "Required value: name or generateName is required")
    name = md["name"]
    if namespace is not None:
        if md.get("namespace") not in (None, "", namespace):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        ns = store.get("/namespaces", "", namespace)
        if ns is None:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})
        if ns.get("status", {}).get("phase") == "Terminating":
            raise ApiError(403, "Forbidden", f'{r.plural} "{name}" is forbidden: unable to create new content in namespace '
                           f"{namespace} because it is being terminated", details(r, name))
        md["namespace"] = namespace
    runtime_class = (obj.get("spec") or {}).get("runtimeClassName")
    if r.plural == "pods" and runtime_class and store.get("node.k8s.io/runtimeclasses", "", runtime_class) is None:
        raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: pod rejected: RuntimeClass "{runtime_class}" not found',
                       details(r, name))
    if store.get(r.key, namespace or "", name) is not None:
        raise ApiError(409, "AlreadyExists", f'{qualified(r)} "{name}" already exists', details(r, name))


def new_object(h: Exchange, r: Resource, namespace: str | None, obj: dict[str, Any], query: dict[str, str],
               applied: bool = False) -> dict[str, Any]:
    """Defaulted, admitted and owned (managedFields) but not stored: what a create would store."""
    _check_type(r, obj)
    admission(h, r, namespace, obj)
    md = obj["metadata"]
    for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
        md.pop(key, None)
    md.update({"uid": str(uuid.uuid4()), "creationTimestamp": ts(time.time())})
    _normalize(r, obj)
    if has_generation(r):
        md["generation"] = 1
    if r.plural == "namespaces":
        md.setdefault("labels", {})["kubernetes.io/metadata.name"] = md["name"]
        obj["spec"], obj["status"] = {"finalizers": ["kubernetes"]}, {"phase": "Active"}
    elif r.plural == "pods":
        pod_defaults(obj)
    elif r.plural == "jobs":
        job_defaults(obj)
    defaults.apply(obj, None if r.builtin else crdschemas.schema(r.plural, r.group))  # the rest of the create path's
    if r.plural == "secrets" and obj.get("type") == "kubernetes.io/service-account-token":
        _token_controller(h, obj)
    if not applied:  # an apply brought its own managedFields entry
        fieldmanager.record_update(None, obj, manager(h, query), r.group_version)
    return obj


def create(h: Exchange, r: Resource, namespace: str | None, body: bytes, query: dict[str, str]) -> None:
    obj = parse_body(h, body)
    validate_fields(r, obj, query)
    obj = new_object(h, r, namespace, obj, query)
    if dry_run(query):
        return h.send_json(201, obj)
    created = h.server.store.put(r.key, obj)
    h.send_json(201, created)
    if r.plural == "pods":
        h.server.kubelet.admit(created)


def _token_controller(h: Exchange, secret: dict[str, Any]) -> None:
    """kube-controller-manager's token controller, at once: a service-account-token Secret of an existing account gets
    the account's uid annotation and `data` (ca.crt, namespace, a token that authenticates as the account)."""
    md = secret["metadata"]
    account_name = (md.get("annotations") or {}).get("kubernetes.io/service-account.name")
    account = h.server.store.get("/serviceaccounts", md.get("namespace") or "", account_name or "")
    if account is None or (secret.get("data") or {}).get("token"):
        return  # the real controller waits for the account (and deletes the Secret once it is gone)
    token = secrets.token_urlsafe(48)
    namespace = md["namespace"]
    h.server.tokens[token] = tokens.account_identity(namespace, account_name or "")
    md.setdefault("annotations", {})["kubernetes.io/service-account.uid"] = account["metadata"].get("uid", "")
    secret["data"] = {**(secret.get("data") or {}), "ca.crt": base64.b64encode(h.server.ca_pem().encode()).decode(),
                      "namespace": base64.b64encode(namespace.encode()).decode(),
                      "token": base64.b64encode(token.encode()).decode()}


def pod_defaults(pod: dict[str, Any]) -> None:
    spec = pod.setdefault("spec", {})
    # SetDefaults_PodSpec, DefaultTolerationSeconds and the service account follow in defaults.apply (new_object)
    for key, value in (("priority", 0), ("enableServiceLinks", True), ("preemptionPolicy", "PreemptLowerPriority")):
        spec.setdefault(key, value)
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c.setdefault("imagePullPolicy", "Always" if c.get("image", "").endswith(":latest") or ":" not in c.get("image", "") else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        resources = c.setdefault("resources", {})
        for name, value in (resources.get("limits") or {}).items():  # SetDefaults_ResourceRequirements
            resources.setdefault("requests", {}).setdefault(name, value)
    qos = qos_class(spec.get("containers", []) + spec.get("initContainers", []))
    pod["status"] = {"phase": "Pending", "qosClass": qos}


def job_defaults(job: dict[str, Any]) -> None:
    """batch/v1 Job strategy: a generated selector on `batch.kubernetes.io/controller-uid` and the template's labels."""
    bootstrap.controller_marks([job])


# --- update, patch, apply ---------------------------------------------------------------------------------------


def _carry(r: Resource, old: dict[str, Any], new: dict[str, Any], sub: str) -> dict[str, Any]:
    """What an update may not change: identity and system metadata; status (main resource) or everything else (/status)."""
    if sub == "status":
        merged = {**old, "status": new.get("status", old.get("status"))}
        merged["metadata"] = dict(old["metadata"])
        return merged
    md, old_md = new.setdefault("metadata", {}), old["metadata"]
    for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "name", "namespace"):
        if key in old_md:
            md[key] = old_md[key]
        else:
            md.pop(key, None)
    md["resourceVersion"] = old_md.get("resourceVersion", "")
    if has_status(r):
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    if has_generation(r):
        md["generation"] = old_md.get("generation", 1)
        if _spec(new) != _spec(old):
            md["generation"] += 1
    else:
        md.pop("generation", None)
    return new


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _finished(obj: dict[str, Any]) -> bool:
    md = obj["metadata"]
    return bool(md.get("deletionTimestamp")) and not md.get("finalizers")


def _write(h: Exchange, r: Resource, namespace: str | None, name: str, query: dict[str, str], sub: str,
           compute: Any, applied: bool = False) -> None:
    """Run `compute(old) -> new` against the stored object (or a copy on dry-run) and answer with the result."""
    store = h.server.store
    who = manager(h, query)

    def full(old: dict[str, Any]) -> dict[str, Any]:
        new = compute(old)
        _check_type(r, new)
        if sub != "status":  # every write is defaulted as a create is (an applied list keeps its defaulted fields),
            defaults.apply(new, None if r.builtin else crdschemas.schema(r.plural, r.group))  # before generation counts
        new = _carry(r, old, new, sub)
        _normalize(r, new)
        if not applied:
            fieldmanager.record_update(old, new, who, r.group_version, sub)
        return new

    if dry_run(query):
        old = store.get(r.key, namespace or "", name)
        if old is None:
            raise not_found(r, name)
        return h.send_json(200, full(old))
    stored, _ = store.replace(r.key, namespace or "", name, full)
    if stored is None:
        raise not_found(r, name)
    if _finished(stored):  # the last finalizer is gone from an object being deleted
        store.delete(r.key, namespace or "", name)
    h.send_json(200, stored)


def replace(h: Exchange, r: Resource, namespace: str | None, name: str, body: bytes, query: dict[str, str], sub: str = "") -> None:
    obj = parse_body(h, body)
    validate_fields(r, obj, query)
    md = obj.setdefault("metadata", {})
    if md.get("name") and md["name"] != name:
        raise bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
    if namespace is not None and md.get("namespace") not in (None, "", namespace):
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
    wanted = md.get("resourceVersion")
    if not wanted and not r.builtin:  # customresource strategy: AllowUnconditionalUpdate is false
        raise invalid(r, name, "metadata.resourceVersion", "FieldValueInvalid",
                      "Invalid value: 0x0: must be specified for an update")

    def compute(old: dict[str, Any]) -> dict[str, Any]:
        if wanted and wanted != old["metadata"].get("resourceVersion"):
            raise conflict(r, name)
        new = {**obj, "metadata": dict(md)}
        if "managedFields" not in md and old["metadata"].get("managedFields"):  # nil keeps them, [] clears them
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"]
        return new

    _write(h, r, namespace, name, query, sub, compute)


def patch(h: Exchange, r: Resource, namespace: str | None, name: str, body: bytes, query: dict[str, str], sub: str = "") -> None:
    kind = (h.headers.get("Content-Type") or "").split(";")[0].strip()
    if kind == patches.APPLY:
        return _apply(h, r, namespace, name, body, query, sub)
    accepted = [patches.JSON_PATCH, patches.MERGE, patches.APPLY] + ([patches.STRATEGIC] if r.builtin else [])
    if kind not in accepted:
        raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types "
                       f"include: {', '.join(accepted)}")
    document = patches.decode(body)
    if kind != patches.JSON_PATCH:
        validate_fields(r, document, query)

    def compute(old: dict[str, Any]) -> dict[str, Any]:
        wanted = (document.get("metadata") or {}).get("resourceVersion") if isinstance(document, dict) else None
        if wanted and wanted != old["metadata"].get("resourceVersion"):
            raise conflict(r, name)
        try:
            if kind == patches.JSON_PATCH:
                new = patches.json_patch(old, document)
            elif kind == patches.MERGE:
                new = patches.merge_patch(old, document)
            else:
                new = patches.strategic_merge(old, document, service=r.plural == "services")
        except patches.PatchError as exc:
            raise ApiError(exc.code, "Invalid" if exc.code == 422 else "BadRequest", str(exc)) from None
        if not isinstance(new, dict):
            raise bad_request("the patch did not produce an object")
        return new

    _write(h, r, namespace, name, query, sub, compute)


def _apply(h: Exchange, r: Resource, namespace: str | None, name: str, body: bytes, query: dict[str, str], sub: str) -> None:
    who = query.get("fieldManager", "")
    if not who:
        raise invalid(r, name, "fieldManager", "FieldValueRequired", "Required value: is required for apply patch")
    config = parse_body(h, body)
    validate_fields(r, config, query)
    if not config.get("apiVersion") or not config.get("kind"):
        raise bad_request(f"{'apiVersion' if not config.get('apiVersion') else 'kind'} must be set in the applied configuration")
    _check_type(r, config)
    force = query.get("force") in ("true", "1")
    md = config.setdefault("metadata", {})
    if md.get("name") not in (None, name):
        raise bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
    md["name"] = name
    store = h.server.store

    def merge(current: dict[str, Any], applied: dict[str, Any]) -> dict[str, Any]:
        return patches.strategic_merge(current, applied, service=r.plural == "services") if r.builtin \
            else patches.merge_patch(current, applied)

    def owned(old: dict[str, Any] | None) -> dict[str, Any]:
        try:
            return fieldmanager.apply(old, config, who, r.group_version, force, merge,
                                      lambda obj: defaults.apply(obj, None if r.builtin else crdschemas.schema(r.plural, r.group)))
        except fieldmanager.ApplyConflict as exc:
            raise ApiError(409, "Conflict", str(exc), {**details(r, name), "causes": exc.causes()}) from None

    if store.get(r.key, namespace or "", name) is None:  # apply creates what is absent
        obj = new_object(h, r, namespace, owned(None), query, applied=True)
        if dry_run(query):
            return h.send_json(201, obj)
        created = store.put(r.key, obj)
        h.send_json(201, created)
        if r.plural == "pods":
            h.server.kubelet.admit(created)
        return

    _write(h, r, namespace, name, query, sub, owned, applied=True)
