"""The real control plane under a testbed: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
built from the Kubernetes projects' own code (controlplane/build.sh), running in a network namespace of their own,
with kwokrun.py beside kwok (what the containers of its nodes print and how they exit)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pytest_dgxspark.testbed import pki, tokens

TOOLS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
API_PORT = 6443  # what the suite dials: the API server, or the fault proxy in front of it
DIRECT_PORT = 6444  # the API server's own port when the fault proxy holds API_PORT
KUBELET_PORT = 10250  # what the scenario's Nodes name as daemonEndpoints.kubeletEndpoint; kwok serves logs there
SERVICE_CIDR = "10.43.0.0/16"  # RKE2's default service range
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 1.0  # stop(): SIGTERM, then SIGKILL what is left after this
CONTROLLERS_READY_S = 30.0  # controllers.py: its start (an interpreter) and one list of each kind it watches
# the controllers a kubelet-less cluster needs: namespaces go away, service accounts and their tokens exist, and the
# node lifecycle controller takes off the not-ready taint the NodeTaint admission puts on every new Node once it is Ready
# (no taint-eviction controller: nothing is evicted)
CONTROLLERS = "namespace,serviceaccount,serviceaccount-token,nodelifecycle"


class RealPlaneError(RuntimeError):
    """The real control plane cannot be used or did not come up; the message says which part and why."""


def bin_dir() -> Path:
    """Where controlplane/build.sh puts the binaries (DGXSPARK_CONTROLPLANE_BIN, else <repo>/.cache/controlplane/bin)."""
    given = os.environ.get("DGXSPARK_CONTROLPLANE_BIN")
    return Path(given) if given else Path(__file__).resolve().parents[2] / ".cache" / "controlplane" / "bin"


def binaries() -> dict[str, Path]:
    """Each tool's binary; RealPlaneError naming the missing ones and how to build them."""
    base = bin_dir()
    found = {tool: base / tool for tool in TOOLS}
    missing = [tool for tool, path in found.items() if not os.access(path, os.X_OK)]
    if missing:
        raise RealPlaneError(f"the real control plane is not built: {', '.join(missing)} missing in {base}; "
                             "run `make controlplane` (needs Go >= 1.24 and the Go module proxy)")
    return found


def built_versions() -> dict[str, str]:
    """versions.json written by build.sh ({} when absent)."""
    try:
        return json.loads((bin_dir() / "versions.json").read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class ControlPlane:
    """One real control plane in netns `netns`, listening on `address`:6443; its files live in `directory`."""

    directory: Path
    netns: str
    address: str
    node_ips: dict[str, str]
    pids: list[int]
    port: int = API_PORT  # the API server's own port (DIRECT_PORT behind the fault proxy)

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"


def _service_account_key() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _kubeconfig(path: Path, url: str, ca: pki.Pair, client: pki.Pair, user: str) -> Path:
    pki.write_kubeconfig(path, [pki.kubeconfig_entry(user, url, ca, client)], user)
    return path


AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "None", "users": ["system:apiserver"]},
                          {"level": "None", "nonResourceURLs": ["/readyz*", "/healthz*", "/livez*"]},
                          {"level": "Metadata"}]}


def write_files(directory: Path, ca: pki.Pair, address: str, server_name: str, tokens: dict[str, tuple[str, str]],
                port: int = API_PORT) -> Path:
    """The control plane's PKI, kubeconfigs, token file and audit policy under directory/controlplane; returns it.
    `tokens`: token -> (user, group) for the static token users."""
    cp = directory / "controlplane"
    cp.mkdir(mode=0o700, parents=True, exist_ok=True)
    serving = pki.server_cert(ca, [address, "127.0.0.1", "10.43.0.1"],
                              ["kubernetes", "kubernetes.default", "kubernetes.default.svc",
                               "kubernetes.default.svc.cluster.local", "localhost", server_name])
    for name, pair in (("apiserver", serving), ("kubelet-client", pki.client_cert(ca, "kube-apiserver-kubelet-client",
                                                                                   "kubeadm:cluster-admins"))):
        pki.write_private(cp / f"{name}.crt", pair.cert)
        pki.write_private(cp / f"{name}.key", pair.key)
    pki.write_private(cp / "ca.crt", ca.cert)
    front = pki.make_ca("front-proxy-ca")  # the fault proxy's identity, as the aggregation layer's (requestheader)
    proxy_client = pki.client_cert(front, "front-proxy-client", "")
    pki.write_private(cp / "front-proxy-ca.crt", front.cert)
    pki.write_private(cp / "front-proxy-client.crt", proxy_client.cert)
    pki.write_private(cp / "front-proxy-client.key", proxy_client.key)
    pki.write_private(cp / "service-account.key", _service_account_key())
    kubelet_serving = pki.server_cert(ca, ["127.0.0.1"], ["localhost"])  # kwok's: the API server does not verify it
    pki.write_private(cp / "kwok-serving.crt", kubelet_serving.cert)
    pki.write_private(cp / "kwok-serving.key", kubelet_serving.key)
    local = f"https://127.0.0.1:{port}"
    for user, group, name in (("system:kube-scheduler", "", "scheduler"),
                              ("system:kube-controller-manager", "", "controller-manager"),
                              ("kwok", "system:masters", "kwok"), ("system:admin", "system:masters", "admin"),
                              ("testbed:controllers", "system:masters", "controllers")):
        _kubeconfig(cp / f"{name}.kubeconfig", local, ca, pki.client_cert(ca, user, group), user)
    lines = [f'{token},{user},{user},"{group}"' for token, (user, group) in tokens.items()]
    pki.write_private(cp / "tokens.csv", "\n".join(lines) + "\n")
    (cp / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    return cp


def _python_env() -> dict[str, str]:
    """The environment of a testbed process run with this interpreter: the package importable from the checkout."""
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}


def _spawn(directory: Path, netns: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    log = open(directory / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(["ip", "netns", "exec", netns, *argv], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=_python_env())
    finally:
        log.close()


def start(directory: Path, netns: str, address: str, node_ips: dict[str, str], *, port: int = API_PORT,
          on_pid: Any = None, etcd_urls: tuple[str, ...] = ()) -> ControlPlane:
    """etcd, then kube-apiserver; waits on /readyz. `on_pid(pid)` records each process as soon as it exists;
    `etcd_urls`: more client URLs etcd listens on (a kept plane's, for its wipe: keptplane.py)."""
    bins = binaries()
    cp = directory / "controlplane"
    shutil.rmtree(cp / "etcd", ignore_errors=True)  # a plane starts empty: a directory used before keeps its old data
    plane = ControlPlane(directory, netns, address, dict(node_ips), [], port)

    def spawn(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        proc = _spawn(directory, netns, name, argv)
        plane.pids.append(proc.pid)
        if on_pid is not None:
            on_pid(proc.pid)
        return proc

    etcd = spawn("etcd", [str(bins["etcd"]), "--name", "testbed", "--data-dir", str(cp / "etcd"),
                          "--listen-client-urls", ",".join(("http://127.0.0.1:2379", *etcd_urls)), "--advertise-client-urls", "http://127.0.0.1:2379",
                          "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                          "--initial-cluster", "testbed=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level", "warn"])
    api = spawn("kube-apiserver", [
        str(bins["kube-apiserver"]), "--etcd-servers", "http://127.0.0.1:2379", "--bind-address", "0.0.0.0",
        "--secure-port", str(port), "--advertise-address", address,
        "--tls-cert-file", str(cp / "apiserver.crt"), "--tls-private-key-file", str(cp / "apiserver.key"),
        "--client-ca-file", str(cp / "ca.crt"), "--token-auth-file", str(cp / "tokens.csv"), "--anonymous-auth=false",
        "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--api-audiences", ",".join(tokens.AUDIENCES),  # RKE2's kube-apiserver arguments
        "--service-account-key-file", str(cp / "service-account.key"),
        "--service-account-signing-key-file", str(cp / "service-account.key"),
        "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true", "--profiling=false",
        "--kubelet-client-certificate", str(cp / "kubelet-client.crt"), "--kubelet-client-key", str(cp / "kubelet-client.key"),
        "--kubelet-preferred-address-types", "InternalIP",
        "--audit-policy-file", str(cp / "audit-policy.yaml"), "--audit-log-path", str(directory / "audit.log"),
        "--audit-log-format", "json", "--audit-log-mode", "blocking",
        "--requestheader-client-ca-file", str(cp / "front-proxy-ca.crt"), "--requestheader-allowed-names", "front-proxy-client",
        "--requestheader-username-headers", "X-Remote-User", "--requestheader-group-headers", "X-Remote-Group",
        "--requestheader-extra-headers-prefix", "X-Remote-Extra-", "--v", "1"])
    wait_ready(directory, address, port, [("etcd", etcd), ("kube-apiserver", api)])
    return plane


CONTROLLER_MANAGER, SCHEDULER = "kube-controller-manager", "kube-scheduler"


def start_controllers(plane: ControlPlane, kwok_config: Path | None, *, on_pid: Any = None,
                      names: tuple[str, ...] = (CONTROLLER_MANAGER, SCHEDULER)) -> None:
    """kube-controller-manager, kube-scheduler (`names`: which of them) and, with `kwok_config`, kwok (after the world
    is written: kwok then finds every scenario pod already in its state, and its stages move only the pods created
    later)."""
    bins = binaries()
    cp = plane.directory / "controlplane"
    argvs = {
        CONTROLLER_MANAGER: [str(bins[CONTROLLER_MANAGER]), "--kubeconfig", str(cp / "controller-manager.kubeconfig"),
                             "--controllers", CONTROLLERS, "--leader-elect=false", "--secure-port", "0",
                             "--service-account-private-key-file", str(cp / "service-account.key"),
                             "--root-ca-file", str(cp / "ca.crt"), "--use-service-account-credentials=true", "--v", "1"],
        SCHEDULER: [str(bins[SCHEDULER]), "--kubeconfig", str(cp / "scheduler.kubeconfig"),
                    "--leader-elect=false", "--secure-port", "0", "--v", "1"],
    }
    for name in names:
        proc = _spawn(plane.directory, plane.netns, name, argvs[name])
        plane.pids.append(proc.pid)
        if on_pid is not None:
            on_pid(proc.pid)
    if kwok_config is not None:
        start_kwok(plane, kwok_config, cp, on_pid=on_pid)


def start_kwok(plane: ControlPlane, kwok_config: Path, cp: Path, *, on_pid: Any = None) -> None:
    """kwok, kwokrun.py (what the containers kwok "runs" print and how they exit, as the stand-in's kubelet decides
    it) and controllers.py (the GPU Operator's and helm-controller's status writes) for the world in plane.directory;
    returns once controllers.py has listed and reconciled the world. `cp`: the plane's controlplane/ folder
    (kubeconfigs, kwok's serving pair), which is plane.directory/controlplane but for a kept plane's (keptplane.py)."""
    bins = binaries()
    ready = plane.directory / "controllers.ready"
    ready.unlink(missing_ok=True)
    argvs = {
        "kwok": [str(bins["kwok"]), "--kubeconfig", str(cp / "kwok.kubeconfig"), "--config", str(kwok_config),
                 "--manage-all-nodes=true", "--server-address", f"0.0.0.0:{KUBELET_PORT}",
                 "--tls-cert-file", str(cp / "kwok-serving.crt"), "--tls-private-key-file", str(cp / "kwok-serving.key"),
                 "--node-lease-duration-seconds", "40", "--cidr", "10.42.0.0/16", "--enable-crds", "Logs"],
        "kwokrun": [sys.executable, "-m", "pytest_dgxspark.testbed.kwokrun", "--kubeconfig", str(cp / "admin.kubeconfig"),
                    "--world", str(plane.directory / "workload-world.json"),
                    "--logs", str(plane.directory / "controlplane" / "logs")],
        "controllers": [sys.executable, "-m", "pytest_dgxspark.testbed.controllers",
                        "--kubeconfig", str(cp / "controllers.kubeconfig"), "--ready", str(ready)],
    }
    procs = []
    for name, argv in argvs.items():
        proc = _spawn(plane.directory, plane.netns, name, argv)
        procs.append((name, proc))
        plane.pids.append(proc.pid)
        if on_pid is not None:
            on_pid(proc.pid)
    _wait_file(ready, plane.directory, procs[-1:], CONTROLLERS_READY_S)


def _raise_if_exited(directory: Path, procs: list[tuple[str, subprocess.Popen[bytes]]], before: str) -> None:
    """RealPlaneError naming the first of `procs` that has exited (before `before`), with its log's tail."""
    for name, proc in procs:
        if proc.poll() is not None:
            log = directory / f"{name}.log"
            tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
            raise RealPlaneError(f"{name} exited with {proc.returncode} before {before}; {log}:\n{tail}")


def _wait_file(path: Path, directory: Path, procs: list[tuple[str, subprocess.Popen[bytes]]], timeout_s: float) -> None:
    """Until `path` exists; RealPlaneError with the log tail when one of `procs` exits first or it takes timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        _raise_if_exited(directory, procs, f"writing {path.name}")
        if time.monotonic() > deadline:
            raise RealPlaneError(f"{procs[0][0]} did not write {path} within {timeout_s:.0f} s; see {directory / (procs[0][0] + '.log')}")
        time.sleep(0.05)


def wait_ready(directory: Path, address: str, port: int, procs: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    """Poll /readyz (as system:admin) until it answers 200; RealPlaneError with the log tail when a process exits."""
    from pytest_dgxspark.testbed.realapi import Api

    api = Api.from_kubeconfig(directory / "controlplane" / "admin.kubeconfig", server=f"https://{address}:{port}")
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        _raise_if_exited(directory, procs, "the API server was ready")
        try:
            status, body = api.request("GET", "/readyz", raw=True)
            if status == 200:
                return
            last = f"HTTP {status}: {body[-300:]!r}"
        except OSError as exc:
            last = repr(exc)
        time.sleep(0.3)
    raise RealPlaneError(f"kube-apiserver on {address}:{port} was not ready within {READY_TIMEOUT_S:.0f} s ({last}); "
                         f"see {directory / 'kube-apiserver.log'}")


def is_ours(pid: int, directory: Path) -> bool:
    """The pid is one of this testbed's control-plane processes (its command line names the testbed directory)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return str(directory).encode() in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop(pids: list[int], directory: Path, problems: list[str]) -> None:
    """SIGTERM each process group, SIGKILL what is left after STOP_GRACE_S (controllers first: they were started last).
    kube-apiserver does not end within 10 s of a SIGTERM (its graceful shutdown), nor etcd while it waits on it
    (measured): nothing of theirs is needed after a testbed (the audit log is written before each answer)."""
    live = [p for p in reversed(pids) if is_ours(p, directory)]
    for pid in live:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        except PermissionError as exc:
            problems.append(f"pid {pid}: {exc}")
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(is_ours(p, directory) for p in live):
        for pid in live:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.05)
    for pid in live:
        if is_ours(pid, directory):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def bring_up(directory: Path, netns: str, address: str, server_name: str, scenario: str, world: Any, ca: pki.Pair,
             tokens: dict[str, tuple[str, str]], faults: dict[str, Any] | None = None,
             on_pid: Any = None, nodes: bool = True) -> ControlPlane:
    """The whole real plane for one cluster: files, etcd and kube-apiserver (ready), the world written through the
    API, then the controller manager, the scheduler and kwok; returns once the controller manager acts. With
    `faults` (the scenario's cluster.faults) the fault proxy holds API_PORT and the server listens on DIRECT_PORT.
    `nodes=False` (the Argo CD management cluster, whose nodes no check reads): etcd, kube-apiserver and the world
    alone."""
    from pytest_dgxspark.testbed import realworld
    from pytest_dgxspark.testbed.realapi import Api

    node_ips = dict(world.settings.get("node_ips") or {})
    port = DIRECT_PORT if faults else API_PORT
    write_files(directory, ca, address, server_name, tokens, port)
    plane = start(directory, netns, address, node_ips, port=port, on_pid=on_pid)
    api = Api.from_kubeconfig(directory / "controlplane" / "admin.kubeconfig", server=plane.url)
    try:
        realworld.write(api, world, scenario)
        if nodes:
            realworld.write_logs(api, world, directory)
            config = realworld.kwok_config(world, directory)
            start_controllers(plane, config, on_pid=on_pid)
            realworld.wait_controller_manager(api)
            realworld.wait_nodes_settled(api, world)
    finally:
        api.close()
    if faults:
        start_fault_proxy(plane, faults, on_pid=on_pid)
    return plane


def start_fault_proxy(plane: ControlPlane, faults: dict[str, Any], *, on_pid: Any = None) -> None:
    """faultproxy.py on address:API_PORT in front of the server's DIRECT_PORT; returns once it accepts connections."""
    import socket

    cp = plane.directory / "controlplane"
    (cp / "faults.json").write_text(json.dumps(faults))
    argv = [sys.executable, "-m", "pytest_dgxspark.testbed.faultproxy", "--listen", f"{plane.address}:{API_PORT}",
            "--upstream", f"127.0.0.1:{plane.port}", "--dir", str(cp), "--faults", str(cp / "faults.json")]
    log = open(plane.directory / "faultproxy.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(["ip", "netns", "exec", plane.netns, *argv], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=_python_env())
    finally:
        log.close()
    plane.pids.append(proc.pid)
    if on_pid is not None:
        on_pid(proc.pid)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RealPlaneError(f"the fault proxy exited with {proc.returncode}; see {plane.directory / 'faultproxy.log'}")
        try:
            with socket.create_connection((plane.address, API_PORT), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RealPlaneError(f"the fault proxy did not listen on {plane.address}:{API_PORT} within 15 s")


AUDIT_METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
                 "delete": "DELETE", "deletecollection": "DELETE"}


def audited_requests(audit_log: Path, user: str) -> list[dict[str, Any]]:
    """The requests `user` made, from the audit log (ResponseComplete events), shaped like requests.jsonl's lines."""
    try:
        lines = audit_log.read_text().splitlines()
    except OSError:
        return []
    return audited_lines(lines, user)


def audited_lines(lines: list[str], user: str) -> list[dict[str, Any]]:
    """audited_requests of audit log lines."""
    from urllib.parse import parse_qs, urlsplit

    out: list[dict[str, Any]] = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("stage") != "ResponseComplete" or (event.get("user") or {}).get("username") != user:
            continue
        url = urlsplit(event.get("requestURI", ""))
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        out.append({"cluster": "workload", "method": AUDIT_METHODS.get(event.get("verb", ""), event.get("verb", "").upper()),
                    "path": url.path, "query": query, "status": (event.get("responseStatus") or {}).get("code"),
                    "user_agent": event.get("userAgent", "")})
    return out
