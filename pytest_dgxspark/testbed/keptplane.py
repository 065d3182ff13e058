"""A real control plane kept across testbeds: etcd, kube-apiserver, kube-controller-manager and kube-scheduler started
once in a network namespace of their own (no default route), then lent to one testbed at a time.

A testbed given the plane (`--testbed-plane DIR`, `dgxspark-testbed up --api real --plane DIR`) attaches to it: the
plane goes back to what it held right after it started (every etcd key written since is removed in etcd itself, the
namespaces and service accounts a world relabelled are put back; the API server's watch caches see the deletions as a
controller would), the node addresses are added to its namespace (kwok serves their kubelet port), the scenario's world
is written through the API and the testbed's own kwok, kwokrun.py and controllers.py start. Detaching stops those
three and frees the plane. What a plane of its own per testbed costs (kube-apiserver's start: its bootstrap
objects, the OpenAPI of every built-in kind) is paid once per plane instead of once per scenario.

    dgxspark-testbed plane up --dir DIR      start one and return
    dgxspark-testbed plane down --dir DIR    stop it (and whatever testbed holds it loses its API)
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed import netns, pki, realplane, realworld
from pytest_dgxspark.testbed.realapi import Api

PLANE_FILE = "plane.json"
ATTACHED_FILE = "attached.json"
ETCD_PORT = 2379
# baseline keys a world may change in place (world.write relabels the namespaces and service accounts the server or
# the controller manager made): put back at each attach; every other baseline key is the plane's own (leases, the
# kubernetes Service's endpoints) and left as its components keep it
RESTORED = ("/registry/namespaces/", "/registry/serviceaccounts/")
TXN_OPS = 100  # etcd's --max-txn-ops is 128
SETTLE_TIMEOUT_S = 30.0


class KeptPlaneError(RuntimeError):
    """The kept plane is not there, not up, or held by another testbed; the message says which and what to do."""


@dataclass
class Kept:
    """A kept plane as plane.json records it."""

    directory: Path
    netns: str
    host_ifname: str
    host_ip: str
    address: str
    prefix: int
    pids: list[int]
    token: str
    baseline: dict[str, Any]  # etcd key -> {"rev": mod_revision, "value": base64 (RESTORED keys only)}

    @property
    def ca(self) -> pki.Pair:
        cp = self.directory / "controlplane"
        return pki.Pair((cp / "ca.crt").read_bytes(), (cp / "ca.key").read_bytes())

    @property
    def audit_log(self) -> Path:
        return self.directory / "audit.log"

    def api(self) -> Api:
        return Api.from_kubeconfig(self.directory / "controlplane" / "admin.kubeconfig",
                                   server=f"https://{self.address}:{realplane.API_PORT}")

    def etcd(self) -> Etcd:
        return Etcd(self.address, ETCD_PORT)


class Etcd:
    """etcd's v3 JSON gateway (/v3/kv/...), over plain HTTP on the plane's own address."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
        finally:
            conn.close()
        if resp.status != 200:
            raise KeptPlaneError(f"etcd {path} on {self.host}:{self.port}: HTTP {resp.status}: {text[:500]}")
        return json.loads(text) if text else {}

    def keys(self, prefix: str, values: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
        """key -> {"rev": mod_revision, "value": base64} under prefix (a value only for keys under `values`)."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        found = self._post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end), "keys_only": True})
        out = {}
        for kv in found.get("kvs") or []:
            out[base64.b64decode(kv["key"]).decode()] = {"rev": int(kv.get("mod_revision") or kv.get("modRevision") or 0)}
        for prefix_v in values:
            end_v = prefix_v[:-1] + chr(ord(prefix_v[-1]) + 1)
            for kv in self._post("/v3/kv/range", {"key": _b64(prefix_v), "range_end": _b64(end_v)}).get("kvs") or []:
                key = base64.b64decode(kv["key"]).decode()
                if key in out:
                    out[key]["value"] = kv.get("value", "")
        return out

    def apply(self, deletes: list[str], puts: dict[str, str]) -> int:
        """Delete `deletes`, put `puts` (key -> base64 value), TXN_OPS at a time; returns the operations done."""
        ops: list[dict[str, Any]] = [{"request_delete_range": {"key": _b64(k)}} for k in deletes]
        ops += [{"request_put": {"key": _b64(k), "value": v}} for k, v in puts.items()]
        for start in range(0, len(ops), TXN_OPS):
            self._post("/v3/kv/txn", {"success": ops[start:start + TXN_OPS]})
        return len(ops)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def load(directory: Path) -> Kept:
    """The kept plane in `directory`; KeptPlaneError unless it is up (plane.json there, its processes alive)."""
    directory = Path(directory).resolve()
    try:
        doc = json.loads((directory / PLANE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise KeptPlaneError(f"{directory}: no kept control plane here ({PLANE_FILE}: {exc}); start one with "
                             f"`dgxspark-testbed plane up --dir {directory}`") from exc
    kept = Kept(directory, doc["netns"], doc["host_ifname"], doc["host_ip"], doc["address"], int(doc["prefix"]),
                list(doc["pids"]), doc["token"], doc["baseline"])
    dead = [p for p in kept.pids if not realplane.is_ours(p, directory)]
    if dead:
        raise KeptPlaneError(f"{directory}: the kept control plane is not running (pids {dead} are gone); "
                             f"`dgxspark-testbed plane down --dir {directory}` then `plane up` again")
    return kept


def start(directory: Path, *, on_pid: Any = None) -> Kept:
    """Start a kept plane in `directory` (its own address slot and netns); returns once the controller manager acts
    and the baseline is recorded. On any failure what was started is stopped and KeptPlaneError raised."""
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / PLANE_FILE).exists():
        try:
            load(directory)
        except KeptPlaneError:
            stop(directory)
        else:
            raise KeptPlaneError(f"{directory}: a kept control plane is already up here")
    realplane.binaries()
    pids: list[int] = []
    record: dict[str, Any] = {"pids": pids}
    (directory / "starting.json").write_text(json.dumps(record))

    def remember(pid: int) -> None:
        pids.append(pid)
        (directory / "starting.json").write_text(json.dumps(record))
        if on_pid is not None:
            on_pid(pid)

    slot = netns.allocate_subnet(str(directory))
    name, ifname = netns.names_for(slot, 1)
    host_ip, address, prefix = netns.node_addresses(slot, 1)
    record.update({"netns": name, "host_ifname": ifname, "host_ip": host_ip, "address": address, "prefix": prefix})
    (directory / "starting.json").write_text(json.dumps(record))
    try:
        netns.create(name, ifname, host_ip, address, prefix, default_route=False)
        ca = pki.make_ca(f"rke2-server-ca@{int(time.time())}")
        token = pki.new_token()
        cp = realplane.write_files(directory, ca, address, "kept-plane", {token: ("testbed:token", "system:masters")})
        pki.write_private(cp / "ca.key", ca.key)
        plane = realplane.start(directory, name, address, {}, on_pid=remember,
                                etcd_urls=(f"http://{address}:{ETCD_PORT}",))
        realplane.start_controllers(plane, None, on_pid=remember)
        api = Api.from_kubeconfig(cp / "admin.kubeconfig", server=plane.url)
        try:
            realworld.install_logs_crd(api)
            realworld.wait_controller_manager(api)
            _settle(api)
        finally:
            api.close()
        baseline = Etcd(address, ETCD_PORT).keys("/registry/", RESTORED)
        doc = {"netns": name, "host_ifname": ifname, "host_ip": host_ip, "address": address, "prefix": prefix,
               "slot": slot, "pids": pids, "token": token, "baseline": baseline}
        pki.write_private(directory / PLANE_FILE, json.dumps(doc))
        (directory / "starting.json").unlink(missing_ok=True)
    except BaseException as exc:
        stop(directory)
        if isinstance(exc, (KeptPlaneError, realplane.RealPlaneError)) or not isinstance(exc, Exception):
            raise
        raise KeptPlaneError(f"{directory}: the kept control plane did not come up: {exc}") from exc
    return load(directory)


def _settle(api: Api) -> None:
    """Wait until the controller manager has made the default service account of each namespace the server made (what
    a baseline taken too early would miss, and each attach would then delete)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    wanted = ("default", "kube-system", "kube-public", "kube-node-lease")
    while time.monotonic() < deadline:
        missing = [ns for ns in wanted
                   if api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] != 200]
        if not missing:
            return
        time.sleep(0.2)
    raise KeptPlaneError(f"the controller manager made no default service account in {', '.join(missing)} within "
                         f"{SETTLE_TIMEOUT_S:.0f} s")


def stop(directory: Path) -> list[str]:
    """Stop the kept plane's processes, remove its netns and release its slot; returns the problems met (never raises)."""
    directory = Path(directory).resolve()
    problems: list[str] = []
    doc: dict[str, Any] = {}
    for name in (PLANE_FILE, "starting.json"):
        try:
            doc = {**json.loads((directory / name).read_text()), **doc}
        except (OSError, ValueError):
            continue
    realplane.stop(list(doc.get("pids") or []), directory, problems)
    if doc.get("netns"):
        try:
            netns.destroy(netns.Link(doc["netns"], doc["host_ifname"], doc["host_ip"], doc["address"], doc["prefix"]))
        except Exception as exc:  # noqa: BLE001 - keep tearing down
            problems.append(f"netns {doc['netns']}: {exc!r}")
    netns.release_subnet(str(directory))
    for name in (PLANE_FILE, "starting.json", ATTACHED_FILE):
        (directory / name).unlink(missing_ok=True)
    return problems


# --- lending it to a testbed ------------------------------------------------------------------------------------------

def _holder(kept: Kept) -> dict[str, Any] | None:
    try:
        return json.loads((kept.directory / ATTACHED_FILE).read_text())
    except (OSError, ValueError):
        return None


def _holder_alive(holder: dict[str, Any]) -> bool:
    """The testbed that holds the plane is still up: its state.json does not say down, and the process that took the
    plane lives (still attaching, or running the suite) or its kwok, kwokrun or controllers does (`dgxspark-testbed up`
    returned)."""
    testbed = Path(holder.get("testbed", ""))
    try:
        state = json.loads((testbed / "state.json").read_text())
    except (OSError, ValueError):
        return False
    if state.get("down"):
        return False
    return _running(int(holder.get("pid") or 0)) or any(realplane.is_ours(p, testbed) for p in holder.get("pids") or [])


def _running(pid: int) -> bool:
    """The process lives and is not a zombie."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def take(kept: Kept, testbed_dir: Path) -> None:
    """Hold the plane for `testbed_dir`; KeptPlaneError while another live testbed holds it. A holder that died
    (killed run) loses it: its kwok, kwokrun and controllers are stopped here."""
    path = kept.directory / ATTACHED_FILE
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            holder = _holder(kept) or {}
            if holder.get("testbed") == str(testbed_dir):
                return
            if holder and _holder_alive(holder):
                raise KeptPlaneError(f"the kept control plane in {kept.directory} is held by the testbed in "
                                     f"{holder.get('testbed')}; give each concurrent testbed its own plane") from None
            realplane.stop(list(holder.get("pids") or []), Path(holder.get("testbed", "/nonexistent")), [])
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps({"testbed": str(testbed_dir), "pid": os.getpid(), "pids": []}))
        return
    raise KeptPlaneError(f"could not take the kept control plane in {kept.directory}")


def _note_pid(kept: Kept, testbed_dir: Path, pid: int) -> None:
    holder = _holder(kept) or {"testbed": str(testbed_dir), "pid": os.getpid(), "pids": []}
    holder["pids"] = [*holder.get("pids", []), pid]
    tmp = kept.directory / (ATTACHED_FILE + ".tmp")
    tmp.write_text(json.dumps(holder))
    tmp.replace(kept.directory / ATTACHED_FILE)


def wipe(kept: Kept) -> dict[str, int]:
    """Put etcd back to the baseline: every key not in it removed, the RESTORED keys a world changed put back; waits
    until the API server's caches have seen it (a consistent LIST of namespaces shows the baseline's alone)."""
    etcd = kept.etcd()
    now = etcd.keys("/registry/")
    deletes = [key for key in now if key not in kept.baseline]
    puts = {key: kept.baseline[key]["value"] for key, found in now.items()
            if key in kept.baseline and key.startswith(RESTORED) and found["rev"] != kept.baseline[key]["rev"]}
    puts.update({key: base["value"] for key, base in kept.baseline.items() if key.startswith(RESTORED) and key not in now})
    etcd.apply(deletes, puts)
    wanted = sorted(key.removeprefix("/registry/namespaces/") for key in kept.baseline if key.startswith("/registry/namespaces/"))
    api = kept.api()
    try:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            names = sorted(n["metadata"]["name"] for n in api.call("GET", "/api/v1/namespaces").get("items") or [])
            crds = api.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").get("items") or []
            kept_crds = {key.rsplit("/", 1)[-1] for key in kept.baseline
                         if key.startswith("/registry/apiextensions.k8s.io/customresourcedefinitions/")}
            if names == wanted and {c["metadata"]["name"] for c in crds} == kept_crds:
                break
            if time.monotonic() > deadline:
                raise KeptPlaneError(f"the kept control plane in {kept.directory} still serves namespaces {names} and "
                                     f"CRDs {sorted(c['metadata']['name'] for c in crds)} {SETTLE_TIMEOUT_S:.0f} s "
                                     "after its etcd was put back")
            time.sleep(0.05)
    finally:
        api.close()
    return {"deleted": len(deletes), "restored": len(puts)}


def attach(kept: Kept, testbed_dir: Path, scenario: str, world: Any, node_ips: dict[str, str], *,
           on_pid: Any = None) -> realplane.ControlPlane:
    """Take the plane, wipe it, answer the node addresses, write the world and start this testbed's kwok, kwokrun.py
    and controllers.py (their files in testbed_dir, so realplane.is_ours(pid, testbed_dir) names them)."""
    take(kept, testbed_dir)

    def remember(pid: int) -> None:
        _note_pid(kept, testbed_dir, pid)
        if on_pid is not None:
            on_pid(pid)

    _without_controller_manager(kept)
    wipe(kept)
    _start_controller_manager(kept)
    netns.set_local(kept.netns, node_ips.values())
    plane = realplane.ControlPlane(testbed_dir, kept.netns, kept.address, dict(node_ips), [], realplane.API_PORT)
    api = kept.api()
    try:
        realworld.write(api, world, scenario)
        realworld.write_logs(api, world, testbed_dir, crd=False)
        realworld.wait_nodes_settled(api, world)
        config = realworld.kwok_config(world, testbed_dir)
    finally:
        api.close()
    realplane.start_kwok(plane, config, kept.directory / "controlplane", on_pid=remember)
    return plane


def _is_controller_manager(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(Path(arg.decode(errors="replace")).name == realplane.CONTROLLER_MANAGER for arg in argv[:5])


def _record_pids(kept: Kept, pids: list[int]) -> None:
    """plane.json names `pids` as the plane's processes (written whole, then moved in place: load() never reads half)."""
    doc = json.loads((kept.directory / PLANE_FILE).read_text())
    doc["pids"] = kept.pids = list(pids)
    tmp = kept.directory / (PLANE_FILE + ".tmp")
    pki.write_private(tmp, json.dumps(doc))
    tmp.replace(kept.directory / PLANE_FILE)


def _without_controller_manager(kept: Kept) -> None:
    """Stop the plane's kube-controller-manager before the wipe. What it holds in memory is the last world's: its node
    lifecycle controller's health of each Node and its informers' caches. A node of the same name in the next world
    (every scenario's gpu-01) would otherwise be judged on the last one's: measured on a loaded machine, the Ready
    toolkit pod of site-model-alias, attached after node-not-ready, was marked not Ready (MarkPodsNotReady). A real
    cluster's controller manager has only ever seen its own cluster's nodes; the next attach starts a fresh one."""
    old = [pid for pid in kept.pids if _is_controller_manager(pid)]
    _record_pids(kept, [pid for pid in kept.pids if pid not in old])
    problems: list[str] = []
    realplane.stop(old, kept.directory, problems)
    if problems:
        raise KeptPlaneError(f"the kept control plane in {kept.directory}: its controller manager did not stop: "
                             + "; ".join(problems))


def _start_controller_manager(kept: Kept) -> None:
    """A fresh kube-controller-manager for the wiped plane: its informers list the baseline, so the world is new to it.
    It acts (the not-ready taint off the Ready nodes) before realworld.wait_nodes_settled returns."""
    plane = realplane.ControlPlane(kept.directory, kept.netns, kept.address, {}, [], realplane.API_PORT)
    realplane.start_controllers(plane, None, names=(realplane.CONTROLLER_MANAGER,),
                                on_pid=lambda pid: _record_pids(kept, [*kept.pids, pid]))


def detach(plane_dir: Path, testbed_dir: Path, problems: list[str]) -> None:
    """Free the plane `testbed_dir` held (its kwok, kwokrun and controllers are stopped by the testbed's teardown); the node
    addresses go with the next attach or here. Never raises."""
    path = Path(plane_dir) / ATTACHED_FILE
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if holder.get("testbed") != str(testbed_dir):
        return
    try:
        kept_doc = json.loads((Path(plane_dir) / PLANE_FILE).read_text())
        netns.set_local(kept_doc["netns"], ())
    except (OSError, ValueError, KeyError) as exc:
        problems.append(f"kept plane {plane_dir}: {exc!r}")
    path.unlink(missing_ok=True)


def audited_since(kept_dir: Path, offset: int, user: str) -> list[dict[str, Any]]:
    """realplane.audited_requests of the plane's audit log from byte `offset` (where this testbed's attach began)."""
    log = Path(kept_dir) / "audit.log"
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            tail = handle.read()
    except OSError:
        return []
    return realplane.audited_lines(tail.decode(errors="replace").splitlines(), user)
