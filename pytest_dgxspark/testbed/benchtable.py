"""`make bench`'s figures and what it prints: API requests by verb and kind (the stand-in's requests.jsonl, or the real
control plane's audit log as realplane.audited_requests shapes it), the table with its `api` column, the real plane's
requests beside the stand-in's, the targets (holds or MISSED, with what was measured) and the last line."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

LATENCY_MS = 20  # a LAN round trip plus sshd's session start, or an API request through a load balancer
SUITE_USER = "system:admin"  # the testbed kubeconfig's identity: on the real plane, the audit log's username
API_NAMES = {"standin": "stand-in", "real": "real"}


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


def counted(requests: list[dict]) -> dict:
    """A run's API figures from its recorded requests (requests.jsonl's lines, or the audit log's as
    realplane.audited_requests shapes them): requests by (verb, kind) and LISTs per kind."""
    return {"requests": requests_by_verb_kind(requests), "lists": dict(lists_per_kind(requests))}


def open_watches(audit_log: Path, user: str) -> int:
    """Requests of `user` the audit log shows started (ResponseStarted: watches) and not yet complete."""
    started: set[str] = set()
    try:
        lines = audit_log.read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if (event.get("user") or {}).get("username") != user:
            continue
        if event.get("stage") == "ResponseStarted":
            started.add(event.get("auditID", ""))
        elif event.get("stage") in ("ResponseComplete", "Panic"):
            started.discard(event.get("auditID", ""))
    return len(started)


def _max(values: Iterable[int | None]) -> int:
    return max([v for v in values if v is not None] or [0])


def _group(r: dict) -> tuple[str, bool]:
    return r.get("api", "standin"), bool(r.get("selected"))


def _label(r: dict) -> str:
    return API_NAMES[r.get("api", "standin")] + ("*" if r.get("selected") else "")


def table(runs: list[dict]) -> list[str]:
    """The benchmark table: what the API's latency is, one line per run (api: stand-in or real; `*`: the checks the
    real plane can run), then each run's API requests by verb and kind. The ratio is to the one-node run of the same
    api and checks."""
    latency = {(r.get("latency_ms", LATENCY_MS), r.get("api_latency_ms", LATENCY_MS)) for r in runs}
    lines = ["latency: " + "; ".join(f"{ssh} ms per SSH command, {api} ms per API request" for ssh, api in sorted(latency))
             + (" (on the real control plane made by the fault proxy in front of kube-apiserver, as the stand-in makes it)"
                if any(r.get("api") == "real" for r in runs) else "")]
    if any(r.get("selected") for r in runs):
        lines.append("*: with some suite files left out (bench.run's ignore), so their rules are untested")
    lines.append(f"{'nodes':>5} {'api':<9} {'wall s':>7} {'ratio':>6} {'load':>5} {'verdict':<10} {'API reqs':>8} "
                 f"{'LIST max':>8} {'ssh conns/host':>14} {'ssh cmds/host':>13} {'suite CPU s':>11} {'testbed CPU s':>13}")
    base: dict[tuple[str, bool], float] = {}
    for r in runs:
        base.setdefault(_group(r), r["wall_s"])
    for r in runs:
        lines.append(f"{r['nodes']:>5} {_label(r):<9} {r['wall_s']:>7.1f} {r['wall_s'] / base[_group(r)]:>6.2f} "
                     f"{r['load']:>5.1f} {r['verdict']:<10} {sum(r['requests'].values()):>8} {_max(r['lists'].values()):>8} "
                     f"{_max(r['ssh_conns'].values()):>14} {_max(r['ssh_commands'].values()):>13} "
                     f"{r.get('suite_cpu_s', 0.0):>11.1f} {r.get('testbed_cpu_s', 0.0):>13.1f}")
    for r in runs:
        by = ", ".join(f"{verb} {kind} {n}" for (verb, kind), n in sorted(r["requests"].items()))
        lines.append(f"{r['nodes']:>2} node(s) {_label(r)} API requests: {by}")
    return lines


def differences(runs: list[dict]) -> list[str]:
    """For each real run, the requests by verb and kind it made other than the stand-in run beside it (same nodes, same
    checks): `same requests` or each (verb, kind) with both counts."""
    lines = []
    for real in (r for r in runs if r.get("api") == "real"):
        standin = next((r for r in runs if r.get("api", "standin") == "standin" and r["nodes"] == real["nodes"]
                        and bool(r.get("selected")) == bool(real.get("selected"))), None)
        if standin is None:
            continue
        keys = sorted(set(real["requests"]) | set(standin["requests"]))
        differ = [f"{verb} {kind} {real['requests'].get((verb, kind), 0)} vs {standin['requests'].get((verb, kind), 0)}"
                  for verb, kind in keys if real["requests"].get((verb, kind), 0) != standin["requests"].get((verb, kind), 0)]
        lines.append(f"{real['nodes']:>2} node(s) real vs stand-in: " + ("same requests by verb and kind" if not differ
                                                                          else ", ".join(differ)))
    return lines


def _worst_lists(runs: list[dict]) -> str:
    """The worst LIST count per kind and, past one, which kinds at how many nodes."""
    worst = _max(v for r in runs for v in r["lists"].values())
    over = sorted({f"{kind} {n} at {r['nodes']} node(s)" for r in runs for kind, n in r["lists"].items() if n > 1})
    return f"at most {worst}" + (f": {', '.join(over)}" if over else "")


def _figures(runs: list[dict], nodes: int) -> dict[str, Any]:
    """What targets() and summary_line() both read: the real control plane's runs apart, and of the stand-in's full
    runs the one-node and the `nodes` run, the wall ratio and the worst LIST, SSH connection and command counts."""
    standin = [r for r in runs if _group(r) == ("standin", False)]
    one = next(r for r in standin if r["nodes"] == 1)
    many = next((r for r in standin if r["nodes"] == nodes), standin[-1])
    return {"real": [r for r in runs if r.get("api") == "real"], "standin": standin, "one": one, "many": many,
            "ratio": many["wall_s"] / one["wall_s"],
            "lists_max": _max(v for r in standin for v in r["lists"].values()),
            "conns_max": _max(v for r in standin for v in r["ssh_conns"].values()),
            "cmds_max": _max(v for r in standin for v in r["ssh_commands"].values())}


def targets(runs: list[dict], nodes: int = 16) -> list[str]:
    """Issue 8's targets, each with what this run measured and whether it holds (the benchmark holds them, not tests);
    one LIST per kind and one SSH connection per host are held on the real control plane's runs too."""
    f = _figures(runs, nodes)
    real, runs, one, many = f["real"], f["standin"], f["one"], f["many"]
    ratio, lists_max, conns_max, cmds_max = f["ratio"], f["lists_max"], f["conns_max"], f["cmds_max"]
    one_cmds = _max(one["ssh_commands"].values())
    found = [
        (f"wall_ratio_{many['nodes']}_1 <= 1.5", ratio <= 1.5, f"{ratio:.2f}"),
        ("one LIST per kind per run", lists_max <= 1, _worst_lists(runs)),
        ("one SSH connection per host", conns_max <= 1, f"at most {conns_max}"),
        ("no more SSH commands per host than the one-node run", cmds_max <= one_cmds, f"{cmds_max} vs {one_cmds}"),
        ("healthy one-node run under 10 s", one["wall_s"] < 10 and one["verdict"] == "ACCEPTED",
         f"{one['wall_s']:.1f} s, {one['verdict']}"),
    ]
    if real:
        real_lists = _max(v for r in real for v in r["lists"].values())
        real_conns = _max(v for r in real for v in r["ssh_conns"].values())
        found += [("one LIST per kind per run on the real control plane", real_lists <= 1, _worst_lists(real)),
                  ("one SSH connection per host on the real control plane", real_conns <= 1, f"at most {real_conns}")]
    return [f"target {name}: {'holds' if ok else 'MISSED'} ({seen})" for name, ok, seen in found]


def summary_line(runs: list[dict], nodes: int = 16) -> str:
    """The last line (DESIGN.md contract): node count, wall ratio to one node, the worst LIST count and SSH count of
    the stand-in's runs; then the real control plane's node counts and the same two figures (`real=not-run`)."""
    f = _figures(runs, nodes)
    real, one, many = f["real"], f["one"], f["many"]
    ratio, lists_max, conns_max, cmds = f["ratio"], f["lists_max"], f["conns_max"], f["cmds_max"]
    if real:
        tail = (f"real_nodes={','.join(str(r['nodes']) for r in real)} "
                f"real_lists_per_kind_max={_max(v for r in real for v in r['lists'].values())} "
                f"real_ssh_conns_per_host={_max(v for r in real for v in r['ssh_conns'].values())}")
    else:
        tail = "real=not-run"
    return (f"bench: nodes={many['nodes']} wall_ratio_16_1={ratio:.2f} lists_per_kind_max={lists_max} "
            f"ssh_conns_per_host={conns_max} ssh_cmds_per_host_max={cmds} ssh_cmds_one_node={_max(one['ssh_commands'].values())} "
            f"latency_ms={one.get('latency_ms', LATENCY_MS)} {tail}")
