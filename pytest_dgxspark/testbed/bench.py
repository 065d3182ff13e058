"""`make bench`: the suite against 1, 4, 16 and 32 simulated nodes with round-trip latency on every SSH command and API
request, on the stand-in API and (1 and 4 nodes, where it is built) on the real control plane; a table of wall time,
API requests by verb and kind, SSH connections and commands per host, and the CPU seconds of the suite (pytest and what
it starts: ssh clients, Chromium) apart from the simulation's (the simulated hosts' processes and the API side: the
stand-in servers, or etcd, kube-apiserver, the controllers, kwok and the fault proxy), which share the same cores here
and not on a site."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from pytest_dgxspark.testbed.benchtable import (
    LATENCY_MS,
    SUITE_USER,
    counted,
    differences,
    open_watches,
    summary_line,
    table,
    targets,
)

REPO = Path(__file__).resolve().parents[2]
NODE_COUNTS = (1, 4, 16, 32)
REAL_NODE_COUNTS = (1, 4)  # a real control plane per run; what 2 cores afford beside the simulated hosts
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


def run(nodes: int, work: Path, latency_ms: int = LATENCY_MS, api_latency_ms: int = LATENCY_MS, api: str = "standin",
        ignore: tuple[str, ...] = ()) -> dict:
    """The suite once against `nodes` nodes on `api` (standin | real), the files in `ignore` left out. Only the
    requests made while the suite ran are counted: on the real plane the world is written through the API first, by
    the same identity."""
    from pytest_dgxspark.testbed import Testbed
    from pytest_dgxspark.testbed.hosts import ssh_connection_count

    tag = f"{nodes}-{api}" + ("-selected" if ignore else "")
    scenario = scenario_dir(work / tag, nodes, latency_ms, api_latency_ms)
    tb_dir, reports = (work / f"tb-{tag}").resolve(), work / f"reports-{tag}"  # resolved: as the plane's argv names it
    load = os.getloadavg()[0]
    with Testbed(scenario, tb_dir, api=api) as testbed:
        before = len(testbed.requests())
        simulation, suite = testbed_cpu(tb_dir), _children_cpu()
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites", *(f"--ignore={path}" for path in ignore),
             "--site", str(REPO / "sites" / "tirosh-home"),
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(reports),
             "-p", "no:cacheprovider", "-q", "--no-header"],
            cwd=REPO, capture_output=True, text=True, timeout=900,
        )
        wall = time.monotonic() - started
        suite, simulation = _children_cpu() - suite, testbed_cpu(tb_dir) - simulation
        node_dirs = sorted((tb_dir / "nodes").iterdir())
        conns = {d.name: ssh_connection_count(d) for d in node_dirs}
        commands = {d.name: commands_run(d) for d in node_dirs}
        deadline = time.monotonic() + 5  # a watch the suite left is logged complete once the server sees it closed
        while api == "real" and open_watches(tb_dir / "audit.log", SUITE_USER) and time.monotonic() < deadline:
            time.sleep(0.1)
        requests = testbed.requests()[before:]
    results = json.loads((reports / "latest" / "results.json").read_text())
    return {"nodes": nodes, "api": api, "selected": bool(ignore), "wall_s": wall, "exit": proc.returncode,
            "verdict": results["verdict"], "load": load, "suite_cpu_s": suite, "testbed_cpu_s": simulation,
            "ssh_conns": conns, "ssh_commands": commands, **counted(requests), "latency_ms": latency_ms,
            "api_latency_ms": api_latency_ms,
            "failed": [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]}


def _counts(text: str) -> list[int]:
    return sorted({int(n) for n in str(text).split(",") if n.strip() and n.strip() not in ("none", "0")})


def real_plane_missing() -> str | None:
    """Why the real control plane cannot run here (not built), or None."""
    from pytest_dgxspark.testbed import realplane

    try:
        realplane.binaries()
    except realplane.RealPlaneError as exc:
        return str(exc)
    return None


def _say(result: dict, what: str) -> None:
    print(f"bench: {result['nodes']:>2} node(s) {what}: {result['wall_s']:.1f} s, exit {result['exit']}, "
          f"{result['verdict']}", flush=True)
    for line in result["failed"]:
        print(f"bench:   {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dgxspark.testbed.bench", description=__doc__)
    parser.add_argument("--nodes", default=",".join(map(str, NODE_COUNTS)),
                        help="node counts to run, comma separated (1 is always run first; default 1,4,16,32)")
    parser.add_argument("--real-nodes", default=",".join(map(str, REAL_NODE_COUNTS)),
                        help="node counts to run on the real control plane too, where it is built, beside a stand-in "
                             "run of the same checks (default 1,4; `none`: the stand-in only)")
    parser.add_argument("--ssh-latency-ms", type=int, default=LATENCY_MS, help="delay of every SSH command (host fault)")
    parser.add_argument("--api-latency-ms", type=int, default=LATENCY_MS,
                        help="delay of every API request (cluster fault; on the real control plane the fault proxy's)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the testbeds' files (audit logs, requests.jsonl, bundles) in this folder")
    args = parser.parse_args(argv)
    counts = sorted({1, *_counts(args.nodes)})
    real_counts = _counts(args.real_nodes)
    missing = real_plane_missing() if real_counts else None
    runs, not_up = [], []
    with tempfile.TemporaryDirectory(prefix="dgxspark-bench-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for nodes in counts:
            runs.append(run(nodes, work, args.ssh_latency_ms, args.api_latency_ms))
            _say(runs[-1], "stand-in")
        for nodes in real_counts if missing is None else ():
            if nodes not in counts:  # each real run beside a stand-in run of the same nodes
                runs.append(run(nodes, work, args.ssh_latency_ms, args.api_latency_ms))
                _say(runs[-1], "stand-in")
            try:
                runs.append(run(nodes, work, args.ssh_latency_ms, args.api_latency_ms, api="real"))
            except Exception as exc:  # noqa: BLE001 - said in the table's place, the stand-in's rows still print
                not_up.append(f"real control plane, {nodes} node(s): not measured ({exc})")
                continue
            _say(runs[-1], "real")
    nodes = 16 if 16 in counts else counts[-1]
    if missing is not None:
        print(f"bench: real control plane: NOT BUILT, the table has the stand-in's rows only ({missing})")
    for line in not_up + table(runs) + differences(runs) + targets(runs, nodes):
        print(f"bench: {line}")
    print(summary_line(runs, nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
