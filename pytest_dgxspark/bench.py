"""`make bench`: the suite against a 1-node and a 16-node testbed; wall-time ratio, API lists per kind, SSH connections."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def scenario_dir(root: Path, nodes: int, latency_ms: int = 20) -> Path:
    """A scenario extending `healthy` with nodes gpu-02..gpu-NN as DGX Spark agents; every SSH command on every node
    starts `latency_ms` late (host fault `latency_ms`: a LAN round trip plus sshd's session start)."""
    directory = root / f"bench-{nodes}"
    directory.mkdir(parents=True)
    faults = {"faults": {"latency_ms": latency_ms}} if latency_ms else {}
    extra = {
        f"gpu-{i:02d}": {"role": "agent", "gpu": True, "model": "dgx-spark",
                         "host": {"hostname": f"gpu-{i:02d}", **faults}}
        for i in range(2, nodes + 1)
    }
    extra["gpu-01"] = {"host": dict(faults)}
    doc = {"description": f"benchmark: {nodes} DGX Spark nodes", "extends": "healthy", "nodes": extra,
           "expect": {"rules": {}, "root_causes": []}}
    (directory / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def lists_per_kind(requests: list[dict]) -> Counter:
    """LIST requests (GET on a collection, not a watch) per resource of the workload cluster.

    The CUDA sample's own namespace is left out: its pods are created, watched and read there on purpose.
    """
    counts: Counter = Counter()
    for req in requests:
        if req.get("cluster", "workload") != "workload" or req.get("method") != "GET":
            continue
        query = req.get("query") or ""
        if "watch=true" in query or "watch=1" in query:
            continue
        parts = [p for p in req["path"].split("/") if p]
        # /api/v1/<kind>, /api/v1/namespaces/<ns>/<kind>, /apis/<g>/<v>/<kind>, /apis/<g>/<v>/namespaces/<ns>/<kind>
        core = parts[:1] == ["api"]
        rest = parts[2:] if core else parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            if rest[1].startswith("dgxspark-cuda-"):
                continue  # the CUDA sample's own namespace: the one place the suite writes and watches
            rest = rest[2:]
        if len(rest) == 1 and rest[0] != "namespaces" or rest == ["namespaces"]:
            counts[rest[0]] += 1
    return counts


def run(nodes: int, work: Path, latency_ms: int = 20) -> dict:
    from pytest_dgxspark.testbed import Testbed
    from pytest_dgxspark.testbed.hosts import ssh_connection_count

    scenario = scenario_dir(work, nodes, latency_ms)
    tb_dir = work / f"tb-{nodes}"
    with Testbed(scenario, tb_dir) as testbed:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"),
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(work / f"reports-{nodes}"),
             "-p", "no:cacheprovider", "-q", "--no-header"],
            cwd=REPO, capture_output=True, text=True, timeout=900,
        )
        wall = time.monotonic() - started
        conns = {d.name: ssh_connection_count(d) for d in sorted((tb_dir / "nodes").iterdir())}
        lists = lists_per_kind(testbed.requests())
    results = json.loads((work / f"reports-{nodes}" / "latest" / "results.json").read_text())
    return {"nodes": nodes, "wall_s": wall, "exit": proc.returncode, "verdict": results["verdict"],
            "ssh_conns": conns, "lists": dict(lists),
            "failed": [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dgxspark.bench", description=__doc__)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--ssh-latency-ms", type=int, default=20, help="delay of every SSH command (host fault latency_ms)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dgxspark-bench-") as tmp:
        work = Path(tmp)
        one = run(1, work, args.ssh_latency_ms)
        many = run(args.nodes, work, args.ssh_latency_ms)
    for r in (one, many):
        print(f"bench: {r['nodes']:>2} node(s): {r['wall_s']:.1f} s, exit {r['exit']}, lists {r['lists']}, "
              f"ssh connections {r['ssh_conns']}")
        for line in r["failed"]:
            print(f"bench:   {line}")
    ratio = many["wall_s"] / one["wall_s"]
    lists_max = max([*one["lists"].values(), *many["lists"].values(), 0])
    conns_max = max([*one["ssh_conns"].values(), *many["ssh_conns"].values(), 0])
    print(f"bench: nodes={args.nodes} ssh_latency_ms={args.ssh_latency_ms} wall_ratio_16_1={ratio:.2f} lists_per_kind_max={lists_max} "
          f"ssh_conns_per_host={conns_max}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
