"""The stand-in checked against the real kube-apiserver (issue 17 point 4): every request a suite run, the
provisioning's API calls (rke2/argocd/register's and rke2/suite/rbac's applies and TokenRequest; the operator apply's
preflight is a suite run) and the kubectl commands the tests use make is recorded on the stand-in, replayed in order on
a fresh stand-in and on the real control plane, and the answers compared after masking; every difference is fixed or
a row of docs/differential.md's table, and none is left unexplained."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jinja2
import pytest
import yaml

from pytest_dgxspark.testbed import differential
from pytest_dgxspark.testbed.differential import Accepted, Difference, Exchange
from tests import rbac, realplane_available
from tests.conftest import REPO

DOC = REPO / "docs" / "differential.md"
SCENARIO = "healthy"
# what the tests run with kubectl against a testbed (test_testbed_cluster.py, the provisioning rehearsal's kubectl)
KUBECTL = (("get", "nodes", "-o", "json"), ("get", "pods", "-A", "-o", "json"), ("get", "crd", "-o", "json"),
           ("get", "helmcharts", "-A", "-o", "json"), ("get", "namespaces"), ("version", "-o", "json"),
           ("auth", "can-i", "list", "pods"), ("explain", "clusterpolicy.spec.driver"))


def test_masking_hides_what_differs_between_any_two_servers() -> None:
    body = {"metadata": {"uid": "a", "resourceVersion": "7", "creationTimestamp": "t", "name": "n",
                         "managedFields": [{}]}, "status": {"addresses": [{"address": "172.29.1.2"}]}}
    assert differential.mask(body) == {"metadata": {"uid": "<masked>", "resourceVersion": "<masked>",
                                                    "creationTimestamp": "<masked>", "name": "n",
                                                    "managedFields": "<masked>"},
                                       "status": {"addresses": [{"address": "<address>"}]}}


def test_differences_name_the_status_and_each_field_once() -> None:
    exchange = Exchange("GET", "/api/v1/pods", "limit=500", "", "", 200, "")
    found = differential.differences(exchange, (200, {"items": [{"a": 1, "b": 2}, {"a": 1, "b": 3}]}),
                                     (403, {"items": [{"a": 1, "b": 4}, {"a": 1, "b": 5}], "kind": "PodList"}))
    assert [(d.where, d.standin, d.real) for d in found] == [
        ("status", 200, 403), ("items[*].b", 2, 4), ("kind", "<absent>", "PodList")]


@pytest.mark.parametrize(("resources", "expected"), [
    ({"limits": {"nvidia.com/gpu": "1"}}, "BestEffort"),  # the CUDA sample: what the real server said (measured)
    ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
    ({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}, "Burstable"),
    ({"requests": {"memory": "1Gi"}}, "Burstable"),
    ({}, "BestEffort"),
])
def test_the_stand_ins_qos_class_is_kube_apiservers(resources, expected) -> None:
    from pytest_dgxspark.testbed.writes import pod_defaults

    pod = {"spec": {"containers": [{"name": "c", "image": "i:1", "resources": dict(resources)}]}}
    pod_defaults(pod)
    assert pod["status"]["qosClass"] == expected
    requested = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}  # limits default requests
    assert pod["spec"]["containers"][0]["resources"].get("requests", {}) == requested


def test_recorded_secrets_keep_no_data_and_replay_as_valid_base64() -> None:
    secret = {"kind": "Secret", "data": {"token": "c2VjcmV0"}, "stringData": {"config": "{...}"}}
    scrubbed = differential.scrub({"items": [secret]})
    assert scrubbed == {"items": [{"kind": "Secret", "data": {"token": "<masked>"}, "stringData": {"config": "<masked>"}}]}
    exchange = Exchange("PATCH", "/api/v1/namespaces/kube-system/secrets/x", "", "application/apply-patch+yaml",
                        scrubbed["items"][0], 200, "")
    assert json.loads(differential.replay_body(exchange) or b"")["data"] == {"token": "bWFza2Vk"}


def test_the_accepted_table_is_read_from_the_docs_and_covers_by_glob(tmp_path) -> None:
    doc = tmp_path / "d.md"
    doc.write_text("# x\n\n## Accepted differences\n\n| request | where | reason |\n|---|---|---|\n"
                   "| `GET /api/v1/pods*` | `items[*].spec.*` | because |\n\n## After\n| `A` | `b` | not read |\n")
    table = differential.accepted_table(doc)
    assert table == [Accepted("GET /api/v1/pods*", "items[*].spec.*", "because")]
    hit = Difference("GET /api/v1/pods?limit=500", "suite", "items[*].spec.nodeName", 1, 2)
    miss = Difference("GET /api/v1/nodes", "suite", "items[*].spec.nodeName", 1, 2)
    assert differential.unexplained([hit, miss], table) == [miss]


def test_every_row_of_the_projects_accepted_table_has_a_reason() -> None:
    assert "## Accepted differences" in DOC.read_text()
    assert all(len(row.reason) > 20 for row in differential.accepted_table(DOC))


# --- the comparison itself ----------------------------------------------------------------------------------------


def _dgxspark_k8s():
    spec = importlib.util.spec_from_file_location("dgxspark_k8s", REPO / "provisioning" / "library" / "dgxspark_k8s.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _provisioning_calls(kubeconfig: Path, context: str, management: str) -> None:
    """The API calls rke2/argocd/register and rke2/suite/rbac make on both clusters, through the same module: the
    preflight of both APIs, the argocd-manager objects, the token Secret read and the TokenRequest on the workload
    cluster, the cluster Secret on the management cluster."""
    k8s = _dgxspark_k8s()
    assert k8s.preflight(str(kubeconfig), [context, management], 20) == []
    client = k8s.Client(str(kubeconfig), context, 20)
    templates = REPO / "provisioning" / "roles" / "argocd_register" / "templates"
    argocd = jinja2.Template((templates / "argocd-manager.yaml.j2").read_text()).render(
        argocd_register_system_namespace="kube-system")
    for obj in [d for d in yaml.safe_load_all(argocd) if d] + rbac.rendered("suite-rbac.yaml.j2"):
        k8s.apply(client, obj, "dgxspark-provisioning", False)
    secret = client.get(k8s._path("v1", "Secret", "argocd-manager-long-lived-token", "kube-system"))
    k8s.request_token(client, {"name": "dgxspark-suite", "namespace": "kube-system", "expiration": 3600})
    import base64

    environment = jinja2.Environment()
    environment.filters["b64encode"] = lambda text: base64.b64encode(str(text).encode()).decode()
    environment.filters["to_json"] = json.dumps
    environment.filters["combine"] = lambda a, b: {**a, **b}
    cluster_secret = yaml.safe_load(environment.from_string((templates / "cluster-secret.yaml.j2").read_text()).render(
        argocd_register_secret_name="cluster-differential", argocd_register_namespace="argocd", argocd_register_labels={},
        argocd_register_cluster_name="differential", argocd_register_server="https://172.29.9.2:6443",
        argocd_register_token=base64.b64decode((secret.get("data") or {}).get("token") or "").decode() or "t",
        argocd_register_ca=(secret.get("data") or {}).get("ca.crt") or ""))
    k8s.apply(k8s.Client(str(kubeconfig), management, 20), cluster_secret, "dgxspark-provisioning", False)


def _record(work: Path, monkeypatch: pytest.MonkeyPatch) -> list[Exchange]:
    from pytest_dgxspark.testbed import Testbed

    monkeypatch.setenv(differential.RECORD_ENV, "1")
    with Testbed(SCENARIO, work / "record") as testbed:
        monkeypatch.delenv(differential.RECORD_ENV)
        context = testbed.contexts["workload"]
        proc = subprocess.run([sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"),
                               "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig",
                               str(testbed.kubeconfig), "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir",
                               str(work / "r"), "-q", "-p", "no:cacheprovider"],
                              cwd=REPO, capture_output=True, text=True, timeout=400, check=False)
        assert (work / "r" / "latest" / "results.json").is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
        suite = len((testbed.directory / "exchanges.jsonl").read_text().splitlines())
        _provisioning_calls(testbed.kubeconfig, context, testbed.contexts["management"])
        provisioned = len((testbed.directory / "exchanges.jsonl").read_text().splitlines())
        if shutil.which("kubectl"):
            for args in KUBECTL:
                subprocess.run(["kubectl", "--kubeconfig", str(testbed.kubeconfig), "--context", context, *args],
                               capture_output=True, text=True, timeout=60, check=False)
        lines = (testbed.directory / "exchanges.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    sources = ["suite"] * suite + ["provisioning"] * (provisioned - suite) + ["kubectl"] * (len(records) - provisioned)
    return [Exchange.of({**r, "source": s}) for r, s in zip(records, sources)]


def _answers(exchanges: list[Exchange], work: Path, api: str) -> list[tuple[int | None, object]]:
    """Each cluster's exchanges replayed on that cluster of a fresh testbed (on the real plane both are real)."""
    from pytest_dgxspark.testbed import Testbed

    with Testbed(SCENARIO, work / api, api=api) as testbed:  # type: ignore[call-arg]
        answers: dict[int, tuple[int | None, object]] = {}
        for cluster in ("workload", "management"):
            mine = [i for i, e in enumerate(exchanges) if e.cluster == cluster]
            for i, answer in zip(mine, differential.replay([exchanges[i] for i in mine], testbed.kubeconfig,
                                                           testbed.contexts[cluster])):
                answers[i] = answer
        return [answers[i] for i in range(len(exchanges))]


@pytest.mark.slow
@pytest.mark.skipif(realplane_available.why_not() is not None, reason=realplane_available.why_not() or "")
def test_the_stand_in_answers_every_recorded_request_as_the_real_api_server(tmp_path, monkeypatch) -> None:
    exchanges = _record(tmp_path, monkeypatch)
    assert Counter(e.source for e in exchanges)["suite"] > 20
    assert {e.cluster for e in exchanges} == {"workload", "management"}
    standin = _answers(exchanges, tmp_path, "standin")
    real = _answers(exchanges, tmp_path, "real")
    found = [d for e, a, b in zip(exchanges, standin, real) for d in differential.differences(e, a, b)]
    table = differential.accepted_table(DOC)
    left = differential.unexplained(found, table)
    report = {"exchanges": len(exchanges), "by_source": dict(Counter(e.source for e in exchanges)),
              "by_cluster": dict(Counter(e.cluster for e in exchanges)),
              "differences": len(found), "unexplained": len(left), "rows": [d.row() for d in left]}
    (tmp_path / "differential.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}))
    assert [d.row() for d in left] == []
