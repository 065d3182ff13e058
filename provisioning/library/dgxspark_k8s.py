#!/usr/bin/python
"""Ansible module: read, server-side apply, and wait for a Job, through the kubernetes Python client.

Why not kubernetes.core: it ships only in the `ansible` community package (ansible 12.x for ansible-core 2.19:
a 54 MB wheel of about a hundred collections) or from Galaxy, which an offline controller cannot reach. The
project already depends on the kubernetes client (the suite talks to the API with it), so this module needs
nothing new on the controller and no kubectl anywhere. See docs/provisioning.md.
"""
from __future__ import annotations

import json
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: dgxspark_k8s
short_description: Get, server-side apply, or wait for a Job through the kubernetes Python client
description:
  - C(get) returns the object or null. C(apply) is a server-side apply (force, field manager
    I(field_manager)); in check mode a server dry run (dryRun=All), changed when the result differs.
  - C(wait_job) waits for a Job whose uid differs from I(previous_uid) (the Job of this apply) to succeed;
    it fails as soon as the Job records a failed pod, with the tail of that pod's log.
  - C(token) requests a bound token of ServiceAccount I(name) in I(namespace) (TokenRequest, I(expiration)
    seconds) and returns it as C(token) with C(expires); never changed, and skipped in check mode.
  - C(preflight) checks the kubeconfig and that every context of I(contexts) is in it and its API answers
    (GET /version, once, no retries); it fails once, one line per problem.
options:
  kubeconfig: {type: path, required: true, description: Controller kubeconfig.}
  context: {type: str, required: true, description: Its context.}
  action: {type: str, required: true, choices: [get, apply, wait_job, token, preflight], description: What to do.}
  expiration: {type: int, default: 3600, description: Seconds the token of C(token) lives (at least 600).}
  contexts: {type: list, elements: str, description: The contexts preflight checks (context is the first).}
  definition: {type: dict, description: The object to apply.}
  api_version: {type: str, description: apiVersion of the object to get or wait for.}
  kind: {type: str, description: Its kind.}
  name: {type: str, description: Its name.}
  namespace: {type: str, description: Its namespace.}
  field_manager: {type: str, default: dgxspark-provisioning, description: Server-side apply field manager.}
  previous_uid: {type: str, default: "", description: uid of the Job before this apply; that Job never counts.}
  timeout: {type: int, default: 900, description: Seconds wait_job waits.}
  poll: {type: int, default: 5, description: Seconds between polls.}
  log_lines: {type: int, default: 40, description: Log lines shown of a failed Job's pod.}
  request_timeout: {type: int, default: 20, description: Seconds one API request may take.}
"""

# (apiVersion, kind) -> (plural, namespaced): the kinds provisioning writes or reads.
KINDS: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Secret"): ("secrets", True), ("v1", "ServiceAccount"): ("serviceaccounts", True),
    ("v1", "Namespace"): ("namespaces", False), ("v1", "Node"): ("nodes", False), ("v1", "Pod"): ("pods", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): ("clusterroles", False),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): ("clusterrolebindings", False),
    ("rbac.authorization.k8s.io/v1", "Role"): ("roles", True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("rolebindings", True),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): ("validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): ("validatingadmissionpolicybindings", False),
    ("batch/v1", "Job"): ("jobs", True), ("helm.cattle.io/v1", "HelmChart"): ("helmcharts", True),
}
_VOLATILE = ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid")


class ApiFailure(Exception):
    """An API answer other than the one expected (status and message)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status


def _path(api_version: str, kind: str, name: str | None, namespace: str | None) -> str:
    if (api_version, kind) not in KINDS:
        raise ValueError(f"dgxspark_k8s does not know {api_version} {kind}; known: {sorted(KINDS)}")
    plural, namespaced = KINDS[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} {name} needs a namespace")
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}" + (f"/{name}" if name else "")


class Client:
    """Raw REST calls over the kubernetes client's configured connection (auth, TLS, proxy as kubectl)."""

    def __init__(self, kubeconfig: str, context: str, request_timeout: int) -> None:
        from kubernetes import config

        self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
        self.timeout = request_timeout

    def call(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None,
             content_type: str = "application/json", raw: bool = False) -> Any:
        from kubernetes.client.rest import ApiException

        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            if hasattr(self.api, "param_serialize"):  # kubernetes >= 35 (new generator): serialize, then call
                method_, url, headers_, body_, post = self.api.param_serialize(
                    method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"])
                response = self.api.call_api(method_, url, header_params=headers_, body=body_, post_params=post,
                                             _request_timeout=self.timeout)
                payload, status = response.read(), response.status
                if status >= 400:
                    raise ApiException(status=status, reason=response.reason, http_resp=None, body=payload)
            else:  # kubernetes < 35
                response = self.api.call_api(path, method, query_params=query or [], header_params=headers, body=body,
                                             auth_settings=["BearerToken"], _preload_content=False,
                                             _request_timeout=self.timeout, _return_http_data_only=True)
                payload = response.data
        except ApiException as exc:
            raw_body = exc.body.decode(errors="replace") if isinstance(exc.body, bytes) else (exc.body or "{}")
            try:
                message = json.loads(raw_body).get("message", exc.reason)
            except ValueError:
                message = exc.reason
            raise ApiFailure(exc.status, str(message)) from None
        data = payload.decode("utf-8", errors="replace")
        return data if raw else (json.loads(data) if data else {})

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.call("GET", path)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise


def _normal(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def _summary(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """What may be logged of an object: never its data (Secrets)."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    return {"kind": obj.get("kind"), "name": meta.get("name"), "namespace": meta.get("namespace"),
            "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}


def apply(client: Client, definition: dict[str, Any], manager: str, check: bool) -> tuple[bool, dict[str, Any]]:
    meta = definition.get("metadata") or {}
    path = _path(definition.get("apiVersion", ""), definition.get("kind", ""), meta.get("name"), meta.get("namespace"))
    before = client.get(path)
    query = [("fieldManager", manager), ("force", "true")] + ([("dryRun", "All")] if check else [])
    after = client.call("PATCH", path, body=definition, query=query, content_type="application/apply-patch+yaml")
    if before is None:
        return True, after
    if check:
        return _normal(before) != _normal(after), after
    return (before.get("metadata") or {}).get("resourceVersion") != (after.get("metadata") or {}).get("resourceVersion"), after


def _job_state(job: dict[str, Any]) -> str:
    status = job.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Failed") == "True" or int(status.get("failed") or 0) > 0:
        return "failed"
    if conditions.get("Complete") == "True" or int(status.get("succeeded") or 0) > 0:
        return "succeeded"
    return "running"


def _log_tail(client: Client, namespace: str, job: dict[str, Any], lines: int) -> str:
    name, uid = job["metadata"]["name"], job["metadata"].get("uid")
    pods = client.call("GET", _path("v1", "Pod", None, namespace), query=[("labelSelector", f"job-name={name}")])
    mine = [p for p in pods.get("items") or []
            if not uid or any(o.get("uid") == uid for o in (p.get("metadata") or {}).get("ownerReferences") or [])]
    if not mine:
        return f"(no pod of job {name} left to read a log from)"
    pod = sorted(mine, key=lambda p: p["metadata"].get("creationTimestamp") or "")[-1]["metadata"]["name"]
    try:
        text = client.call("GET", _path("v1", "Pod", pod, namespace) + "/log", query=[("tailLines", str(lines))], raw=True)
    except ApiFailure as exc:
        return f"pod {pod}: log not readable: {exc}"
    return f"pod {pod}, last {lines} lines:\n{text.rstrip() or '(empty log)'}"


def wait_job(client: Client, p: dict[str, Any]) -> dict[str, Any]:
    path = _path("batch/v1", "Job", p["name"], p["namespace"])
    deadline = time.monotonic() + p["timeout"]
    last = "not created yet"
    while True:
        job = client.get(path)
        if job is not None and job["metadata"].get("uid") != p["previous_uid"]:
            state = _job_state(job)
            if state == "succeeded":
                return job
            if state == "failed":
                conditions = [f"{c.get('type')}: {c.get('reason', '')} {c.get('message', '')}".strip()
                              for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
                raise RuntimeError(f"job {p['namespace']}/{p['name']} of this apply failed "
                                   f"({'; '.join(conditions) or 'failed pods: ' + str(job['status'].get('failed'))}); "
                                   f"{_log_tail(client, p['namespace'], job, p['log_lines'])}")
            last = f"running (uid {job['metadata'].get('uid')}, active {(job.get('status') or {}).get('active', 0)})"
        elif job is not None:
            last = f"only the previous apply's job (uid {p['previous_uid']}) exists"
        if time.monotonic() >= deadline:
            raise RuntimeError(f"job {p['namespace']}/{p['name']} of this apply did not complete within {p['timeout']} s; "
                               f"last seen: {last}")
        time.sleep(p["poll"])


def request_token(client: Client, p: dict[str, Any]) -> dict[str, Any]:
    """A bound ServiceAccount token (TokenRequest): {token, expires}."""
    path = _path("v1", "ServiceAccount", p["name"], p["namespace"]) + "/token"
    answer = client.call("POST", path, body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                             "spec": {"expirationSeconds": p["expiration"]}})
    status = answer.get("status") or {}
    if not status.get("token"):
        raise RuntimeError(f"TokenRequest for serviceaccount {p['namespace']}/{p['name']} answered without a token")
    return {"token": status["token"], "expires": status.get("expirationTimestamp")}


def _innermost(error: BaseException) -> BaseException:
    while error.__cause__ is not None or getattr(error, "reason", None) is not None:
        inner = error.__cause__ or getattr(error, "reason", None)
        if not isinstance(inner, BaseException) or inner is error:
            break
        error = inner
    return error


def preflight(kubeconfig: str, contexts: list[str], timeout: int) -> list[str]:
    """Every reason the kubeconfig or an API of `contexts` cannot be used, one line each (empty: all usable)."""
    import os

    from kubernetes import client, config

    if not os.path.isfile(kubeconfig):
        return [f"kubeconfig {kubeconfig}: not found; write it with make rke2/kubeconfig SITE=<site>, or name the file "
                "with KUBECONFIG_OUT=... (the suite's order: the site's rke2/kubeconfig.yml, $KUBECONFIG, ~/.kube/config)"]
    import yaml

    try:
        with open(kubeconfig, encoding="utf-8") as handle:
            listed = (yaml.safe_load(handle) or {}).get("contexts") or []
        names = sorted(str(c.get("name", "")) for c in listed if isinstance(c, dict))
    except (OSError, ValueError, AttributeError, yaml.YAMLError) as exc:  # the kubeconfig's own fault, said once
        return [f"kubeconfig {kubeconfig}: cannot be read: {exc}"]
    problems = []
    for context in contexts:
        if context not in names:
            problems.append(f"kubeconfig {kubeconfig}: no context {context!r} (it has: {', '.join(names) or 'none'})")
            continue
        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
            cfg.retries = 0  # one attempt: a refused API is said once, not retried into a MaxRetryError
            client.VersionApi(client.ApiClient(cfg)).get_code(_request_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - each context's fault becomes its line
            inner = _innermost(exc)
            problems.append(f"context {context} ({cfg.host or 'no server'}): the API does not answer: "
                            f"{type(inner).__name__}: {str(inner)[:200]}")
    return problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kubeconfig": {"type": "path", "required": True}, "context": {"type": "str", "required": True},
            "action": {"type": "str", "required": True,
                       "choices": ["get", "apply", "wait_job", "token", "preflight"]},
            "expiration": {"type": "int", "default": 3600},
            "contexts": {"type": "list", "elements": "str", "default": []},
            "definition": {"type": "dict"}, "api_version": {"type": "str"}, "kind": {"type": "str"},
            "name": {"type": "str"}, "namespace": {"type": "str"},
            "field_manager": {"type": "str", "default": "dgxspark-provisioning"},
            "previous_uid": {"type": "str", "default": ""}, "timeout": {"type": "int", "default": 900},
            "poll": {"type": "int", "default": 5}, "log_lines": {"type": "int", "default": 40},
            "request_timeout": {"type": "int", "default": 20},
        },
        required_if=[("action", "apply", ["definition"]), ("action", "get", ["api_version", "kind", "name"]),
                     ("action", "wait_job", ["name", "namespace"]), ("action", "token", ["name", "namespace"])],
        supports_check_mode=True,
    )
    p = module.params
    if p["action"] == "preflight":
        problems = preflight(p["kubeconfig"], p["contexts"] or [p["context"]], p["request_timeout"])
        if problems:
            module.fail_json(msg="\n".join(problems))
        module.exit_json(changed=False, contexts=p["contexts"])
    try:
        client = Client(p["kubeconfig"], p["context"], p["request_timeout"])
        if p["action"] == "get":
            obj = client.get(_path(p["api_version"], p["kind"], p["name"], p["namespace"]))
            module.exit_json(changed=False, object=obj, found=obj is not None)
        if p["action"] == "apply":
            changed, obj = apply(client, p["definition"], p["field_manager"], module.check_mode)
            module.exit_json(changed=changed, object=_summary(obj))
        if p["action"] == "token":
            if module.check_mode:
                module.exit_json(changed=False, skipped=True, msg="check mode: no token requested")
            minted = request_token(client, p)
            module.exit_json(changed=False, token=minted["token"], expires=minted["expires"])
        job = wait_job(client, p)
        module.exit_json(changed=False, object=_summary(job), state="succeeded")
    except (ApiFailure, RuntimeError, ValueError, OSError) as exc:
        module.fail_json(msg=f"{p['context']}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a kubeconfig or connection fault becomes the task's message
        module.fail_json(msg=f"{p['context']}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
