"""A 403 is an `error` with its own cause naming the user, verb and resource RBAC denies, never a finding (issue 17
point 5); the stand-in answers it with kube-apiserver's Status, word for word, for `cluster.faults.forbidden`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.targets.causes import api_cause, denied, observed_status
from pytest_dgxspark.testbed.faults import Faults, FaultSpecError
from pytest_dgxspark.testbed.requestinfo import RequestInfo, forbidden_body, request_info
from tests.conftest import REPO

# slow: the suite against RBAC-limited testbeds (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

EXIT_INCOMPLETE = 8
SUITE_USER = "system:serviceaccount:kube-system:dgxspark-suite"


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/pods", {"limit": "500"}, ("list", "", "pods", "", "", "")),
    ("GET", "/api/v1/pods", {"watch": "true"}, ("watch", "", "pods", "", "", "")),
    ("GET", "/api/v1/namespaces/ns1/pods/p/log", {}, ("get", "", "pods", "log", "ns1", "p")),
    ("GET", "/api/v1/namespaces/ns1", {}, ("get", "", "namespaces", "", "ns1", "ns1")),
    ("POST", "/api/v1/namespaces", {}, ("create", "", "namespaces", "", "", "")),
    ("DELETE", "/api/v1/namespaces/dgxspark-cuda-x", {}, ("delete", "", "namespaces", "", "dgxspark-cuda-x", "dgxspark-cuda-x")),
    ("DELETE", "/api/v1/namespaces/ns1/pods", {}, ("deletecollection", "", "pods", "", "ns1", "")),
    ("PATCH", "/apis/coordination.k8s.io/v1/namespaces/ns1/leases/l", {}, ("patch", "coordination.k8s.io", "leases", "", "ns1", "l")),
    ("GET", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts", {"fieldSelector": "metadata.name=gpu-operator"},
     ("list", "helm.cattle.io", "helmcharts", "", "kube-system", "gpu-operator")),
    ("PUT", "/api/v1/namespaces/ns1/finalize", {}, ("update", "", "namespaces", "finalize", "ns1", "ns1")),
])
def test_request_attributes_are_kube_apiservers(method, path, query, expected) -> None:
    info = request_info(method, path, query)
    assert (info.verb, info.group, info.resource, info.subresource, info.namespace, info.name) == expected


def test_discovery_and_version_are_non_resource_requests() -> None:
    assert request_info("GET", "/version", {}).resource is None
    assert request_info("GET", "/apis/apps/v1", {}).resource is None


def test_the_forbidden_status_is_kube_apiservers_word_for_word() -> None:
    body = forbidden_body("u", request_info("GET", "/api/v1/pods", {}))
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
                    "code": 403, "details": {"kind": "pods"},
                    "message": 'pods is forbidden: User "u" cannot list resource "pods" in API group "" at the cluster scope'}
    named = forbidden_body("u", request_info("GET", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/x", {}))
    assert named["message"] == ('helmcharts.helm.cattle.io "x" is forbidden: User "u" cannot get resource "helmcharts" in '
                                'API group "helm.cattle.io" in the namespace "kube-system"')
    assert named["details"] == {"name": "x", "group": "helm.cattle.io", "kind": "helmcharts"}
    log = forbidden_body("u", request_info("GET", "/api/v1/namespaces/n/pods/p/log", {}))["message"]
    assert log == 'pods "p" is forbidden: User "u" cannot get resource "pods/log" in API group "" in the namespace "n"'
    path = forbidden_body("u", RequestInfo("get", "/version"))
    assert (path["message"], path["details"]) == ('forbidden: User "u" cannot get path "/version"', {})


def test_a_forbidden_entry_matches_on_the_attributes_it_names() -> None:
    faults = Faults({"forbidden": [{"verb": "list", "resource": "pods"},
                                   {"verb": "*", "resource": "secrets", "namespace": "argocd", "user": "a"}]})
    assert faults.denies("x", request_info("GET", "/api/v1/pods", {}))
    assert not faults.denies("x", request_info("GET", "/api/v1/pods", {"watch": "1"}))
    assert not faults.denies("x", request_info("GET", "/api/v1/namespaces/n/pods/p", {}))
    assert faults.denies("a", request_info("GET", "/api/v1/namespaces/argocd/secrets", {}))
    assert not faults.denies("b", request_info("GET", "/api/v1/namespaces/argocd/secrets", {}))
    assert not faults.denies("x", request_info("GET", "/version", {}))


@pytest.mark.parametrize(("spec", "message"), [
    ({"forbidden": {"verb": "list"}}, "cluster.faults.forbidden: expected a list of {verb, resource, group, namespace, "
                                      "user}, got {'verb': 'list'}"),
    ({"forbidden": [{"verbs": "list"}]}, "cluster.faults.forbidden[0]: expected a mapping of ['group', 'namespace', "
                                         "'resource', 'user', 'verb'] to strings (e.g. {verb: list, resource: pods}), "
                                         "got {'verbs': 'list'}"),
])
def test_a_bad_forbidden_entry_is_refused_naming_it(spec, message) -> None:
    with pytest.raises(FaultSpecError) as info:
        Faults(spec)
    assert str(info.value) == message


def _error(body: dict) -> ApiException:
    return ApiException(status=403, reason="Forbidden", body=json.dumps(body))


def test_an_rbac_denial_is_its_own_cause_naming_user_verb_and_resource() -> None:
    error = _error(forbidden_body(SUITE_USER, request_info("GET", "/apis/nvidia.com/v1/clusterpolicies", {})))
    cause = api_cause(error)
    assert cause.kind == "forbidden"
    assert cause.meaning == (f'RBAC denies {SUITE_USER} list clusterpolicies (API group "nvidia.com") at the cluster '
                             "scope (no role bound to it grants that)")
    assert cause.fix.startswith(f'Grant {SUITE_USER} "list" on clusterpolicies (API group "nvidia.com") at the cluster '
                                "scope: apply the suite's least-privilege role with make rke2/suite/rbac")
    assert "never that the site is wrong" in cause.fix and "make rke2/suite/rbac" in cause.fix_ko
    refusal = denied(error)
    assert refusal is not None and (refusal.verb, refusal.resource, refusal.namespace) == ("list", "clusterpolicies", None)
    assert observed_status(error) == ("HTTP 403 Forbidden: clusterpolicies.nvidia.com is forbidden: User "
                                      f'"{SUITE_USER}" cannot list resource "clusterpolicies" in API group "nvidia.com" '
                                      "at the cluster scope")


def test_a_403_from_admission_is_forbidden_without_an_rbac_grant_to_suggest() -> None:
    error = _error({"kind": "Status", "code": 403, "reason": "Forbidden",
                    "message": 'pods "p" is forbidden: pod rejected: RuntimeClass "nvidia" not found'})
    cause = api_cause(error)
    assert cause.kind == "forbidden" and denied(error) is None
    assert cause.meaning == "the API refused the request (not by RBAC: admission or the namespace's state)"
    assert "Grant" not in cause.fix


def test_a_401_is_still_credentials_rejected() -> None:
    assert api_cause(ApiException(status=401, reason="Unauthorized")).kind == "credentials-rejected"


def _run(tmp_path, scenario: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--testbed", str(REPO / "tests" / "scenarios" / scenario),
         "--report-dir", str(tmp_path / "r"), "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    results = tmp_path / "r" / "latest" / "results.json"
    assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(results.read_text())


def test_checks_denied_the_pods_are_each_an_error_naming_list_pods_and_the_run_is_incomplete(tmp_path) -> None:
    proc, doc = _run(tmp_path, "api-forbids-pods")
    assert (doc["verdict"], proc.returncode) == ("INCOMPLETE", EXIT_INCOMPLETE), proc.stdout[-3000:]
    assert doc["root_causes"] == [] and doc["lowest_broken_layer"] is None  # a 403 judges nothing about the site
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    assert "failed" not in statuses.values()
    denied_rules = {"ADR-0002.driver-source", "ADR-0002.gpu-injection", "ADR-0001.cni-cilium", "ADR-0002.operator-running"}
    assert {rid for rid, status in statuses.items() if status == "error"} == denied_rules
    tests = [t for r in doc["rules"] if r["id"] in denied_rules for t in r["tests"] if t["outcome"] == "error"]
    assert tests and all(t["cause"] == "forbidden" for t in tests)  # each its own error: none blocked by another's 403
    assert all('RBAC denies system:admin list pods (API group "") at the cluster scope' in t["message"] and
               'User "system:admin" cannot list resource "pods" in API group "" at the cluster scope' in t["message"]
               for t in tests)
    judged = {d["rule"]: d for d in doc["not_judged"]}
    assert set(judged) == denied_rules
    assert all(d["cause"] == "forbidden" and d["fix"].startswith('Grant system:admin "list" on pods (API group "") at '
                                                                  "the cluster scope") for d in judged.values())
    assert statuses["ADR-0001.kubeconfig-context"] == "passed" and statuses["ADR-0001.node-ready"] == "passed"


def test_a_user_who_may_not_create_leases_still_runs_the_cuda_sample_and_says_what_was_not_checked(tmp_path) -> None:
    proc, doc = _run(tmp_path, "api-forbids-leases", "-m", "workload")
    assert {r["id"]: r["status"] for r in doc["rules"]}["ADR-0002.cuda-sample"] == "passed", proc.stdout[-3000:]
    # each workload check's own namespace (the CUDA sample's, the isolation probes') has no Lease: every one is said
    own = doc["leftover_namespaces"]
    assert own and all(n["namespace"].startswith("dgxspark-cuda-") and n["state"] == (
        "this run's: no Lease (HTTP 403 Forbidden); other runs remove it only after the CUDA timeout") for n in own), own
    assert any(not n["namespace"].endswith(("-nogpu", "-onegpu", "-sharing")) for n in own), own
