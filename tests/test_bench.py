"""`make bench`'s bookkeeping: requests by verb and kind, the targets it holds, its last line (no testbed started)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pytest_dgxspark.testbed import bench, benchtable, realplane


def req(path: str, method: str = "GET", query: str = "", cluster: str = "workload") -> dict:
    """A request as requests.jsonl records it (the query as a mapping of first values)."""
    from urllib.parse import parse_qs

    return {"cluster": cluster, "method": method, "path": path,
            "query": {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}}


def test_requests_are_counted_by_verb_and_kind() -> None:
    counted = benchtable.requests_by_verb_kind([
        req("/api/v1/nodes"), req("/api/v1/nodes/gpu-01"), req("/api/v1/namespaces/gpu-operator/pods"),
        req("/api/v1/pods", query="watch=true"), req("/apis/nvidia.com/v1/clusterpolicies"),
        req("/api/v1/namespaces", "POST"), req("/api/v1/namespaces/dgxspark-cuda-x/pods/p-0/log"),
        req("/api/v1/nodes", cluster="management"), req("/version"), req("/apis"),
    ])
    assert counted == Counter({("LIST", "nodes"): 1, ("GET", "nodes"): 1, ("LIST", "pods"): 1, ("WATCH", "pods"): 1,
                               ("LIST", "clusterpolicies"): 1, ("CREATE", "namespaces"): 1,
                               ("GET", "cuda-sample/pods/log"): 1})


def test_the_cuda_samples_own_reads_are_not_the_checks_lists() -> None:
    selector = "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpytest-dgxspark"
    lists = benchtable.lists_per_kind([req("/api/v1/namespaces"), req("/api/v1/namespaces", query=selector),
                                  {**req("/api/v1/namespaces"), "query": selector},  # a raw query string too
                                  req("/api/v1/namespaces/dgxspark-cuda-x/pods")])
    assert lists == Counter({"namespaces": 1})


def run(nodes: int, wall: float, cmds: int = 3, lists: int = 1, verdict: str = "ACCEPTED") -> dict:
    return {"nodes": nodes, "wall_s": wall, "load": 1.0, "verdict": verdict, "requests": Counter({("LIST", "pods"): lists}),
            "lists": {"pods": lists}, "ssh_conns": {f"gpu-{i:02d}": 1 for i in range(1, nodes + 1)},
            "ssh_commands": {f"gpu-{i:02d}": cmds for i in range(1, nodes + 1)}, "latency_ms": 20}


def test_the_last_line_keeps_the_contracts_first_four_fields() -> None:
    line = benchtable.summary_line([run(1, 4.0), run(16, 5.0)])
    assert line.startswith("bench: nodes=16 wall_ratio_16_1=1.25 lists_per_kind_max=1 ssh_conns_per_host=1 ")


def test_each_target_says_whether_it_holds_with_what_was_measured() -> None:
    assert benchtable.targets([run(1, 4.0), run(16, 5.0)]) == [
        "target wall_ratio_16_1 <= 1.5: holds (1.25)", "target one LIST per kind per run: holds (at most 1)",
        "target one SSH connection per host: holds (at most 1)",
        "target no more SSH commands per host than the one-node run: holds (3 vs 3)",
        "target healthy one-node run under 10 s: holds (4.0 s, ACCEPTED)"]
    missed = benchtable.targets([run(1, 12.0), run(16, 30.0, cmds=5, lists=2)])
    assert [line.split(":")[1].split()[0] for line in missed] == ["MISSED", "MISSED", "holds", "MISSED", "MISSED"]


def test_the_scenario_puts_latency_on_every_host_and_on_the_api(tmp_path: Path) -> None:
    doc = yaml.safe_load((bench.scenario_dir(tmp_path, 3, 20, 20) / "scenario.yaml").read_text())
    assert doc["extends"] == "healthy" and doc["cluster"] == {"faults": {"latency_ms": 20}}
    assert {name: node["host"]["faults"] for name, node in doc["nodes"].items()} == {
        "gpu-02": {"latency_ms": 20}, "gpu-03": {"latency_ms": 20}, "gpu-01": {"latency_ms": 20}}


def test_the_table_shows_the_suites_cpu_apart_from_the_simulations() -> None:
    one, many = run(1, 4.0), run(16, 5.0)
    one.update(suite_cpu_s=2.5, testbed_cpu_s=0.6)
    many.update(suite_cpu_s=4.25, testbed_cpu_s=6.0)
    latency, header, first, sixteen = benchtable.table([one, many])[:4]
    assert latency == "latency: 20 ms per SSH command, 20 ms per API request"
    assert header.split()[-6:] == ["suite", "CPU", "s", "testbed", "CPU", "s"]
    assert first.split()[-2:] == ["2.5", "0.6"] and sixteen.split()[-2:] == ["4.2", "6.0"]


def audit_event(stage: str, verb: str, uri: str, resource: str | None = None, *, namespace: str = "", name: str = "",
                subresource: str = "", user: str = "system:admin", code: int = 200, audit_id: str = "") -> dict:
    """One line of the real kube-apiserver's audit log (audit.k8s.io/v1 Event at level Metadata, --audit-log-format json)
    shaped as tests/data/audit-realplane-healthy-1node.log's: the suite's requests come through the fault proxy, so the
    source is 127.0.0.1 and the user the front proxy's X-Remote-User."""
    event = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
             "auditID": audit_id or f"{abs(hash((stage, verb, uri, user))):032x}"[:32], "stage": stage,
             "requestURI": uri, "verb": verb,
             "user": {"username": user, "groups": ["system:masters", "system:authenticated"]},
             "sourceIPs": ["127.0.0.1"], "userAgent": "OpenAPI-Generator/37.0.2/python"}
    if resource is not None:
        ref = {"resource": resource, "namespace": namespace, "name": name, "apiVersion": "v1", "subresource": subresource}
        event["objectRef"] = {k: v for k, v in ref.items() if v}
    event["responseStatus"] = {"metadata": {}, "code": code}
    event.update({"requestReceivedTimestamp": "2026-12-02T06:00:38.861525Z", "stageTimestamp": "2026-12-02T06:00:38.865406Z",
                  "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""}})
    return event


CUDA_NS = "dgxspark-cuda-20261202-054001-ab12"
SUITE_EVENTS = [
    audit_event("ResponseComplete", "get", "/api", None),  # discovery: not counted
    audit_event("ResponseComplete", "list", "/api/v1/nodes?limit=500", "nodes"),
    audit_event("ResponseComplete", "get", "/api/v1/nodes/gpu-01", "nodes", name="gpu-01"),
    audit_event("ResponseComplete", "list", "/api/v1/pods?limit=500", "pods"),
    audit_event("ResponseComplete", "list", "/apis/nvidia.com/v1/clusterpolicies?limit=500", "clusterpolicies"),
    audit_event("ResponseComplete", "list", "/api/v1/namespaces?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpytest-dgxspark",
                "namespaces"),
    audit_event("ResponseComplete", "create", "/api/v1/namespaces", "namespaces", name=CUDA_NS, code=201),
    audit_event("ResponseComplete", "create", f"/api/v1/namespaces/{CUDA_NS}/pods", "pods", namespace=CUDA_NS, code=201),
    audit_event("ResponseStarted", "watch", f"/api/v1/namespaces/{CUDA_NS}/pods?timeoutSeconds=30&watch=true", "pods",
                namespace=CUDA_NS, audit_id="w1"),
    audit_event("ResponseComplete", "watch", f"/api/v1/namespaces/{CUDA_NS}/pods?timeoutSeconds=30&watch=true", "pods",
                namespace=CUDA_NS, audit_id="w1"),
    audit_event("ResponseComplete", "get", f"/api/v1/namespaces/{CUDA_NS}/pods/cuda-vectoradd-gpu-01/log?container=cuda",
                "pods", namespace=CUDA_NS, name="cuda-vectoradd-gpu-01", subresource="log"),
    audit_event("ResponseComplete", "delete", f"/api/v1/namespaces/{CUDA_NS}?propagationPolicy=Background", "namespaces",
                namespace=CUDA_NS, name=CUDA_NS),
]
OTHERS = [  # the control plane's own identities: never the suite's requests
    audit_event("ResponseComplete", "list", "/api/v1/nodes?limit=500&resourceVersion=0", "nodes", user="kwok"),
    audit_event("ResponseComplete", "update", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/gpu-01",
                "leases", namespace="kube-node-lease", name="gpu-01", user="system:node:gpu-01"),
]


def write_audit_log(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_real_planes_audit_log_is_counted_as_the_stand_ins_requests_are(tmp_path: Path) -> None:
    log = write_audit_log(tmp_path / "audit.log", OTHERS[:1] + SUITE_EVENTS + OTHERS[1:])
    figures = benchtable.counted(realplane.audited_requests(log, benchtable.SUITE_USER))
    assert figures["requests"] == Counter({
        ("LIST", "nodes"): 1, ("GET", "nodes"): 1, ("LIST", "pods"): 1, ("LIST", "clusterpolicies"): 1,
        ("LIST", "cuda-sample/namespaces"): 1, ("CREATE", "namespaces"): 1, ("CREATE", "cuda-sample/pods"): 1,
        ("WATCH", "cuda-sample/pods"): 1, ("GET", "cuda-sample/pods/log"): 1, ("DELETE", "namespaces"): 1})
    assert figures["lists"] == {"nodes": 1, "pods": 1, "clusterpolicies": 1}


REAL_LOG = Path(__file__).parent / "data" / "audit-realplane-healthy-1node.log"


def test_a_real_audit_log_gives_the_real_rows_figures_and_the_servers_own_verbs() -> None:
    """tests/data/audit-realplane-healthy-1node.log: the kube-apiserver's own lines from `make bench`'s one-node real run
    (2026-12-02): the world writer's last two requests (system:admin, before the suite: run() counts from the suite's
    start), the suite's, and a few of kwok's, the scheduler's and a controller's."""
    requests = realplane.audited_requests(REAL_LOG, benchtable.SUITE_USER)
    figures = benchtable.counted(requests[2:])
    assert figures["requests"] == Counter({
        ("LIST", "nodes"): 1, ("LIST", "pods"): 1, ("LIST", "clusterpolicies"): 1, ("LIST", "helmchartconfigs"): 1,
        ("LIST", "configmaps"): 1, ("LIST", "helmcharts"): 1, ("LIST", "jobs"): 1, ("LIST", "daemonsets"): 1,
        ("LIST", "deployments"): 1, ("LIST", "namespaces"): 1, ("CREATE", "namespaces"): 1, ("GET", "namespaces"): 1,
        ("DELETE", "namespaces"): 1, ("CREATE", "cuda-sample/leases"): 1, ("LIST", "cuda-sample/namespaces"): 2,
        ("CREATE", "cuda-sample/pods"): 1, ("LIST", "cuda-sample/pods"): 1, ("WATCH", "cuda-sample/pods"): 1,
        ("GET", "cuda-sample/pods/log"): 1})
    assert max(figures["lists"].values()) == 1 and sum(figures["requests"].values()) == 20
    assert benchtable.counted(requests)["requests"][("GET", "serviceaccounts")] == 2  # the world's, had run() not sliced
    # the verb and resource the bench reads from each request's path are the ones the API server itself logged
    events = [json.loads(line) for line in REAL_LOG.read_text().splitlines()]
    suite = [e for e in events if e["user"]["username"] == benchtable.SUITE_USER and e["stage"] == "ResponseComplete"]
    assert len(suite) == len(requests)
    for event, request in zip(suite, requests):
        found = benchtable.verb_and_kind(request)
        if "objectRef" not in event:
            assert found is None, event["requestURI"]  # /version, discovery
            continue
        ref = event["objectRef"]
        assert found is not None and (found[0], found[1].removeprefix("cuda-sample/")) == (
            event["verb"].upper(), ref["resource"] + (f"/{ref['subresource']}" if "subresource" in ref else "")), event


def test_a_watch_the_audit_log_shows_started_is_open_until_it_is_complete(tmp_path: Path) -> None:
    started = [e for e in SUITE_EVENTS if e["stage"] == "ResponseStarted"]
    assert benchtable.open_watches(write_audit_log(tmp_path / "a.log", started), benchtable.SUITE_USER) == 1
    assert benchtable.open_watches(write_audit_log(tmp_path / "b.log", SUITE_EVENTS), benchtable.SUITE_USER) == 0
    assert benchtable.open_watches(tmp_path / "absent.log", benchtable.SUITE_USER) == 0


def real_run(nodes: int, wall: float, log: Path, selected: bool = True) -> dict:
    figures = benchtable.counted(realplane.audited_requests(log, benchtable.SUITE_USER))
    return {**run(nodes, wall), **figures, "api": "real", "selected": selected, "suite_cpu_s": 3.0, "testbed_cpu_s": 9.5}


def test_the_table_puts_the_real_planes_rows_beside_the_stand_ins(tmp_path: Path) -> None:
    log = write_audit_log(tmp_path / "audit.log", SUITE_EVENTS + OTHERS)
    standin = {**run(1, 4.0), **benchtable.counted(realplane.audited_requests(log, benchtable.SUITE_USER)), "selected": True}
    lines = benchtable.table([run(1, 4.0), run(4, 5.0), standin, real_run(1, 6.0, log), real_run(4, 9.0, log)])
    assert lines[0] == ("latency: 20 ms per SSH command, 20 ms per API request (on the real control plane made by the "
                        "fault proxy in front of kube-apiserver, as the stand-in makes it)")
    assert lines[1] == "*: with some suite files left out (bench.run's ignore), so their rules are untested"
    assert lines[2].split()[:3] == ["nodes", "api", "wall"]
    rows = [line.split() for line in lines[3:8]]
    assert [(r[0], r[1], r[3]) for r in rows] == [("1", "stand-in", "1.00"), ("4", "stand-in", "1.25"),
                                                  ("1", "stand-in*", "1.00"), ("1", "real*", "1.00"), ("4", "real*", "1.50")]
    assert rows[3][6:] == ["10", "1", "1", "3", "3.0", "9.5"]  # API reqs, LIST max, ssh conns, ssh cmds, CPU s
    assert lines[11].startswith(" 1 node(s) real* API requests: CREATE cuda-sample/pods 1, CREATE namespaces 1, ")
    assert benchtable.differences([standin, real_run(1, 6.0, log)]) == [" 1 node(s) real vs stand-in: same requests by verb and kind"]
    extra = real_run(1, 6.0, log)
    extra["requests"] = extra["requests"] + Counter({("LIST", "pods"): 1})
    assert benchtable.differences([standin, extra]) == [" 1 node(s) real vs stand-in: LIST pods 2 vs 1"]


def test_a_second_list_of_a_kind_on_the_real_plane_is_a_missed_target_naming_the_kind(tmp_path: Path) -> None:
    log = write_audit_log(tmp_path / "audit.log", SUITE_EVENTS + SUITE_EVENTS[1:2])  # nodes listed twice
    found = benchtable.targets([run(1, 4.0), run(16, 5.0), real_run(1, 6.0, log), real_run(4, 9.0, log)])
    assert found[-2:] == [
        "target one LIST per kind per run on the real control plane: MISSED (at most 2: nodes 2 at 1 node(s), "
        "nodes 2 at 4 node(s))",
        "target one SSH connection per host on the real control plane: holds (at most 1)"]
    line = benchtable.summary_line([run(1, 4.0), run(16, 5.0), real_run(1, 6.0, log), real_run(4, 9.0, log)])
    assert line.startswith("bench: nodes=16 wall_ratio_16_1=1.25 lists_per_kind_max=1 ssh_conns_per_host=1 ")
    assert line.endswith(" real_nodes=1,4 real_lists_per_kind_max=2 real_ssh_conns_per_host=1")


def fake_runs(calls: list[tuple]) -> object:
    def fake(nodes: int, work: Path, latency_ms: int = 20, api_latency_ms: int = 20, api: str = "standin",
             ignore: tuple[str, ...] = ()) -> dict:
        calls.append((nodes, api, ignore))
        return {**run(nodes, 4.0 + nodes / 10), "api": api, "selected": bool(ignore), "exit": 0, "failed": []}
    return fake


def test_the_bench_says_in_one_line_that_the_real_plane_is_not_built_and_prints_the_stand_ins_rows(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def not_built() -> dict:
        raise realplane.RealPlaneError("the real control plane is not built: kwok missing in /nowhere; run `make controlplane`")

    calls: list[tuple] = []
    monkeypatch.setattr(realplane, "binaries", not_built)
    monkeypatch.setattr(bench, "run", fake_runs(calls))
    assert bench.main(["--nodes", "1,4", "--real-nodes", "1,4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert calls == [(1, "standin", ()), (4, "standin", ())]
    assert [line for line in out if "real control plane" in line] == [
        "bench: real control plane: NOT BUILT, the table has the stand-in's rows only (the real control plane is not "
        "built: kwok missing in /nowhere; run `make controlplane`)"]
    rows = [line.split()[1:3] for line in out if line.split()[2:3] in (["stand-in"], ["stand-in*"], ["real*"])]
    assert rows == [["1", "stand-in"], ["4", "stand-in"]]
    assert out[-1].endswith(" real=not-run")


def test_where_the_real_plane_is_built_each_real_run_has_a_stand_in_run_of_the_same_checks_beside_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple] = []
    monkeypatch.setattr(realplane, "binaries", lambda: {})
    monkeypatch.setattr(bench, "run", fake_runs(calls))
    assert bench.main(["--nodes", "1,16", "--real-nodes", "1,4"]) == 0
    out = capsys.readouterr().out.splitlines()
    # every suite file on both (kwokrun.py runs the isolation probes there): the stand-in's 1-node run is reused
    assert calls == [(1, "standin", ()), (16, "standin", ()), (1, "real", ()), (4, "standin", ()), (4, "real", ())]
    assert "bench:  1 node(s) real vs stand-in: same requests by verb and kind" in out
    assert "bench: target one LIST per kind per run on the real control plane: holds (at most 1)" in out
    assert out[-1].endswith(" real_nodes=1,4 real_lists_per_kind_max=1 real_ssh_conns_per_host=1")
    calls.clear()
    assert bench.main(["--nodes", "1", "--real-nodes", "none"]) == 0
    assert calls == [(1, "standin", ())] and capsys.readouterr().out.splitlines()[-1].endswith(" real=not-run")
