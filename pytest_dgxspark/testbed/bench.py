"""`make bench`: the suite against 1, 4, 16 and 32 simulated nodes with round-trip latency on every SSH command and API
request; a table of wall time, API requests by verb and kind, SSH connections and commands per host, and the CPU
seconds of the suite (pytest and what it starts: ssh clients, Chromium) apart from the simulation's (the simulated
hosts' processes and the API servers), which share the same cores here and not on a site."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs

import yaml

REPO = Path(__file__).resolve().parents[2]
NODE_COUNTS = (1, 4, 16, 32)
LATENCY_MS = 20  # a LAN round trip plus sshd's session start, or an API request through a load balancer
COMMAND_COUNTER = "run/dgxspark-testbed-commands"  # the testbed's SSH session wrapper counts commands there


def scenario_dir(root: Path, nodes: int, latency_ms: int = LATENCY_MS, api_latency_ms: int = LATENCY_MS) -> Path:
    """A scenario extending `healthy` with nodes gpu-02..gpu-NN as DGX Spark agents; every SSH command on every node
    starts `latency_ms` late (host fault `latency_ms`), every API request `api_latency_ms` late (cluster fault)."""
    directory = root / f"bench-{nodes}"
    directory.mkdir(parents=True)
    # faults always set (latency 0 included): the session wrapper that counts commands runs only on hosts with faults
    faults = {"faults": {"latency_ms": latency_ms}}
    extra = {
        f"gpu-{i:02d}": {"role": "agent", "gpu": True, "model": "dgx-spark",
                         "host": {"hostname": f"gpu-{i:02d}", **faults}}
        for i in range(2, nodes + 1)
    }
    extra["gpu-01"] = {"host": dict(faults)}
    doc = {"format": 2, "description": f"benchmark: {nodes} DGX Spark nodes", "extends": "healthy", "nodes": extra,
           "expect": {"rules": {}, "root_causes": []}}
    if api_latency_ms:
        doc["cluster"] = {"faults": {"latency_ms": api_latency_ms}}
    (directory / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return directory


def verb_and_kind(req: dict) -> tuple[str, str] | None:
    """('LIST', 'pods'), ('GET', 'nodes'), ('WATCH', 'pods'), ('CREATE', 'namespaces'), ... of one recorded request of
    the workload cluster; None for discovery, /version and /openapi. The CUDA sample's own namespace is its own kind
    (`cuda-sample/<kind>`): its pods are created, watched and read there on purpose."""
    if req.get("cluster", "workload") != "workload":
        return None
    parts = [p for p in req["path"].split("/") if p]
    # /api/v1/<kind>[/<name>[/<sub>]], /api/v1/namespaces/<ns>/<kind>[...], /apis/<g>/<v>/... the same
    if parts[:1] == ["api"] and len(parts) >= 3:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        rest = parts[3:]
    else:
        return None
    prefix = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        if rest[1].startswith("dgxspark-cuda-"):
            prefix = "cuda-sample/"
        rest = rest[2:]
    kind = prefix + rest[0] + (f"/{rest[2]}" if len(rest) >= 3 else "")
    query = _query(req.get("query"))
    if kind == "namespaces" and "managed-by=pytest-dgxspark" in query.get("labelSelector", ""):
        kind = "cuda-sample/namespaces"  # the CUDA sample looking for other runs' namespaces: fresh on purpose
    method = req.get("method", "GET")
    if method == "GET":
        if query.get("watch") in ("true", "1"):
            verb = "WATCH"
        else:
            verb = "LIST" if len(rest) == 1 else "GET"
    else:
        verb = {"POST": "CREATE", "PUT": "UPDATE"}.get(method, method)
    return verb, kind


def _query(query: object) -> dict[str, str]:
    """A recorded query (requests.jsonl keeps a mapping of first values; a raw string is parsed)."""
    if isinstance(query, dict):
        return {str(k): str(v) for k, v in query.items()}
    return {k: v[0] for k, v in parse_qs(str(query or ""), keep_blank_values=True).items()}


def requests_by_verb_kind(requests: list[dict]) -> Counter:
    """Recorded requests counted by (verb, kind)."""
    return Counter(vk for vk in map(verb_and_kind, requests) if vk is not None)


def lists_per_kind(requests: list[dict]) -> Counter:
    """LIST requests per resource of the workload cluster, the CUDA sample's own namespace left out."""
    return Counter({kind: n for (verb, kind), n in requests_by_verb_kind(requests).items()
                    if verb == "LIST" and not kind.startswith("cuda-sample/")})


def commands_run(node_dir: Path) -> int | None:
    """SSH commands the node's session wrapper counted (read through its PID 1's root; None when unknown)."""
    try:
        info = json.loads((node_dir / "host.json").read_text())
        return int((Path(f"/proc/{info['init_pid']}/root") / COMMAND_COUNTER).read_text().strip() or 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _cpu_of(pid: str) -> float:
    """CPU seconds of a process and of the children it has reaped (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def testbed_cpu(tb_dir: Path) -> float:
    """CPU seconds the simulation has used so far: every process in the nodes' PID namespaces (sshd, the session
    wrapper, shims, stand-ins) and the testbed's API servers."""
    namespaces = set()
    for node in (tb_dir / "nodes").iterdir():
        try:
            namespaces.add(os.readlink(f"/proc/{json.loads((node / 'host.json').read_text())['init_pid']}/ns/pid"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    total = 0.0
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            inside = os.readlink(f"/proc/{pid}/ns/pid") in namespaces
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            # the stand-in API servers, or the real control plane's processes (their arguments name tb_dir/controlplane)
            server = not inside and str(tb_dir).encode() in cmdline and \
                (b"testbed.apiserver" in cmdline or f"{tb_dir}/controlplane".encode() in cmdline)
        except OSError:
            continue
        if inside or server:
            total += _cpu_of(pid)
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(nodes: int, work: Path, latency_ms: int = LATENCY_MS, api_latency_ms: int = LATENCY_MS, api: str = "standin") -> dict:
    from pytest_dgxspark.testbed import Testbed
    from pytest_dgxspark.testbed.hosts import ssh_connection_count

    scenario = scenario_dir(work / api, nodes, latency_ms, api_latency_ms)
    tb_dir = work / f"tb-{nodes}-{api}"
    load = os.getloadavg()[0]
    with Testbed(scenario, tb_dir, api=api) as testbed:
        simulation, suite = testbed_cpu(tb_dir), _children_cpu()
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"),
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(work / f"reports-{nodes}-{api}"),
             "-p", "no:cacheprovider", "-q", "--no-header"],
            cwd=REPO, capture_output=True, text=True, timeout=900,
        )
        wall = time.monotonic() - started
        suite, simulation = _children_cpu() - suite, testbed_cpu(tb_dir) - simulation
        node_dirs = sorted((tb_dir / "nodes").iterdir())
        conns = {d.name: ssh_connection_count(d) for d in node_dirs}
        commands = {d.name: commands_run(d) for d in node_dirs}
        requests = testbed.requests()
    results = json.loads((work / f"reports-{nodes}-{api}" / "latest" / "results.json").read_text())
    return {"nodes": nodes, "api": api, "wall_s": wall, "exit": proc.returncode, "verdict": results["verdict"], "load": load,
            "suite_cpu_s": suite, "testbed_cpu_s": simulation,
            "ssh_conns": conns, "ssh_commands": commands, "lists": dict(lists_per_kind(requests)),
            "requests": requests_by_verb_kind(requests),
            "failed": [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]}


def _max(values: object) -> int:
    return max([v for v in values if v is not None] or [0])  # type: ignore[union-attr]


def table(runs: list[dict]) -> list[str]:
    """The benchmark table, one line per node count, then the API requests of each run by verb and kind."""
    lines = [f"{'nodes':>5} {'wall s':>7} {'ratio':>6} {'load':>5} {'verdict':<10} {'API reqs':>8} {'LIST max':>8} "
             f"{'ssh conns/host':>14} {'ssh cmds/host':>13} {'suite CPU s':>11} {'testbed CPU s':>13}"]
    base = runs[0]["wall_s"]
    for r in runs:
        lines.append(f"{r['nodes']:>5} {r['wall_s']:>7.1f} {r['wall_s'] / base:>6.2f} {r['load']:>5.1f} {r['verdict']:<10} "
                     f"{sum(r['requests'].values()):>8} {_max(r['lists'].values()):>8} "
                     f"{_max(r['ssh_conns'].values()):>14} {_max(r['ssh_commands'].values()):>13} "
                     f"{r.get('suite_cpu_s', 0.0):>11.1f} {r.get('testbed_cpu_s', 0.0):>13.1f}")
    for r in runs:
        by = ", ".join(f"{verb} {kind} {n}" for (verb, kind), n in sorted(r["requests"].items()))
        lines.append(f"{r['nodes']:>2} node(s) API requests: {by}")
    return lines


def targets(runs: list[dict], nodes: int = 16) -> list[str]:
    """Issue 8's targets, each with what this run measured and whether it holds (the benchmark holds them, not tests)."""
    one = next(r for r in runs if r["nodes"] == 1)
    many = next((r for r in runs if r["nodes"] == nodes), runs[-1])
    ratio = many["wall_s"] / one["wall_s"]
    lists_max = _max(v for r in runs for v in r["lists"].values())
    conns_max = _max(v for r in runs for v in r["ssh_conns"].values())
    one_cmds = _max(one["ssh_commands"].values())
    cmds_max = _max(v for r in runs for v in r["ssh_commands"].values())
    found = [
        (f"wall_ratio_{many['nodes']}_1 <= 1.5", ratio <= 1.5, f"{ratio:.2f}"),
        ("one LIST per kind per run", lists_max <= 1, f"at most {lists_max}"),
        ("one SSH connection per host", conns_max <= 1, f"at most {conns_max}"),
        ("no more SSH commands per host than the one-node run", cmds_max <= one_cmds, f"{cmds_max} vs {one_cmds}"),
        ("healthy one-node run under 10 s", one["wall_s"] < 10 and one["verdict"] == "ACCEPTED",
         f"{one['wall_s']:.1f} s, {one['verdict']}"),
    ]
    return [f"target {name}: {'holds' if ok else 'MISSED'} ({seen})" for name, ok, seen in found]


def summary_line(runs: list[dict], nodes: int = 16) -> str:
    """The last line (DESIGN.md contract): node count, wall ratio to one node, the worst LIST count and SSH count."""
    one = next(r for r in runs if r["nodes"] == 1)
    many = next((r for r in runs if r["nodes"] == nodes), runs[-1])
    ratio = many["wall_s"] / one["wall_s"]
    lists_max = _max(v for r in runs for v in r["lists"].values())
    conns_max = _max(v for r in runs for v in r["ssh_conns"].values())
    cmds = _max(v for r in runs for v in r["ssh_commands"].values())
    return (f"bench: nodes={many['nodes']} wall_ratio_16_1={ratio:.2f} lists_per_kind_max={lists_max} "
            f"ssh_conns_per_host={conns_max} ssh_cmds_per_host_max={cmds} ssh_cmds_one_node={_max(one['ssh_commands'].values())} "
            f"latency_ms={one.get('latency_ms', LATENCY_MS)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dgxspark.testbed.bench", description=__doc__)
    parser.add_argument("--nodes", default=",".join(map(str, NODE_COUNTS)),
                        help="node counts to run, comma separated (1 is always run first; default 1,4,16,32)")
    parser.add_argument("--ssh-latency-ms", type=int, default=LATENCY_MS, help="delay of every SSH command (host fault)")
    parser.add_argument("--api-latency-ms", type=int, default=LATENCY_MS, help="delay of every API request (cluster fault)")
    parser.add_argument("--real", choices=("auto", "off"), default="auto",
                        help="also run one node on the real control plane when it is built (default auto)")
    args = parser.parse_args(argv)
    counts = sorted({1, *(int(n) for n in str(args.nodes).split(",") if n.strip())})
    runs = []
    with tempfile.TemporaryDirectory(prefix="dgxspark-bench-") as tmp:
        for nodes in counts:
            result = run(nodes, Path(tmp), args.ssh_latency_ms, args.api_latency_ms)
            result["latency_ms"] = args.ssh_latency_ms
            runs.append(result)
            print(f"bench: {nodes:>2} node(s): {result['wall_s']:.1f} s, exit {result['exit']}, {result['verdict']}",
                  flush=True)
            for line in result["failed"]:
                print(f"bench:   {line}")
        real = _real_run(Path(tmp), args) if args.real == "auto" else None
    for line in table(runs) + targets(runs, 16 if 16 in counts else counts[-1]):
        print(f"bench: {line}")
    if real is not None:
        for line in real_lines(runs[0], real):
            print(f"bench: {line}")
    print(summary_line(runs, 16 if 16 in counts else counts[-1]))
    return 0


def _real_run(work: Path, args: argparse.Namespace) -> dict | None:
    """One node on the real control plane (None, said in one line, when it is not built)."""
    from pytest_dgxspark.testbed import RealPlaneError, real_plane_binaries

    try:
        real_plane_binaries()
    except RealPlaneError as exc:
        print(f"bench: real control plane: not run ({exc})", flush=True)
        return None
    started = time.monotonic()
    result = run(1, work, args.ssh_latency_ms, args.api_latency_ms, api="real")
    result["bring_up_s"] = time.monotonic() - started - result["wall_s"]
    print(f"bench:  1 node(s) on the real control plane: {result['wall_s']:.1f} s, exit {result['exit']}, "
          f"{result['verdict']}", flush=True)
    return result


def real_lines(standin: dict, real: dict) -> list[str]:
    """The one-node run on the real control plane beside the stand-in's: wall, API requests, CPU."""
    return [f"{'api':<8} {'wall s':>7} {'verdict':<10} {'API reqs':>8} {'LIST max':>8} {'suite CPU s':>11} "
            f"{'API side CPU s':>14} {'bring-up + down s':>17}"] + [
        f"{r['api']:<8} {r['wall_s']:>7.1f} {r['verdict']:<10} {sum(r['requests'].values()):>8} "
        f"{_max(r['lists'].values()):>8} {r.get('suite_cpu_s', 0.0):>11.1f} {r.get('testbed_cpu_s', 0.0):>14.1f} "
        + (f"{r['bring_up_s']:>17.1f}" if "bring_up_s" in r else f"{'-':>17}") for r in (standin, real)]


if __name__ == "__main__":
    raise SystemExit(main())
