"""`Testbed`: bring a scenario up (netns, SSH hosts, API servers, kubeconfig, inventory) and tear it all down."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from pytest_dgxspark.testbed import keptplane, netns, objects, pki, realplane
from pytest_dgxspark.testbed import scenario as scenarios
from pytest_dgxspark.testbed.node import host_metadata
from pytest_dgxspark.testbed.sshkeys import write_keypair
from pytest_dgxspark.testbed.world import make_context

API_PORT = 6443
READY_TIMEOUT_S = 15.0
SERVER_MODULE = "pytest_dgxspark.testbed.apiserver"
APIS = ("standin", "real")  # the workload cluster's API: the Python stand-in, or the real control plane (realplane.py)


# Inventory host vars that say how to reach a host: the testbed's own, never the site's (its 192.168.x addresses).
CONNECTION_VARS = frozenset({"ansible_host", "ansible_port", "ansible_user", "ansible_ssh_private_key_file",
                             "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_password", "ansible_become_password"})


class TestbedError(RuntimeError):
    """The testbed could not be brought up; the message says which step and why."""


def default_site() -> Path:
    """The repo's sites/tirosh-home (relative to the package, else to the working directory)."""
    for base in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (base / "sites" / "tirosh-home" / "rke2" / "vars.yml").is_file():
            return base / "sites" / "tirosh-home"
    raise TestbedError("no default site: sites/tirosh-home/rke2/vars.yml was found neither beside the package nor in the cwd; "
                       "pass site=")


def load_site(site: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(vars of rke2/vars.yml, the GPU Operator HelmChart) of a site directory, validated like any site. The testbed
    takes only the kubeconfig context names from the vars (and the inventory's host vars, site_host_vars): the live
    clusters and hosts come from the scenario alone."""
    from pytest_dgxspark.site.model import SiteError
    from pytest_dgxspark.site.model import load_site as load_validated

    try:
        loaded = load_validated(Path(site))
    except SiteError as exc:
        raise TestbedError(f"site {site}: {exc}") from exc
    return dict(loaded.vars), dict(loaded.helmchart)


def site_host_vars(site: Path) -> dict[str, dict[str, Any]]:
    """Each host the site's inventory names -> its host vars (group vars merged), as a run would read them."""
    from pytest_dgxspark.site.model import SiteError
    from pytest_dgxspark.site.model import load_site as load_validated

    try:
        loaded = load_validated(Path(site))
    except SiteError as exc:
        raise TestbedError(f"site {site}: {exc}") from exc
    return {host.name: dict(host.vars) for host in loaded.hosts}


def cri_snapshot(objects_: list[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per node, the CRI view of the pods the API shows running there (crictl pods / ps agree with the API)."""
    import hashlib

    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for obj in objects_:
        spec, status, meta = obj.get("spec") or {}, obj.get("status") or {}, obj.get("metadata") or {}
        if obj.get("kind") != "Pod" or not spec.get("nodeName") or status.get("phase") != "Running":
            continue
        node = out.setdefault(spec["nodeName"], {"pods": [], "containers": []})
        sandbox = hashlib.sha256(str(meta.get("uid", meta.get("name"))).encode()).hexdigest()
        node["pods"].append({"id": sandbox, "name": meta["name"], "namespace": meta.get("namespace", ""),
                             "runtime": spec.get("runtimeClassName") or "(default)"})
        images = {c.get("name"): c.get("image", "") for c in spec.get("containers") or []}
        for cs in status.get("containerStatuses") or []:
            if "running" not in (cs.get("state") or {}):
                continue
            image = cs.get("image") or images.get(cs.get("name"), "")  # a hand-written status may leave it out
            node["containers"].append({"id": str(cs.get("containerID", "")).split("://")[-1], "image": image,
                                       "name": cs["name"], "pod_id": sandbox, "pod": meta["name"],
                                       "namespace": meta.get("namespace", ""), "attempt": cs.get("restartCount", 0)})
    return out


class Testbed:
    """A simulated DGX Spark cluster described by a scenario, living in `directory` until `down()`."""

    __test__ = False  # not a pytest test class

    def __init__(self, scenario: str | Path, directory: Path | str, site: Any = None, *, api: str = "standin",
                 plane: Path | str | None = None, _without_hosts: bool = False) -> None:
        if api not in APIS:
            raise TestbedError(f"api must be one of {', '.join(APIS)}, got {api!r}")
        if plane is not None and api != "real":
            raise TestbedError(f"a kept control plane ({plane}) serves only api='real', got {api!r}")
        self.api = api
        self.plane = Path(plane).resolve() if plane is not None else None  # a kept plane to attach to (keptplane.py)
        self.directory = Path(directory).resolve()
        self.scenario = scenarios.load(scenario)
        # a run passes its loaded, validated Site (the plan decided which); the CLI passes a path or nothing
        self._site = site if hasattr(site, "helmchart") else None
        site_path = self._site.root if self._site is not None else site
        self.site_dir = Path(site_path).resolve() if site_path else (self.scenario.site_dir or default_site())
        self.kubeconfig = self.directory / "kubeconfig"
        self.inventory = self.directory / "inventory.yml"
        self.ssh_config = self.directory / "ssh_config"
        self.contexts: dict[str, str] = {}
        self._without_hosts = _without_hosts  # internal: unit tests of the cluster side only
        self._attached: tuple[Path, int] | None = None  # (kept plane, its audit log's size when this testbed took it)
        self._downing = False

    # --- lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def testbed_id(self) -> str:
        return str(self.directory)

    def up(self) -> Testbed:
        """Start everything; on any failure tear down what was started and raise TestbedError."""
        self.directory.mkdir(parents=True, exist_ok=True)
        previous = _read_state(self.directory)
        if _alive(previous.get("pids", [])) or any(realplane.is_ours(p, self.directory) for p in previous.get("cp_pids", [])):
            raise TestbedError(f"{self.directory}: a testbed is already up here; run `dgxspark-testbed down --dir {self.directory}`")
        for stale in ("requests.jsonl", "state.json"):
            (self.directory / stale).unlink(missing_ok=True)
        try:
            self._up()
        except BaseException as exc:
            self.down()
            if isinstance(exc, TestbedError) or not isinstance(exc, Exception):
                raise
            raise TestbedError(f"testbed {self.scenario.name} in {self.directory}: bring-up failed: {exc!r}") from exc
        return self

    def _up(self) -> None:
        site_vars, _ = ((dict(self._site.vars), dict(self._site.helmchart)) if self._site is not None
                            else load_site(self.site_dir))
        state: dict[str, Any] = {"testbed_id": self.testbed_id, "scenario": self.scenario.name, "links": [], "pids": [], "hosts": []}
        state["slot"] = slot = netns.allocate_subnet(self.testbed_id)
        _write_state(self.directory, state)
        links: dict[str, netns.Link] = {}
        names = list(self.scenario.nodes)
        mgmt = self.scenario.management
        with_mgmt = bool(mgmt.get("enabled", False))
        real = self.api == "real"
        kept = None
        if real:
            try:
                realplane.binaries()  # says what is missing before anything starts
                kept = keptplane.load(self.plane) if self.plane is not None else None
            except (realplane.RealPlaneError, keptplane.KeptPlaneError) as exc:
                raise TestbedError(f"testbed {self.scenario.name} --api real: {exc}") from exc
            if self.scenario.cluster.get("unreachable"):
                kept = None  # nothing answers the workload API: the kept plane is not taken
            if kept is not None and self.scenario.cluster.get("faults"):
                raise TestbedError(f"testbed {self.scenario.name}: its cluster.faults need a control plane of its own (the "
                                   f"fault proxy holds the API port); run it without the kept plane {kept.directory}")
        # on a plane of its own the management cluster is real too (a kept plane holds one cluster: its management
        # cluster stays on the stand-in, whose answers tests/test_differential.py checks against a real server)
        real_mgmt = real and kept is None and with_mgmt and not mgmt.get("unreachable")
        planned = names + (["argocd-mgmt"] if with_mgmt else []) + (["controlplane"] if real and kept is None else [])
        for index, name in enumerate(planned, start=1):
            ns_name, ifname = netns.names_for(slot, index)
            host_ip, node_ip, prefix = netns.node_addresses(slot, index)
            state["links"].append({"name": name, "netns": ns_name, "host_ifname": ifname, "host_ip": host_ip,
                                   "node_ip": node_ip, "prefix": prefix})
            _write_state(self.directory, state)
            if name == "controlplane":  # no default route; the nodes' addresses are its own (kwok serves their kubelet port)
                links[name] = netns.create(ns_name, ifname, host_ip, node_ip, prefix, default_route=False,
                                           local=tuple(links[n].node_ip for n in names))
            elif name == "argocd-mgmt" and real_mgmt:  # a real kube-apiserver: no default route either
                links[name] = netns.create(ns_name, ifname, host_ip, node_ip, prefix, default_route=False)
            else:
                links[name] = netns.create(ns_name, ifname, host_ip, node_ip, prefix)
        node_ips = {n: links[n].node_ip for n in names}
        key = self.directory / "id_ed25519"
        public_key = write_keypair(key)
        known: list[str] = []
        ctx = make_context(self.scenario, node_ips)
        workload_world = objects.build_workload(ctx)  # built first: each host's crictl lists its pods' containers
        if not self._without_hosts:
            known = self._start_hosts(state, links, public_key, site_vars, cri_snapshot(workload_world.objects))
        (self.directory / "known_hosts").write_text("".join(known))
        context, mgmt_context = site_vars["rke2_context_name"], site_vars.get("argocd_context", "argocd")
        server_name = self.scenario.server_name()
        pki_dir = self.directory / "pki"
        pki_dir.mkdir(mode=0o700, exist_ok=True)
        entries = []
        workload_ip = kept.address if kept is not None else links["controlplane" if real else server_name].node_ip
        if kept is not None:  # the kept plane's CA signs this testbed's admin certificate; its token is the plane's
            ca, token = kept.ca, kept.token
            pki.write_private(pki_dir / "workload-ca.crt", ca.cert)
            pki.write_private(pki_dir / "workload-ca.key", ca.key)
        else:
            ca, token = self._cluster_pki(pki_dir, "workload", workload_ip, server_name)
        # the admin client certificate RKE2 issued with the server's own (rke2.yaml): it ends when they do
        server_host = (self.scenario.nodes[server_name] or {}).get("host") or {}
        client = self._client(pki_dir, "workload", float(server_host.get("rke2_cert_days_left", 365)))
        entries.append(pki.kubeconfig_entry(context, f"https://{workload_ip}:{API_PORT}", ca, client))
        self.contexts = {"workload": context}
        worlds = {"workload": (workload_world, self.scenario.cluster, links[server_name])}
        if with_mgmt:
            mgmt_ip = links["argocd-mgmt"].node_ip
            mca, _ = self._cluster_pki(pki_dir, "management", mgmt_ip, "argocd-mgmt")
            entries.append(pki.kubeconfig_entry(mgmt_context, f"https://{mgmt_ip}:{API_PORT}", mca,
                                                self._client(pki_dir, "management")))
            self.contexts["management"] = mgmt_context
            mctx = make_context(self.scenario, {"argocd-mgmt": mgmt_ip})
            world = objects.build_management(mctx, f"https://{workload_ip}:{API_PORT}", ca.cert, token)
            worlds["management"] = (world, mgmt, links["argocd-mgmt"])
        pki.write_kubeconfig(self.kubeconfig, entries, context)
        started = []
        for cluster, (world, spec, link) in worlds.items():
            payload = json.loads(world.to_json())
            payload["faults"] = spec.get("faults") or {}
            payload["scenario"] = self.scenario.name  # the apiserver names it in every answer and on every Node
            pki.write_private(self.directory / f"{cluster}-world.json", json.dumps(payload))
            if spec.get("unreachable"):
                continue
            if real and (cluster == "workload" or real_mgmt):
                state.setdefault("cp_pids", [])

                def record(pid: int) -> None:
                    state["cp_pids"].append(pid)
                    _write_state(self.directory, state)

                if cluster == "management":
                    try:
                        realplane.bring_up(self.directory / "management", link.netns, link.node_ip, "argocd-mgmt",
                                           self.scenario.name, world, mca, {}, faults=spec.get("faults") or None,
                                           on_pid=record, nodes=False)
                    except Exception as exc:  # noqa: BLE001 - the message names the part that failed
                        raise TestbedError(f"testbed {self.scenario.name}: the management cluster's real control plane "
                                           f"did not come up: {exc}") from exc
                    continue

                try:
                    if kept is not None:
                        state["plane"] = {"dir": str(kept.directory),
                                          "audit_offset": kept.audit_log.stat().st_size if kept.audit_log.exists() else 0}
                        _write_state(self.directory, state)
                        self._attached = (kept.directory, int(state["plane"]["audit_offset"]))
                        keptplane.attach(kept, self.directory, self.scenario.name, world, node_ips, on_pid=record)
                    else:
                        realplane.bring_up(self.directory, links["controlplane"].netns, workload_ip, server_name,
                                           self.scenario.name, world, ca, {token: ("testbed:token", "system:masters")},
                                           faults=spec.get("faults") or None, on_pid=record)
                except Exception as exc:  # noqa: BLE001 - the message names the part that failed
                    raise TestbedError(f"testbed {self.scenario.name}: the real control plane did not come up: {exc}") from exc
                continue
            log = open(self.directory / f"apiserver-{cluster}.log", "ab")  # noqa: SIM115 - handed to the child
            proc = subprocess.Popen(["ip", "netns", "exec", link.netns, sys.executable, "-m", SERVER_MODULE, "--dir",
                                     str(self.directory), "--cluster", cluster, "--listen", link.node_ip, "--port", str(API_PORT)],
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env={**os.environ, "PYTHONPATH": _package_root()})
            log.close()
            state["pids"].append(proc.pid)
            _write_state(self.directory, state)
            started.append((cluster, proc, link.node_ip))
        for cluster, proc, ip in started:
            _wait_listening(proc, ip, API_PORT, self.directory / f"apiserver-{cluster}.log")
        self._write_inventory(state, links, key, site_vars)
        _write_state(self.directory, {**state, "contexts": self.contexts, "up": True})

    def _start_hosts(self, state: dict[str, Any], links: dict[str, netns.Link], public_key: str,
                     site_vars: dict[str, Any], cri: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
        hosts = importlib.import_module("pytest_dgxspark.testbed.hosts")
        known = []
        for name, spec in self.scenario.nodes.items():
            host = {**host_metadata(spec or {}), **((spec or {}).get("host") or {})}
            snapshot = cri.get(name, {})
            host["containers"] = list(host.get("containers") or []) + snapshot.get("containers", [])
            host["pods"] = snapshot.get("pods", [])
            node_dir = self.directory / "nodes" / name
            host_key_dir = self.directory / "hostkeys" / name
            host_key_dir.mkdir(parents=True, exist_ok=True)
            handle = hosts.start_host(name, host, node_dir=node_dir, link=links[name],
                                      authorized_key=public_key, host_key_dir=host_key_dir, scenario_dir=self.scenario.directory,
                                      role=(spec or {}).get("role", "server"), scenario=self.scenario.name)
            state["hosts"].append({"name": handle.name, "address": handle.address, "port": handle.port, "netns": handle.netns,
                                   "pid": handle.pid, "node_dir": str(handle.node_dir)})
            _write_state(self.directory, state)
            for pub in sorted(host_key_dir.glob("*.pub")):
                algo, blob = pub.read_text().split()[:2]
                known.append(f"{handle.address} {algo} {blob}\n" if handle.port == 22 else f"[{handle.address}]:{handle.port} {algo} {blob}\n")
                known.append(f"{name} {algo} {blob}\n")
        return known

    def _cluster_pki(self, pki_dir: Path, cluster: str, ip: str, node_name: str) -> tuple[pki.Pair, str]:
        ca = pki.make_ca(f"rke2-server-ca@{int(time.time())}" if cluster == "workload" else f"k3s-server-ca@{int(time.time())}")
        server = pki.server_cert(ca, [ip, "127.0.0.1", "10.43.0.1"],
                                 ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost", node_name])
        pki.write_private(pki_dir / f"{cluster}-ca.crt", ca.cert)
        pki.write_private(pki_dir / f"{cluster}-ca.key", ca.key)
        pki.write_private(pki_dir / f"{cluster}-server.crt", server.cert)
        pki.write_private(pki_dir / f"{cluster}-server.key", server.key)
        token = pki.new_token()
        pki.write_private(pki_dir / f"{cluster}-tokens.json", json.dumps({"tokens": [token]}))
        return ca, token

    @staticmethod
    def _client(pki_dir: Path, cluster: str, days: float = 365) -> pki.Pair:
        ca = pki.Pair((pki_dir / f"{cluster}-ca.crt").read_bytes(), (pki_dir / f"{cluster}-ca.key").read_bytes())
        return pki.client_cert(ca, "system:admin", "system:masters", days)

    def _write_inventory(self, state: dict[str, Any], links: dict[str, netns.Link], key: Path, site_vars: dict[str, Any]) -> None:
        """Addresses and credentials are the testbed's; what the site says of a host (dgxspark_gpu, dgxspark_model,
        dgxspark_gpu_product, rke2_node_labels, ...) is copied from the site's inventory, never invented: a node the
        site does not name gets only what the scenario declares for it (`gpu`, `model`, `node_labels`, `inventory`)."""
        ports = {h["name"]: (h["address"], h["port"]) for h in state["hosts"]}
        site_hosts = ({h.name: dict(h.vars) for h in self._site.hosts} if self._site is not None  # the run's Site
                      else site_host_vars(self.site_dir))
        groups: dict[str, dict[str, Any]] = {"rke2_servers": {"hosts": {}}, "rke2_agents": {"hosts": {}}}
        ssh_lines = []
        for name, spec in self.scenario.nodes.items():
            spec = spec or {}
            address, port = ports.get(name, (links[name].node_ip, 22))
            claims = site_hosts.get(name)
            if claims is None:
                claims = {"dgxspark_gpu": bool(spec.get("gpu", True))}
                if spec.get("model") is not None:
                    claims["dgxspark_model"] = spec["model"]
                if spec.get("node_labels") is not None:
                    claims["rke2_node_labels"] = [str(item) for item in spec["node_labels"]]
                if spec.get("node_taints") is not None:
                    claims["rke2_node_taints"] = [str(item) for item in spec["node_taints"]]
                claims.update(spec.get("inventory") or {})
            host_vars = {**{k: v for k, v in claims.items() if k not in CONNECTION_VARS},
                         "ansible_host": address, "ansible_port": port, "ansible_user": "root",
                         "ansible_ssh_private_key_file": str(key)}
            group = "rke2_servers" if spec.get("role", "server") == "server" else "rke2_agents"
            groups[group]["hosts"][name] = host_vars
            ssh_lines.append(f"Host {name} {address}\n  HostName {address}\n  Port {port}\n  User root\n  IdentityFile {key}\n"
                             f"  IdentitiesOnly yes\n  UserKnownHostsFile {self.directory / 'known_hosts'}\n"
                             "  StrictHostKeyChecking yes\n\n")
        children = {g: v for g, v in groups.items() if v["hosts"]}
        header = f"# Testbed inventory of scenario {self.scenario.name} (SIMULATED); written by dgxspark-testbed up.\n"
        self.inventory.write_text(header + yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
        self.ssh_config.write_text("# SIMULATED testbed hosts; written by dgxspark-testbed up.\n" + "".join(ssh_lines))

    def down(self) -> None:
        """Stop every process, remove every netns/veth and release the subnet; safe twice and after a crashed `up`."""
        if self._downing:
            return
        self._downing = True
        try:
            teardown(self.directory)
        finally:
            self._downing = False

    def requests(self) -> list[dict[str, Any]]:
        """Every API request recorded so far (DIR/requests.jsonl); on the real control plane, the workload requests of
        the suite's identity (system:admin) in its audit log, in the same shape (cluster, method, path, query, status)."""
        if self.api == "real":
            if self._attached is not None:  # from where this testbed's attach began in the kept plane's log
                return keptplane.audited_since(self._attached[0], self._attached[1], "system:admin")
            management = [{**r, "cluster": "management"} for r in
                          realplane.audited_requests(self.directory / "management" / "audit.log", "system:admin")]
            return realplane.audited_requests(self.directory / "audit.log", "system:admin") + management
        path = self.directory / "requests.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def teardown(directory: Path) -> list[str]:
    """Undo what state.json records; returns the problems met (never raises)."""
    directory = Path(directory).resolve()
    state = _read_state(directory)
    problems: list[str] = []
    realplane.stop(state.get("cp_pids", []), directory, problems)
    if state.get("plane"):
        keptplane.detach(Path(state["plane"]["dir"]), directory, problems)
    for pid in state.get("pids", []):
        _stop(pid, problems)
    if state.get("hosts"):
        try:
            hosts = importlib.import_module("pytest_dgxspark.testbed.hosts")
            for h in state["hosts"]:
                handle = hosts.HostHandle(h["name"], h["address"], h["port"], h["netns"], h["pid"], Path(h["node_dir"]))
                try:
                    hosts.stop_host(handle)
                except Exception as exc:  # noqa: BLE001 - keep tearing down the rest
                    problems.append(f"stop host {h['name']}: {exc!r}")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"hosts module: {exc!r}")
    for link in state.get("links", []):
        try:
            netns.destroy(netns.Link(link["netns"], link["host_ifname"], link["host_ip"], link["node_ip"], link["prefix"]))
        except Exception as exc:  # noqa: BLE001
            problems.append(f"netns {link['netns']}: {exc!r}")
    try:
        netns.release_subnet(state.get("testbed_id") or str(directory))
    except Exception as exc:  # noqa: BLE001
        problems.append(f"release subnet: {exc!r}")
    if (directory / "state.json").exists():
        _write_state(directory, {"testbed_id": str(directory), "down": True, "problems": problems})
    return problems


def _stop(pid: int, problems: list[str]) -> None:
    if not _is_ours(pid):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError as exc:
        problems.append(f"pid {pid}: {exc}")
        return
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _is_ours(pid):
        _reap(pid)
        time.sleep(0.05)
    if _is_ours(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _reap(pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _is_ours(pid: int) -> bool:
    """The pid is still one of our API servers (not a recycled pid, not a zombie)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return SERVER_MODULE.encode() in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _alive(pids: list[int]) -> bool:
    return any(_is_ours(p) for p in pids)


def _read_state(directory: Path) -> dict[str, Any]:
    try:
        return json.loads((directory / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _write_state(directory: Path, state: dict[str, Any]) -> None:
    tmp = directory / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(directory / "state.json")


def _package_root() -> str:
    root = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)


def _wait_listening(proc: subprocess.Popen[bytes], ip: str, port: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise TestbedError(f"API server on {ip}:{port} exited with {proc.returncode} before listening; {log}:\n{tail}")
        try:
            with socket.create_connection((ip, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TestbedError(f"API server on {ip}:{port} did not listen within {READY_TIMEOUT_S:.0f} s; see {log}")
