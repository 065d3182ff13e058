"""`make bench`'s bookkeeping: requests by verb and kind, the targets it holds, its last line (no testbed started)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from pytest_dgxspark.testbed import bench


def req(path: str, method: str = "GET", query: str = "", cluster: str = "workload") -> dict:
    """A request as requests.jsonl records it (the query as a mapping of first values)."""
    from urllib.parse import parse_qs

    return {"cluster": cluster, "method": method, "path": path,
            "query": {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}}


def test_requests_are_counted_by_verb_and_kind() -> None:
    counted = bench.requests_by_verb_kind([
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
    lists = bench.lists_per_kind([req("/api/v1/namespaces"), req("/api/v1/namespaces", query=selector),
                                  {**req("/api/v1/namespaces"), "query": selector},  # a raw query string too
                                  req("/api/v1/namespaces/dgxspark-cuda-x/pods")])
    assert lists == Counter({"namespaces": 1})


def run(nodes: int, wall: float, cmds: int = 3, lists: int = 1, verdict: str = "ACCEPTED") -> dict:
    return {"nodes": nodes, "wall_s": wall, "load": 1.0, "verdict": verdict, "requests": Counter({("LIST", "pods"): lists}),
            "lists": {"pods": lists}, "ssh_conns": {f"gpu-{i:02d}": 1 for i in range(1, nodes + 1)},
            "ssh_commands": {f"gpu-{i:02d}": cmds for i in range(1, nodes + 1)}, "latency_ms": 20}


def test_the_last_line_keeps_the_contracts_first_four_fields() -> None:
    line = bench.summary_line([run(1, 4.0), run(16, 5.0)])
    assert line.startswith("bench: nodes=16 wall_ratio_16_1=1.25 lists_per_kind_max=1 ssh_conns_per_host=1 ")


def test_each_target_says_whether_it_holds_with_what_was_measured() -> None:
    assert bench.targets([run(1, 4.0), run(16, 5.0)]) == [
        "target wall_ratio_16_1 <= 1.5: holds (1.25)", "target one LIST per kind per run: holds (at most 1)",
        "target one SSH connection per host: holds (at most 1)",
        "target no more SSH commands per host than the one-node run: holds (3 vs 3)",
        "target healthy one-node run under 10 s: holds (4.0 s, ACCEPTED)"]
    missed = bench.targets([run(1, 12.0), run(16, 30.0, cmds=5, lists=2)])
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
    header, first, sixteen = bench.table([one, many])[:3]
    assert header.split()[-6:] == ["suite", "CPU", "s", "testbed", "CPU", "s"]
    assert first.split()[-2:] == ["2.5", "0.6"] and sixteen.split()[-2:] == ["4.2", "6.0"]
