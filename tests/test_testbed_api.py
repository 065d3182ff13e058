"""The testbed's Kubernetes API as kubectl users and provisioning use it: paging, dry-run, PATCH/PUT/apply, identity."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import tempfile
import time
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from pytest_dgxspark.testbed import Testbed
from pytest_dgxspark.testbed.scenario import ScenarioError, load

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config  # noqa: E402

# slow: a testbed's API server per module and per fault (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


@pytest.fixture(scope="module")
def tb(tmp_path_factory: pytest.TempPathFactory):
    bed = Testbed("healthy", tmp_path_factory.mktemp("api"), _without_hosts=True).up()
    try:
        yield bed
    finally:
        bed.down()


def _api(bed: Testbed, role: str = "workload") -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(bed.kubeconfig), context=bed.contexts[role], client_configuration=configuration)
    configuration.retries = False
    return client.ApiClient(configuration)


class Raw:
    """Plain HTTPS requests with the kubeconfig's client certificate: what any client sends, byte for byte."""

    def __init__(self, bed: Testbed, role: str = "workload") -> None:
        kc = yaml.safe_load(bed.kubeconfig.read_text())
        name = bed.contexts[role]
        cluster = next(c["cluster"] for c in kc["clusters"] if c["name"] == name)
        user = next(u["user"] for u in kc["users"] if u["name"] == name)
        self.url = urlsplit(cluster["server"])
        self.ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        folder = Path(tempfile.mkdtemp(prefix="raw-"))
        (folder / "c.pem").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (folder / "k.pem").write_bytes(base64.b64decode(user["client-key-data"]))
        self.with_cert = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        self.with_cert.load_cert_chain(folder / "c.pem", folder / "k.pem")

    def __call__(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                 anonymous: bool = False, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        conn = HTTPSConnection(self.url.hostname, self.url.port, context=self.ctx if anonymous else self.with_cert, timeout=10)
        raw = body if isinstance(body, (bytes, type(None))) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        conn.request(method, path, body=raw, headers={"Content-Type": content_type, "Accept": "application/json",
                                                      **(headers or {})})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        try:
            parsed: Any = json.loads(data)
        except ValueError:
            parsed = data.decode()
        return resp.status, dict(resp.getheaders()), parsed


@pytest.fixture(scope="module")
def raw(tb: Testbed) -> Raw:
    return Raw(tb)


def _configmap(name: str, data: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data or {"a": "1"}}


# --- paging ---------------------------------------------------------------------------------------------------


def test_list_with_a_limit_pages_through_every_pod_with_continue_tokens(tb: Testbed, raw: Raw) -> None:
    code, _, everything = raw("GET", "/api/v1/pods")
    assert code == 200 and "continue" not in everything["metadata"]
    total = len(everything["items"])
    assert total > 6
    seen: list[str] = []
    code, _, first = raw("GET", "/api/v1/pods?limit=4")
    assert code == 200 and len(first["items"]) == 4
    assert first["metadata"]["remainingItemCount"] == total - 4
    token = first["metadata"]["continue"]
    assert json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["v"] == "meta.k8s.io/v1"
    page = first
    while True:
        seen += [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in page["items"]]
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        if not page["metadata"].get("continue"):
            assert "remainingItemCount" not in page["metadata"]
            break
        code, _, page = raw("GET", f"/api/v1/pods?limit=4&continue={page['metadata']['continue']}")
        assert code == 200
    assert seen == sorted(seen) and len(seen) == len(set(seen)) == total


def test_continued_list_is_the_snapshot_of_the_first_page(tb: Testbed, raw: Raw) -> None:
    for name in ("snap-a", "snap-b", "snap-c"):
        assert raw("POST", "/api/v1/namespaces/default/configmaps", _configmap(name))[0] == 201
    _, _, first = raw("GET", "/api/v1/namespaces/default/configmaps?limit=1&labelSelector=")
    names = [c["metadata"]["name"] for c in first["items"]]
    token = first["metadata"]["continue"]
    assert raw("DELETE", "/api/v1/namespaces/default/configmaps/snap-c")[0] == 200
    assert raw("POST", "/api/v1/namespaces/default/configmaps", _configmap("snap-0"))[0] == 201
    while token:
        _, _, page = raw("GET", f"/api/v1/namespaces/default/configmaps?limit=1&continue={token}")
        names += [c["metadata"]["name"] for c in page["items"]]
        token = page["metadata"].get("continue")
    assert [n for n in names if n.startswith("snap-")] == ["snap-a", "snap-b", "snap-c"]


def test_resource_version_match_exact_lists_the_past(raw: Raw) -> None:
    _, _, before = raw("GET", "/api/v1/namespaces/default/configmaps")
    raw("POST", "/api/v1/namespaces/default/configmaps", _configmap("exact-new"))
    rv = before["metadata"]["resourceVersion"]
    _, _, past = raw("GET", f"/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=Exact")
    assert past["metadata"]["resourceVersion"] == rv and past["items"] == before["items"]
    _, _, now = raw("GET", "/api/v1/namespaces/default/configmaps")
    assert "exact-new" in {c["metadata"]["name"] for c in now["items"]}


def test_a_selector_pages_without_remaining_item_count(raw: Raw) -> None:
    _, _, page = raw("GET", "/api/v1/pods?limit=1&labelSelector=app.kubernetes.io/managed-by%3Dgpu-operator")
    assert len(page["items"]) == 1 and page["metadata"]["continue"] and "remainingItemCount" not in page["metadata"]


def test_a_forged_continue_token_is_a_400(raw: Raw) -> None:
    code, headers, body = raw("GET", "/api/v1/pods?limit=1&continue=bm90LWpzb24")
    assert code == 400 and body["reason"] == "BadRequest"
    assert body["message"].startswith("invalid continue token: continue key is not valid: ")


def test_every_kind_honours_limit(tb: Testbed, raw: Raw) -> None:
    from pytest_dgxspark.testbed.resources import RESOURCES

    for r in (r for r in RESOURCES if not r.virtual):
        prefix = f"/api/{r.version}" if not r.group else f"/apis/{r.group_version}"
        _, _, all_items = raw("GET", f"{prefix}/{r.plural}")
        _, _, one = raw("GET", f"{prefix}/{r.plural}?limit=1")
        assert len(one["items"]) == min(1, len(all_items["items"])), r.plural
        assert bool(one["metadata"].get("continue")) == (len(all_items["items"]) > 1), r.plural


def test_the_suites_cluster_reader_follows_continue_tokens(tb: Testbed, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dgxspark.targets.cluster import Cluster

    cluster = Cluster(tb.kubeconfig, tb.contexts["workload"])
    pages: list[int] = []
    real_get = Cluster.get

    def small_pages(self: Cluster, path: str, query: list[tuple[str, Any]] | None = None) -> Any:
        query = [(k, 3 if k == "limit" else v) for k, v in (query or [])]
        document = real_get(self, path, query)
        pages.append(len(document.get("items") or []))
        return document

    monkeypatch.setattr(Cluster, "get", small_pages)
    pods = cluster.list("pods")
    expected = client.CoreV1Api(_api(tb)).list_pod_for_all_namespaces().items
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(p.metadata.name for p in expected)
    assert len(pages) > 2 and all(n <= 3 for n in pages)


# --- dry-run --------------------------------------------------------------------------------------------------


def test_dry_run_never_mutates_on_any_verb(tb: Testbed, raw: Raw) -> None:
    raw("POST", "/api/v1/namespaces/default/configmaps", _configmap("dry"))
    _, _, before = raw("GET", "/api/v1/namespaces/default/configmaps/dry")
    code, _, made = raw("POST", "/api/v1/namespaces/default/configmaps?dryRun=All", _configmap("dry-new"))
    assert code == 201 and made["metadata"]["name"] == "dry-new" and "resourceVersion" not in made["metadata"]
    assert raw("GET", "/api/v1/namespaces/default/configmaps/dry-new")[0] == 404
    code, _, patched = raw("PATCH", "/api/v1/namespaces/default/configmaps/dry?dryRun=All", {"data": {"a": "2"}},
                           "application/merge-patch+json")
    assert code == 200 and patched["data"] == {"a": "2"}
    code, _, put = raw("PUT", "/api/v1/namespaces/default/configmaps/dry?dryRun=All", {**before, "data": {"b": "3"}})
    assert code == 200 and put["data"] == {"b": "3"}
    code, _, gone = raw("DELETE", "/api/v1/namespaces/default/configmaps/dry?dryRun=All")
    assert code == 200 and gone["status"] == "Success" and gone["details"]["name"] == "dry"
    assert raw("GET", "/api/v1/namespaces/default/configmaps/dry")[2] == before
    code, _, ns = raw("DELETE", "/api/v1/namespaces/default/configmaps/dry", {"kind": "DeleteOptions", "apiVersion": "v1",
                                                                           "dryRun": ["All"]})
    assert code == 200 and raw("GET", "/api/v1/namespaces/default/configmaps/dry")[2] == before


def test_server_dry_run_delete_of_a_namespace_keeps_it(tb: Testbed) -> None:
    v1 = client.CoreV1Api(_api(tb))
    v1.create_namespace({"metadata": {"name": "dry-ns"}})
    answer = v1.delete_namespace("dry-ns", dry_run="All")
    assert (answer["status"] if isinstance(answer, dict) else answer.status.to_dict())["phase"] == "Terminating"
    time.sleep(0.5)
    assert v1.read_namespace("dry-ns").status.phase == "Active"


def test_an_unknown_dry_run_value_is_refused(raw: Raw) -> None:
    code, _, body = raw("POST", "/api/v1/namespaces/default/configmaps?dryRun=Yes", _configmap("x"))
    assert code == 400 and body["message"] == 'dryRun: Unsupported value: "Yes": supported values: "All"'


# --- PATCH, PUT, apply ------------------------------------------------------------------------------------------


def test_node_label_and_cordon_by_strategic_merge_patch_move_resource_version_not_generation(raw: Raw) -> None:
    try:
        _label_and_cordon(raw)
    finally:  # never leave the shared node cordoned for the tests after this one
        raw("PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"tier": None}}, "spec": {"unschedulable": None}},
            "application/merge-patch+json")


def test_a_repeated_patch_or_apply_is_a_no_op_even_a_second_later(raw: Raw) -> None:
    path = "/api/v1/namespaces/default/configmaps/noop"
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: noop\ndata:\n  a: '1'\n"
    first = raw("PATCH", path + "?fieldManager=prov", doc, "application/apply-patch+yaml")[2]
    patched = raw("PATCH", path, {"data": {"b": "2"}}, "application/merge-patch+json")[2]
    time.sleep(1.1)  # managedFields times have a one-second resolution
    assert raw("PATCH", path + "?fieldManager=prov", doc, "application/apply-patch+yaml")[2] == patched
    assert raw("PATCH", path, {"data": {"b": "2"}}, "application/merge-patch+json")[2] == patched
    assert int(patched["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def _label_and_cordon(raw: Raw) -> None:
    _, _, node = raw("GET", "/api/v1/nodes/gpu-01")
    code, _, labelled = raw("PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"tier": "gold"}},
                                                              "spec": {"unschedulable": True}},
                            "application/strategic-merge-patch+json")
    assert code == 200 and labelled["metadata"]["labels"]["tier"] == "gold" and labelled["spec"]["unschedulable"] is True
    assert int(labelled["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
    assert "generation" not in labelled["metadata"]
    assert labelled["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-01"
    assert labelled["status"] == node["status"]
    again = raw("PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"tier": "gold"}}}, "application/merge-patch+json")[2]
    assert again["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]  # a no-op writes nothing
    undone = raw("PATCH", "/api/v1/nodes/gpu-01", {"metadata": {"labels": {"tier": None}}, "spec": {"unschedulable": None}},
                 "application/merge-patch+json")[2]
    assert "tier" not in undone["metadata"]["labels"] and "unschedulable" not in undone["spec"]


def test_json_patch_adds_a_taint_and_a_failed_test_op_changes_nothing(raw: Raw) -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    code, _, node = raw("PATCH", "/api/v1/nodes/gpu-01", [{"op": "add", "path": "/spec/taints", "value": [taint]}],
                        "application/json-patch+json")
    assert code == 200 and node["spec"]["taints"] == [taint]
    code, _, body = raw("PATCH", "/api/v1/nodes/gpu-01", [{"op": "test", "path": "/spec/taints/0/value", "value": "cpu"},
                                                          {"op": "remove", "path": "/spec/taints"}], "application/json-patch+json")
    assert code == 422 and body["message"] == "testing value /spec/taints/0/value failed: test failed"
    assert raw("GET", "/api/v1/nodes/gpu-01")[2]["spec"]["taints"] == [taint]
    raw("PATCH", "/api/v1/nodes/gpu-01", [{"op": "remove", "path": "/spec/taints"}], "application/json-patch+json")


def test_helmchart_merge_patch_bumps_generation_and_strategic_patch_is_415(raw: Raw) -> None:
    path = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/gpu-operator"
    _, _, chart = raw("GET", path)
    code, _, patched = raw("PATCH", path, {"spec": {"timeout": "600s"}}, "application/merge-patch+json")
    assert code == 200 and patched["spec"]["timeout"] == "600s" and patched["spec"]["chart"] == chart["spec"]["chart"]
    assert patched["metadata"]["generation"] == chart["metadata"].get("generation", 1) + 1
    code, _, body = raw("PATCH", path, {"spec": {"timeout": "700s"}}, "application/strategic-merge-patch+json")
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    assert body["message"] == ("the body of the request was in an unknown format - accepted media types include: "
                               "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")


def test_put_with_a_stale_resource_version_is_a_409_conflict(raw: Raw) -> None:
    raw("POST", "/api/v1/namespaces/default/configmaps", _configmap("put-me"))
    _, _, cm = raw("GET", "/api/v1/namespaces/default/configmaps/put-me")
    code, _, updated = raw("PUT", "/api/v1/namespaces/default/configmaps/put-me", {**cm, "data": {"a": "2"}})
    assert code == 200 and int(updated["metadata"]["resourceVersion"]) > int(cm["metadata"]["resourceVersion"])
    assert updated["metadata"]["uid"] == cm["metadata"]["uid"]
    code, _, body = raw("PUT", "/api/v1/namespaces/default/configmaps/put-me", {**cm, "data": {"a": "3"}})
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "put-me": the object has been modified; '
                               "please apply your changes to the latest version and try again")
    code, _, body = raw("PUT", "/api/v1/namespaces/default/configmaps/put-me", {**cm, "metadata": {"name": "other"}})
    assert code == 400 and body["message"] == "the name of the object (other) does not match the name on the URL (put-me)"
    code, _, body = raw("PUT", "/api/v1/namespaces/default/configmaps/absent", _configmap("absent"))
    assert code == 404 and body["message"] == 'configmaps "absent" not found'


@pytest.mark.parametrize("path", ["/api/v1/nodes/gpu-01", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/gpu-operator",
                                  "/api/v1/namespaces/kube-system", "/api/v1/namespaces/kube-system/configmaps/cilium-config"])
def test_put_of_each_kind_provisioning_writes_detects_a_lost_update(raw: Raw, path: str) -> None:
    _, _, first = raw("GET", path)
    labelled = {**first, "metadata": {**first["metadata"], "labels": {**first["metadata"].get("labels", {}), "put-test": "1"}}}
    code, _, updated = raw("PUT", path, labelled)
    assert code == 200 and updated["metadata"]["labels"]["put-test"] == "1"
    assert updated["metadata"]["uid"] == first["metadata"]["uid"]
    assert updated["metadata"].get("generation") == first["metadata"].get("generation")  # metadata is not spec
    code, _, body = raw("PUT", path, {**labelled, "metadata": {**labelled["metadata"], "labels": {"put-test": "2"}}})
    assert code == 409 and body["reason"] == "Conflict" and body["details"]["name"] == first["metadata"]["name"]
    raw("PATCH", path, {"metadata": {"labels": {"put-test": None}}}, "application/merge-patch+json")


def test_put_on_a_custom_resource_needs_a_resource_version(raw: Raw) -> None:
    path = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/gpu-operator"
    _, _, chart = raw("GET", path)
    del chart["metadata"]["resourceVersion"]
    code, _, body = raw("PUT", path, chart)
    assert code == 422 and body["message"] == ('HelmChart.helm.cattle.io "gpu-operator" is invalid: metadata.resourceVersion: '
                                               "Invalid value: 0x0: must be specified for an update")


def test_secret_string_data_is_stored_as_base64_data(raw: Raw) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster-x", "namespace": "default",
              "labels": {"argocd.argoproj.io/secret-type": "cluster"}}, "stringData": {"name": "x", "server": "https://10.0.0.1:6443"}}
    code, _, made = raw("POST", "/api/v1/namespaces/default/secrets", secret)
    assert code == 201 and "stringData" not in made and made["type"] == "Opaque"
    assert base64.b64decode(made["data"]["server"]).decode() == "https://10.0.0.1:6443"


def test_server_side_apply_creates_then_updates_and_reports_conflicts(raw: Raw) -> None:
    path = "/api/v1/namespaces/default/configmaps/applied"
    doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  labels: {team: infra}\ndata:\n  a: '1'\n  b: '2'\n"
    code, _, made = raw("PATCH", path + "?fieldManager=ansible", doc, "application/apply-patch+yaml")
    assert code == 201 and made["data"] == {"a": "1", "b": "2"}
    entry = made["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"], entry["fieldsType"]) == ("ansible", "Apply", "FieldsV1")
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:team": {}}}}
    code, _, updated = raw("PATCH", path + "?fieldManager=ansible", doc.replace("  b: '2'\n", ""), "application/apply-patch+yaml")
    assert code == 200 and updated["data"] == {"a": "1"}  # a field the manager stopped applying is removed
    code, _, body = raw("PATCH", path + "?fieldManager=someone-else", doc.replace("'1'", "'9'"), "application/apply-patch+yaml")
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "ansible" using v1: .data.a'
    code, _, forced = raw("PATCH", path + "?fieldManager=someone-else&force=true", doc.replace("'1'", "'9'"),
                          "application/apply-patch+yaml")
    assert code == 200 and forced["data"]["a"] == "9"
    code, _, body = raw("PATCH", path, doc, "application/apply-patch+yaml")
    assert code == 422 and body["message"].endswith("fieldManager: Required value: is required for apply patch")


def test_server_side_apply_sets_an_applied_list_as_applied(raw: Raw) -> None:
    path = "/apis/apps/v1/namespaces/default/deployments/ssa-web?fieldManager=prov"
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ssa-web"},
              "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": {"metadata": {"labels": {"app": "w"}}, "spec": {
                  "containers": [{"name": "a", "image": "busybox:1.36"}, {"name": "b", "image": "busybox:1.36"}]}}}}
    assert raw("PATCH", path, json.dumps(deploy), "application/apply-patch+yaml")[0] == 201
    deploy["spec"]["template"]["spec"]["containers"].pop()
    code, _, applied = raw("PATCH", path, json.dumps(deploy), "application/apply-patch+yaml")
    assert code == 200 and [c["name"] for c in applied["spec"]["template"]["spec"]["containers"]] == ["a"]
    assert applied["metadata"]["generation"] == 2


def test_server_side_apply_of_a_helmchart_creates_it(raw: Raw) -> None:
    chart = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": {"name": "extra", "namespace": "kube-system"},
             "spec": {"chart": "gpu-operator", "repo": "https://helm.ngc.nvidia.com/nvidia", "version": "v26.3.2"}}
    path = "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/extra?fieldManager=kubernetes.core"
    code, _, made = raw("PATCH", path + "&dryRun=All", json.dumps(chart), "application/apply-patch+yaml")
    assert code == 201 and raw("GET", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts/extra")[0] == 404
    code, _, made = raw("PATCH", path, json.dumps(chart), "application/apply-patch+yaml")
    assert code == 201 and made["metadata"]["generation"] == 1 and made["spec"]["version"] == "v26.3.2"
    chart["spec"]["version"] = "v26.3.3"
    code, _, updated = raw("PATCH", path, json.dumps(chart), "application/apply-patch+yaml")
    assert code == 200 and updated["metadata"]["generation"] == 2


def test_official_client_patches_and_replaces_the_kinds_provisioning_writes(tb: Testbed) -> None:
    api = _api(tb)
    v1, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    node = v1.patch_node("gpu-01", {"metadata": {"labels": {"node.tirosh.ai/pool": "a"}}})
    assert node.metadata.labels["node.tirosh.ai/pool"] == "a"
    v1.create_namespace({"metadata": {"name": "prov"}})
    ns = v1.read_namespace("prov")
    ns.metadata.labels["team"] = "platform"
    assert v1.replace_namespace("prov", ns).metadata.labels["team"] == "platform"
    v1.create_namespaced_config_map("prov", _configmap("values"))
    cm = v1.patch_namespaced_config_map("values", "prov", {"data": {"b": "2"}})
    assert cm.data == {"a": "1", "b": "2"}
    chart = co.patch_namespaced_custom_object("helm.cattle.io", "v1", "kube-system", "helmcharts", "gpu-operator",
                                              {"spec": {"targetNamespace": "gpu-operator"}})
    assert chart["spec"]["targetNamespace"] == "gpu-operator"
    lease = client.CoordinationV1Api(api).read_namespaced_lease("gpu-01", "kube-node-lease")
    assert lease.spec.holder_identity == "gpu-01"


def test_argocd_cluster_secret_is_updated_in_the_management_cluster(tb: Testbed) -> None:
    v1 = client.CoreV1Api(_api(tb, "management"))
    secret = v1.list_namespaced_secret("argocd", label_selector="argocd.argoproj.io/secret-type=cluster").items[0]
    patched = v1.patch_namespaced_secret(secret.metadata.name, "argocd", {"metadata": {"labels": {"env": "prod"}}})
    assert patched.metadata.labels["env"] == "prod" and patched.data == secret.data
    stale = secret
    stale.metadata.labels["env"] = "dev"
    with pytest.raises(client.ApiException) as info:
        v1.replace_namespaced_secret(secret.metadata.name, "argocd", stale)
    assert info.value.status == 409


# --- self-identification ----------------------------------------------------------------------------------------


def test_every_answer_names_the_testbed_scenario(raw: Raw) -> None:
    answers = [raw("GET", "/version"), raw("GET", "/api/v1/nodes", anonymous=True), raw("GET", "/api/v1/nodes/absent"),
               raw("GET", "/nope"), raw("POST", "/api/v1/namespaces", {"metadata": {"name": "default"}}),
               raw("DELETE", "/api/v1/namespaces/kube-system"), raw("GET", "/apis/helm.cattle.io/v1/helmcharts")]
    assert [code for code, _, _ in answers] == [200, 401, 404, 404, 409, 403, 200]
    assert {headers.get("X-Dgxspark-Testbed") for _, headers, _ in answers} == {"healthy"}


def test_every_node_carries_the_scenario_annotation(tb: Testbed) -> None:
    nodes = client.CoreV1Api(_api(tb)).list_node().items
    assert nodes and {n.metadata.annotations["testbed.dgxspark.io/scenario"] for n in nodes} == {"healthy"}


# --- kubectl as users run it ------------------------------------------------------------------------------------


def _kubectl(bed: Testbed, *args: str, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([KUBECTL or "kubectl", "--kubeconfig", str(bed.kubeconfig), *args], capture_output=True, text=True,
                          timeout=60, input=stdin)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


@needs_kubectl
def test_kubectl_label_annotate_cordon_and_patch(tb: Testbed) -> None:
    try:
        _kubectl_writes(tb)
    finally:
        _kubectl(tb, "uncordon", "gpu-01", ok=False)


def _kubectl_writes(tb: Testbed) -> None:
    assert _kubectl(tb, "label", "node", "gpu-01", "rack=r1").stdout.strip() == "node/gpu-01 labeled"
    assert _kubectl(tb, "annotate", "node", "gpu-01", "owner=platform").stdout.strip() == "node/gpu-01 annotated"
    assert _kubectl(tb, "cordon", "gpu-01").stdout.strip() == "node/gpu-01 cordoned"
    assert "SchedulingDisabled" in _kubectl(tb, "get", "node", "gpu-01").stdout
    assert _kubectl(tb, "uncordon", "gpu-01").stdout.strip() == "node/gpu-01 uncordoned"
    out = _kubectl(tb, "patch", "-n", "kube-system", "helmchart", "gpu-operator", "--type=merge",
                   "-p", '{"spec":{"timeout":"900s"}}').stdout
    assert out.strip() == "helmchart.helm.cattle.io/gpu-operator patched"
    node = json.loads(_kubectl(tb, "get", "node", "gpu-01", "-o", "json").stdout)
    assert node["metadata"]["labels"]["rack"] == "r1" and node["metadata"]["annotations"]["owner"] == "platform"
    assert not node["spec"].get("unschedulable")
    assert _kubectl(tb, "label", "node", "gpu-01", "rack-").stdout.strip() == "node/gpu-01 unlabeled"


@needs_kubectl
def test_kubectl_dry_run_server_delete_keeps_the_object(tb: Testbed, raw: Raw) -> None:
    raw("POST", "/api/v1/namespaces/default/configmaps", _configmap("keep-me"))
    out = _kubectl(tb, "delete", "configmap", "keep-me", "-n", "default", "--dry-run=server").stdout
    assert out.strip() == 'configmap "keep-me" deleted (server dry run)'
    assert _kubectl(tb, "get", "configmap", "keep-me", "-n", "default", "-o", "name").stdout.strip() == "configmap/keep-me"


# --- OpenAPI, kubectl apply and explain -------------------------------------------------------------------------


def test_openapi_v3_root_points_at_one_document_per_group_version(raw: Raw) -> None:
    code, headers, root = raw("GET", "/openapi/v3")
    assert code == 200 and {"api/v1", "apis/apps/v1", "apis/helm.cattle.io/v1", "apis/coordination.k8s.io/v1"} <= set(root["paths"])
    code, _, doc = raw("GET", root["paths"]["api/v1"]["serverRelativeURL"])
    assert code == 200 and doc["openapi"] == "3.0.0"
    node = doc["components"]["schemas"]["io.k8s.api.core.v1.Node"]
    assert node["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Node", "version": "v1"}]
    assert node["description"].startswith("Node is a worker node in Kubernetes.")
    spec = doc["components"]["schemas"]["io.k8s.api.core.v1.NodeSpec"]["properties"]["unschedulable"]
    assert spec["type"] == "boolean" and spec["description"].startswith("Unschedulable controls node schedulability")
    assert "name" in doc["components"]["schemas"]["io.k8s.api.core.v1.Container"]["required"]
    patch = doc["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    _, _, helm = raw("GET", root["paths"]["apis/helm.cattle.io/v1"]["serverRelativeURL"])
    cr_patch = helm["paths"]["/apis/helm.cattle.io/v1/namespaces/{namespace}/helmcharts/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in cr_patch["requestBody"]["content"]
    code, _, v2 = raw("GET", "/openapi/v2")
    assert code == 200 and v2["swagger"] == "2.0" and "io.k8s.api.core.v1.Node" in v2["definitions"]
    assert raw("GET", "/openapi/v3/apis/nope/v1")[0] == 404


@needs_kubectl
def test_kubectl_explain_reads_the_node_schema(tb: Testbed) -> None:
    out = _kubectl(tb, "explain", "node").stdout
    assert out.startswith("KIND:       Node\nVERSION:    v1\n")
    assert "Node is a worker node in Kubernetes." in out and "spec\t<NodeSpec>" in out
    assert "metadata\t<ObjectMeta>\n    Standard object's metadata. More info:" in out
    field = _kubectl(tb, "explain", "node.spec.unschedulable").stdout
    assert "FIELD: unschedulable <boolean>" in field and "Unschedulable controls node schedulability" in field


@needs_kubectl
def test_kubectl_apply_creates_leaves_unchanged_and_configures(tb: Testbed) -> None:
    manifest = ("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: applied\n---\n"
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: applied\ndata:\n  k: v\n---\n"
                "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: demo\n  namespace: kube-system\n"
                "spec:\n  chart: demo\n  version: 1.0.0\n")
    first = _kubectl(tb, "apply", "-f", "-", stdin=manifest)
    assert first.stdout.splitlines() == ["namespace/applied created", "configmap/cfg created", "helmchart.helm.cattle.io/demo created"]
    again = _kubectl(tb, "apply", "-f", "-", stdin=manifest)
    assert again.stdout.splitlines() == ["namespace/applied unchanged", "configmap/cfg unchanged",
                                         "helmchart.helm.cattle.io/demo unchanged"]
    changed = _kubectl(tb, "apply", "-f", "-", stdin=manifest.replace("k: v", "k: w").replace("1.0.0", "1.0.1"))
    assert changed.stdout.splitlines() == ["namespace/applied unchanged", "configmap/cfg configured",
                                           "helmchart.helm.cattle.io/demo configured"]
    assert changed.stderr == ""
    chart = json.loads(_kubectl(tb, "get", "helmchart", "demo", "-n", "kube-system", "-o", "json").stdout)
    assert chart["spec"]["version"] == "1.0.1" and chart["metadata"]["generation"] == 2


@needs_kubectl
def test_kubectl_apply_removes_a_container_dropped_from_the_manifest(tb: Testbed) -> None:
    two = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 1\n"
           "  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n"
           "      - {name: a, image: 'busybox:1.36'}\n      - {name: b, image: 'busybox:1.36'}\n")
    _kubectl(tb, "apply", "-f", "-", stdin=two)
    _kubectl(tb, "apply", "-f", "-", stdin=two.replace("      - {name: b, image: 'busybox:1.36'}\n", ""))
    deploy = json.loads(_kubectl(tb, "get", "deploy", "web", "-n", "default", "-o", "json").stdout)
    assert [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]] == ["a"]
    assert deploy["metadata"]["generation"] == 2


def test_strategic_merge_patch_deletes_and_merges_keyed_list_items(raw: Raw) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "smp"},
           "spec": {"containers": [{"name": "a", "image": "busybox:1.36", "env": [{"name": "X", "value": "1"}]},
                                   {"name": "b", "image": "busybox:1.36"}]}}
    raw("POST", "/api/v1/namespaces/default/pods", pod)
    patch = {"spec": {"$setElementOrder/containers": [{"name": "a"}],
                      "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}, {"$patch": "delete", "name": "b"}]}}
    code, _, patched = raw("PATCH", "/api/v1/namespaces/default/pods/smp", patch, "application/strategic-merge-patch+json")
    assert code == 200 and [c["name"] for c in patched["spec"]["containers"]] == ["a"]
    assert patched["spec"]["containers"][0]["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]
    assert patched["spec"]["containers"][0]["image"] == "busybox:1.36"


@needs_kubectl
def test_kubectl_apply_of_a_typo_is_refused_by_strict_field_validation(tb: Testbed) -> None:
    proc = _kubectl(tb, "apply", "-f", "-", ok=False,
                    stdin="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\n  namespace: default\ndatta:\n  a: b\n")
    assert proc.returncode == 1
    assert proc.stderr.strip() == ('Error from server (BadRequest): error when creating "STDIN": ConfigMap in version "v1" '
                                   'cannot be handled as a ConfigMap: strict decoding error: unknown field "datta"')


@needs_kubectl
def test_kubectl_server_side_apply_of_a_namespace_and_configmap(tb: Testbed) -> None:
    manifest = ("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ssa\n---\n"
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: ssa\ndata:\n  k: v\n")
    out = _kubectl(tb, "apply", "--server-side", "-f", "-", stdin=manifest).stdout
    assert out.splitlines() == ["namespace/ssa serverside-applied", "configmap/cfg serverside-applied"]
    cm = json.loads(_kubectl(tb, "get", "cm", "cfg", "-n", "ssa", "-o", "json", "--show-managed-fields").stdout)
    assert [(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]] == [("kubectl", "Apply")]


@needs_kubectl
def test_kubectl_create_sends_protobuf_that_the_testbed_decodes(tb: Testbed) -> None:
    assert _kubectl(tb, "create", "namespace", "typed").stdout.strip() == "namespace/typed created"
    assert _kubectl(tb, "create", "configmap", "cm", "-n", "typed", "--from-literal=alpha=one", "--from-literal=beta=two",
                    "--save-config").stdout.strip() == "configmap/cm created"
    _kubectl(tb, "create", "secret", "generic", "s", "-n", "typed", "--from-literal=user=admin", "--type=kubernetes.io/basic-auth")
    _kubectl(tb, "create", "serviceaccount", "robot", "-n", "typed")
    v1 = client.CoreV1Api(_api(tb))
    ns = v1.read_namespace("typed")
    assert ns.spec.finalizers == ["kubernetes"] and ns.metadata.labels == {"kubernetes.io/metadata.name": "typed"}
    cm = v1.read_namespaced_config_map("cm", "typed")
    assert cm.data == {"alpha": "one", "beta": "two"}
    assert json.loads(cm.metadata.annotations["kubectl.kubernetes.io/last-applied-configuration"])["data"] == cm.data
    secret = v1.read_namespaced_secret("s", "typed")
    assert secret.type == "kubernetes.io/basic-auth" and base64.b64decode(secret.data["user"]) == b"admin"
    assert v1.read_namespaced_service_account("robot", "typed").metadata.name == "robot"


def test_a_protobuf_body_of_another_kind_is_refused_not_guessed(raw: Raw) -> None:
    body = b"k8s\x00" + bytes([0x0A, 0x0F, 0x0A, 0x07]) + b"apps/v1" + bytes([0x12, 0x04]) + b"Deps"
    code, _, answer = raw("POST", "/apis/apps/v1/namespaces/default/deployments", body, "application/vnd.kubernetes.protobuf")
    assert code == 415 and answer["reason"] == "UnsupportedMediaType"
    assert answer["message"].endswith("(the testbed decodes protobuf bodies of ConfigMap, Secret, Namespace, ServiceAccount, "
                                      "Eviction, SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview only, "
                                      "not Deps)")


def test_deletecollection_deletes_what_the_selector_matches(raw: Raw) -> None:
    for name, team in (("dc-a", "x"), ("dc-b", "x"), ("dc-c", "y")):
        raw("POST", "/api/v1/namespaces/default/configmaps", {**_configmap(name), "metadata": {"name": name, "labels": {"dc-team": team}}})
    code, _, answer = raw("DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=dc-team%3Dx")
    assert code == 200 and answer["kind"] == "ConfigMapList" and [i["metadata"]["name"] for i in answer["items"]] == ["dc-a", "dc-b"]
    _, _, left = raw("GET", "/api/v1/namespaces/default/configmaps?labelSelector=dc-team")
    assert [i["metadata"]["name"] for i in left["items"]] == ["dc-c"]
    assert raw("DELETE", "/api/v1/configmaps")[0] == 405


@needs_kubectl
def test_kubectl_drain_evicts_all_but_daemonset_and_mirror_pods(tmp_path: Path) -> None:
    bed = Testbed("healthy", tmp_path, _without_hosts=True).up()
    try:
        proc = _kubectl(bed, "drain", "gpu-01", "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=20s")
        assert proc.stdout.splitlines()[-1] == "node/gpu-01 drained"
        evicted = [line.split()[0] for line in proc.stdout.splitlines() if line.endswith(" evicted")]
        assert any(e.startswith("pod/rke2-coredns-") for e in evicted) and any(e.startswith("pod/gpu-operator-") for e in evicted)
        assert not any(e.startswith(("pod/kube-apiserver-", "pod/etcd-", "pod/nvidia-device-plugin-")) for e in evicted)
        pods = client.CoreV1Api(_api(bed)).list_pod_for_all_namespaces().items
        owners = {(p.metadata.owner_references or [client.V1OwnerReference(api_version="", kind="none", name="", uid="")])[0].kind
                  for p in pods}
        assert owners <= {"DaemonSet", "Node"}, owners
        assert any(p.metadata.name == "kube-apiserver-gpu-01" for p in pods)  # a mirror pod stays
        assert client.CoreV1Api(_api(bed)).read_node("gpu-01").spec.unschedulable is True
    finally:
        bed.down()


def test_helmchart_fields_are_validated_and_pruned_like_a_structural_crd(raw: Raw) -> None:
    chart = {"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": {"name": "typo", "namespace": "kube-system"},
             "spec": {"chart": "gpu-operator", "version": "v26.3.2", "valuesContents": "driver: {enabled: false}"}}
    code, _, body = raw("POST", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts?fieldValidation=Strict", chart)
    assert code == 400 and body["message"] == ('HelmChart in version "v1" cannot be handled as a HelmChart: strict decoding '
                                               'error: unknown field "spec.valuesContents"')
    code, _, made = raw("POST", "/apis/helm.cattle.io/v1/namespaces/kube-system/helmcharts", chart)
    assert code == 201 and made["spec"] == {"chart": "gpu-operator", "version": "v26.3.2"}  # pruned, as the real server does
    _, _, crd = raw("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/helmcharts.helm.cattle.io")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["valuesContent"] == {"type": "string"} and spec["failurePolicy"] == {"type": "string"}


@needs_kubectl
def test_kubectl_explain_and_delete_a_helmchart(tb: Testbed) -> None:
    assert "FIELD: valuesContent <string>" in _kubectl(tb, "explain", "helmchart.spec.valuesContent").stdout
    _kubectl(tb, "apply", "-f", "-", stdin="apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: gone\n"
                                           "  namespace: kube-system\n  finalizers: [wrangler.cattle.io/on-helm-chart-remove]\n"
                                           "spec:\n  chart: demo\n")
    out = _kubectl(tb, "delete", "helmchart", "gone", "-n", "kube-system", "--timeout=10s").stdout  # waits for the finalizer
    assert out.strip() == 'helmchart.helm.cattle.io "gone" deleted'
    assert _kubectl(tb, "get", "helmchart", "gone", "-n", "kube-system", ok=False).returncode == 1


# --- tables, logs, owners -------------------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_get_jobs_events_leases_and_services_print_real_columns(tb: Testbed) -> None:
    jobs = _kubectl(tb, "get", "jobs", "-n", "kube-system").stdout.splitlines()
    assert jobs[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert any(line.split()[:3] == ["helm-install-gpu-operator", "Complete", "1/1"] for line in jobs[1:])
    leases = _kubectl(tb, "get", "leases", "-n", "kube-node-lease").stdout.splitlines()
    assert leases[0].split() == ["NAME", "HOLDER", "AGE"] and leases[1].split()[:2] == ["gpu-01", "gpu-01"]
    svc = _kubectl(tb, "get", "svc", "kubernetes", "-n", "default").stdout.splitlines()
    assert svc[1].split()[:5] == ["kubernetes", "ClusterIP", "10.43.0.1", "<none>", "443/TCP"]
    _kubectl(tb, "create", "-f", "-", stdin="apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ev\n")
    _kubectl(tb, "create", "-f", "-", stdin="apiVersion: v1\nkind: Pod\nmetadata:\n  name: sleeper\n  namespace: ev\n"
                                            "spec:\n  containers:\n  - name: s\n    image: busybox:1.36\n")
    deadline = time.monotonic() + 10
    while "Started" not in (events := _kubectl(tb, "get", "events", "-n", "ev").stdout) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = events.splitlines()
    assert lines[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any(line.split()[1:4] == ["Normal", "Scheduled", "pod/sleeper"] for line in lines[1:]), events


def test_job_selector_finds_its_own_pod_for_kubectl_logs(tb: Testbed) -> None:
    api = _api(tb)
    job = client.BatchV1Api(api).read_namespaced_job("helm-install-gpu-operator", "kube-system")
    selector = ",".join(f"{k}={v}" for k, v in job.spec.selector.match_labels.items())
    pods = client.CoreV1Api(api).list_namespaced_pod("kube-system", label_selector=selector).items
    assert [p.metadata.owner_references[0].name for p in pods] == ["helm-install-gpu-operator"]


@needs_kubectl
def test_kubectl_logs_job_prints_the_jobs_own_pod(tb: Testbed) -> None:
    out = _kubectl(tb, "logs", "-n", "kube-system", "job/helm-install-gpu-operator").stdout
    assert "Installing helm chart" in out and "NAME: gpu-operator" in out


def test_operand_daemonsets_are_controlled_by_the_cluster_policy(tb: Testbed) -> None:
    api = _api(tb)
    policy = client.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    for ds in client.AppsV1Api(api).list_namespaced_daemon_set("gpu-operator").items:
        if (ds.metadata.labels or {}).get("app.kubernetes.io/managed-by") != "gpu-operator":
            continue
        ref = ds.metadata.owner_references[0]
        assert (ref.api_version, ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
            "nvidia.com/v1", "ClusterPolicy", "cluster-policy", policy["metadata"]["uid"], True, True), ds.metadata.name
        pods = client.CoreV1Api(api).list_namespaced_pod("gpu-operator", label_selector=f"app={ds.metadata.labels['app']}").items
        assert all(p.metadata.owner_references[0].kind == "DaemonSet" and p.metadata.owner_references[0].uid == ds.metadata.uid
                   for p in pods)


def test_only_the_operators_namespace_gets_its_controller_reference() -> None:
    from pytest_dgxspark.testbed import bootstrap

    def ds(name: str, ns: str) -> dict[str, Any]:
        return {"kind": "DaemonSet", "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "gpu-operator"}}}

    objects = [{"kind": "ClusterPolicy", "apiVersion": "nvidia.com/v1", "metadata": {"name": "cluster-policy", "uid": "u1"}},
               {"kind": "Deployment", "metadata": {"name": "gpu-operator", "namespace": "gpu-operator", "labels": {"app": "gpu-operator"}}},
               ds("nvidia-device-plugin-daemonset", "gpu-operator"), ds("nvidia-device-plugin-daemonset", "kube-system")]
    bootstrap.controller_marks(objects)
    assert objects[2]["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert "ownerReferences" not in objects[3]["metadata"]


def test_pod_logs_per_container_previous_tail_and_limit(tmp_path: Path) -> None:
    scenario = tmp_path / "prev"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({
        "description": "previous log", "extends": "device-plugin-crashloop",
        "cluster": {"gpu_operator": {"components": {"device-plugin": {
            "logs": {"nvidia-device-plugin#previous": "I0605 first crash\nE0605 error getting device memory: Not Supported\n"}}}}}}))
    bed = Testbed(scenario, tmp_path / "tb", _without_hosts=True).up()
    try:
        raw = Raw(bed)
        v1 = client.CoreV1Api(_api(bed))
        pod = next(p for p in v1.list_namespaced_pod("gpu-operator").items if p.metadata.name.startswith("nvidia-device-plugin-"))
        base = f"/api/v1/namespaces/gpu-operator/pods/{pod.metadata.name}/log"
        code, _, text = raw("GET", base + "?container=nvidia-device-plugin&previous=true")
        assert code == 200 and text == "I0605 first crash\nE0605 error getting device memory: Not Supported\n"
        assert raw("GET", base + "?container=nvidia-device-plugin&previous=true&tailLines=1")[2] == (
            "E0605 error getting device memory: Not Supported\n")
        assert raw("GET", base + "?container=nvidia-device-plugin&limitBytes=5")[2] == raw(
            "GET", base + "?container=nvidia-device-plugin")[2][:5]
        code, _, body = raw("GET", base + "?container=toolkit-validation&previous=true")
        assert code == 400 and body["message"] == (f'previous terminated container "toolkit-validation" in pod '
                                                   f'"{pod.metadata.name}" not found')
        code, _, body = raw("GET", base + "?container=nope")
        assert code == 400 and body["message"] == f"container nope is not valid for pod {pod.metadata.name}"
    finally:
        bed.down()


@needs_kubectl
def test_kubectl_auth_can_i_and_whoami_answer_for_the_client_certificate(tb: Testbed) -> None:
    assert _kubectl(tb, "auth", "can-i", "patch", "nodes").stdout.strip() == "yes"
    assert _kubectl(tb, "auth", "can-i", "delete", "helmcharts.helm.cattle.io", "-n", "kube-system").stdout.strip() == "yes"
    who = _kubectl(tb, "auth", "whoami", "-o", "json").stdout
    assert json.loads(who)["status"]["userInfo"] == {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}
    rules = _kubectl(tb, "auth", "can-i", "--list").stdout.splitlines()
    assert rules[1].split() == ["*.*", "[]", "[]", "[*]"]


def test_reviews_are_answered_never_stored(raw: Raw) -> None:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "argocd"}}}
    code, _, answer = raw("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    assert code == 201 and answer["status"]["allowed"] is True and answer["spec"] == review["spec"]
    assert raw("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")[0] == 405


# --- faults are validated before anything starts --------------------------------------------------------------


def test_a_bad_fault_spec_is_rejected_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump({
        "description": "x", "extends": "healthy",
        "cluster": {"faults": {"errors": {"^/api/v1/nodes": {"status": 418, "rate": 0.5}}}}}))
    with pytest.raises(ScenarioError, match=r"cluster\.faults\.errors\['\^/api/v1/nodes'\]\.status: 418 is not one of "):
        load(tmp_path)


def _faulty(tmp_path: Path, faults: dict[str, Any]) -> Testbed:
    scenario = tmp_path / "faulty"
    scenario.mkdir(parents=True)
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({"description": "faults", "extends": "healthy",
                                                            "cluster": {"faults": faults}}))
    return Testbed(scenario, tmp_path / "tb", _without_hosts=True).up()


def test_per_path_error_rates_are_seeded_and_recorded(tmp_path: Path) -> None:
    bed = _faulty(tmp_path, {"seed": 11, "latency_ms": 20, "errors": {"^/api/v1/nodes$": {"status": 503, "rate": 0.5}}})
    try:
        raw = Raw(bed)
        answers = [raw("GET", "/api/v1/nodes") for _ in range(20)]
        codes = [code for code, _, _ in answers]
        assert set(codes) == {200, 503} and 4 <= codes.count(503) <= 16, codes
        unavailable = next(body for code, _, body in answers if code == 503)
        assert unavailable == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                               "message": "the server is currently unable to handle the request", "reason": "ServiceUnavailable",
                               "code": 503}
        assert all(headers["X-Dgxspark-Testbed"] == "faulty" for _, headers, _ in answers)
        assert all(raw("GET", "/api/v1/namespaces")[0] == 200 for _ in range(5))  # other paths are untouched
        records = [r for r in bed.requests() if r["path"] == "/api/v1/nodes"]
        assert [r["status"] for r in records] == codes
        assert [r.get("fault") for r in records] == ["error" if c == 503 else None for c in codes]
        assert all(r["latency_ms"] == 20 and r["duration_ms"] >= 20 for r in records)
    finally:
        bed.down()
    again = _faulty(tmp_path / "again", {"seed": 11, "latency_ms": 20, "errors": {"^/api/v1/nodes$": {"status": 503, "rate": 0.5}}})
    try:
        assert [Raw(again)("GET", "/api/v1/nodes")[0] for _ in range(20)] == codes  # same seed, same failures
    finally:
        again.down()


def test_the_api_server_dies_after_the_first_pod_in_a_namespace_and_refuses_connects(tmp_path: Path) -> None:
    bed = _faulty(tmp_path, {"die_after": {"pod_created_in": "^cuda-"}})
    try:
        v1 = client.CoreV1Api(_api(bed))
        v1.create_namespace({"metadata": {"name": "cuda-run"}})
        v1.create_namespaced_pod("cuda-run", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
        with pytest.raises(Exception) as info:  # the kept-alive connection is cut
            v1.read_namespaced_pod("p", "cuda-run", _request_timeout=3)
        assert "connection aborted" in str(info.value).lower() or "refused" in str(info.value).lower()
        with pytest.raises(Exception) as info:  # and nothing listens any more
            client.CoreV1Api(_api(bed)).read_namespaced_pod("p", "cuda-run", _request_timeout=3)
        assert "refused" in str(info.value).lower()
        records = bed.requests()
        assert [r.get("fault") for r in records if r["method"] == "POST"] == [None, "die"]
        assert records[-1]["path"] == "/api/v1/namespaces/cuda-run/pods"
    finally:
        bed.down()


def test_the_api_server_dies_after_a_count_of_matching_requests(tmp_path: Path) -> None:
    bed = _faulty(tmp_path, {"die_after": {"path": "^/api/v1/nodes$", "method": "GET", "count": 3}})
    try:
        raw = Raw(bed)
        assert [raw("GET", "/api/v1/nodes")[0] for _ in range(3)] == [200, 200, 200]
        with pytest.raises(ConnectionRefusedError):
            raw("GET", "/version")
    finally:
        bed.down()


def test_a_continue_token_older_than_the_history_is_410_expired_with_a_fresh_token(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dgxspark.testbed import paging, reply, store

    monkeypatch.setattr(store, "HISTORY", 4)
    s = store.Store()
    for i in range(3):
        s.put("/configmaps", {"metadata": {"name": f"c{i}", "namespace": "default"}})
    first = paging.list_page(s, "/configmaps", None, {"limit": "1"}, lambda o: True, False)
    assert [o["metadata"]["name"] for o in first.items] == ["c0"] and first.remaining == 2
    for i in range(5):
        s.put("/configmaps", {"metadata": {"name": f"d{i}", "namespace": "default"}})
    with pytest.raises(reply.ApiError) as info:
        paging.list_page(s, "/configmaps", None, {"limit": "1", "continue": first.token}, lambda o: True, False)
    assert info.value.code == 410 and info.value.body["reason"] == "Expired"
    assert info.value.body["message"].startswith("The provided continue parameter is too old to display a consistent list")
    rest = paging.list_page(s, "/configmaps", None, {"continue": info.value.body["metadata"]["continue"]}, lambda o: True, False)
    assert [o["metadata"]["name"] for o in rest.items] == ["c1", "c2", "d0", "d1", "d2", "d3", "d4"]


def test_the_verbs_do_not_import_the_server() -> None:
    import sys

    code = ("import sys, pytest_dgxspark.testbed.handlers, pytest_dgxspark.testbed.writes; "
            "print(sorted(m for m in sys.modules if m == 'pytest_dgxspark.testbed.apiserver'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_a_testbed_bug_answers_500_internal_error_never_a_dropped_connection(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from pytest_dgxspark.testbed import handlers

    class Broken:
        def list(self, *args: Any) -> Any:
            raise RuntimeError("store exploded")

    class Fake:
        headers: dict[str, str] = {}
        user = {"username": "system:admin", "groups": ["system:masters"]}
        server = SimpleNamespace(store=Broken(), settings={})
        status_sent = None
        sent: tuple[int, dict[str, Any]] | None = None

        def send_json(self, code: int, body: dict[str, Any], content_type: str = "application/json") -> None:
            self.sent, self.status_sent = (code, body), code

    h = Fake()
    handlers.dispatch(h, "GET", "/api/v1/nodes", {}, b"")  # type: ignore[arg-type]
    assert h.sent is not None and h.sent[0] == 500
    assert h.sent[1]["reason"] == "InternalError"
    assert h.sent[1]["message"] == "Internal error occurred: RuntimeError: store exploded"
    assert "store exploded" in capsys.readouterr().err  # the traceback goes to apiserver-<cluster>.log


def test_node_leases_are_renewed_only_while_the_kubelet_reports() -> None:
    import threading

    from pytest_dgxspark.testbed import bootstrap, store

    s = store.Store()
    nodes = [{"metadata": {"name": name, "uid": name}, "status": {"conditions": [
        {"type": "Ready", "status": status, "lastHeartbeatTime": "2026-11-29T08:00:00Z"}]}} for name, status in
        (("alive", "True"), ("cni-down", "False"), ("gone", "Unknown"))]
    for node in nodes:
        s.put("/nodes", node)
    leases = {l["metadata"]["name"]: l for l in bootstrap.leases(nodes, time.time()) if l["metadata"]["namespace"] == "kube-node-lease"}
    assert leases["gone"]["spec"]["renewTime"] == "2026-11-29T08:00:00.000000Z"  # stale since the last heartbeat
    for lease in leases.values():
        s.put("coordination.k8s.io/leases", lease)
    before = {n: l["spec"]["renewTime"] for n, l in leases.items()}
    stop = threading.Event()
    threading.Thread(target=bootstrap.renew_node_leases, args=(s, stop, 0.05), daemon=True).start()
    time.sleep(1.2)
    stop.set()
    after = {n: s.get("coordination.k8s.io/leases", "kube-node-lease", n)["spec"]["renewTime"] for n in leases}
    assert after["gone"] == before["gone"]
    assert after["alive"] > before["alive"] and after["cni-down"] > before["cni-down"]
