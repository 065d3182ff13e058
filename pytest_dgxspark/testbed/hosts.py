"""Simulated DGX Spark hosts: a real sshd in private net, mount, pid and uts namespaces over the node's tree."""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed import captures, hardware, hostfiles, netns
from pytest_dgxspark.testbed.scenario import deep_merge as merge

NODEINIT = Path(__file__).resolve().parent / "native" / "nodeinit.py"
START_TIMEOUT_S = 30.0
IDENTITY = "dgxspark-testbed"  # sshd's VersionAddendum: the banner reads `SSH-2.0-OpenSSH_<v> dgxspark-testbed`
STOP_TIMEOUT_S = 10.0
_ACCEPTED = re.compile(r"\bAccepted \S+ for \S+ from ")

# A healthy GB10 DGX Spark running an RKE2 server (gpu-stack-facts §1, §2, §5; rke2-provisioning-facts §1).
DEFAULTS: dict[str, Any] = {
    "hostname": "gpu-01",
    "os": {"name": "Ubuntu", "version_id": "24.04", "pretty_name": "Ubuntu 24.04.3 LTS", "codename": "noble",
           "dgx_release": "7.2.3", "dgx_ota_version": "7.3.1"},
    "kernel": "6.17.0-1014-nvidia",
    "kernel_version": "#14-Ubuntu SMP PREEMPT_DYNAMIC Thu Oct 16 09:56:19 UTC 2025",
    "arch": "aarch64",
    "cpus": 20,                # kubelet capacity cpu / memory of a DGX Spark (20 Arm cores, 128 GB LPDDR5X)
    "memory_kib": 125506464,
    "driver": {"loaded": True, "version": "580.95.05", "flavour": "open", "smi": "ok"},
    "cuda_version": "13.0",
    "gpus": [{"name": "NVIDIA GB10", "uuid": "GPU-5e4c3a8e-8f0b-6d2a-91c7-3b1f0e2d4a67", "bus_id": "0000000F:01:00.0",
              "memory": "not-supported", "compute": "12.1", "arch": 10}],
    "nvml": "present",
    "network": {"interface": "enP7s7", "dhcp": False},
    "rke2_version": "v1.34.10+rke2r1",
    "containerd_version": "2.1.5-k3s1",
    "services": {
        "rke2-server": {"active": "active", "enabled": "enabled", "main": "rke2", "type": "notify", "restart": "always",
                        "description": "Rancher Kubernetes Engine v2 (server)",
                        "path": "/usr/local/lib/systemd/system/rke2-server.service"},
        "rke2-agent": {"active": "inactive", "enabled": "disabled", "main": "rke2", "type": "notify",
                       "description": "Rancher Kubernetes Engine v2 (agent)",
                       "path": "/usr/local/lib/systemd/system/rke2-agent.service"},
        "nvidia-persistenced": {"active": "active", "enabled": "enabled", "description": "NVIDIA Persistence Daemon",
                                "path": "/usr/lib/systemd/system/nvidia-persistenced.service"},
    },
    "processes": [
        "/usr/local/bin/rke2 server",
        "containerd -c /var/lib/rancher/rke2/agent/etc/containerd/config.toml -a /run/k3s/containerd/containerd.sock"
        " --state /run/k3s/containerd --root /var/lib/rancher/rke2/agent/containerd",
        "kubelet --volume-plugin-dir=/var/lib/kubelet/volumeplugins --file-check-frequency=5s --sync-frequency=30s"
        " --config-dir=/var/lib/rancher/rke2/agent/etc/kubelet.conf.d --containerd=/run/k3s/containerd/containerd.sock"
        " --hostname-override={hostname} --kubeconfig=/var/lib/rancher/rke2/agent/kubelet.kubeconfig"
        " --node-ip={node_ip} --read-only-port=0",
    ],
    "toolkit": True,
    "validations": ["driver", "toolkit", "cuda", "plugin"],
    "modules": [],
    "kernel_log": [],
    "containers": [],
    "files": {},
    "containerd_socket": True,
    "nri": True,
    # /etc/rancher/rke2/config.yaml as tirosh-home's provisioning writes it; node_labels/node_taints become
    # node-label/node-taint. The scenario's own data: never read from --site, so a changed site shows drift.
    "rke2_config": {"write-kubeconfig-mode": "0600", "node-name": "{hostname}", "cni": "cilium", "disable-kube-proxy": False},
    "node_labels": ["node.tirosh.ai/role=gpu", "node.tirosh.ai/workload=ai", "node.tirosh.ai/model=dgx-spark",
                    "nvidia.com/gpu.present=true"],
    "node_taints": [],
    "outputs": {},             # verbatim command results: "<command line>" -> text | {capture} | {stdout, stderr, rc}
    "journals": {},            # unit -> its journal (journalctl -u <unit>): text | {capture}
    "faults": {},              # SSH session faults: drop_after, freeze_after (commands), latency_ms
    # DGX OS ships Docker (docker.service, dockerd) over a system containerd (containerd.service, /usr/bin/containerd,
    # /run/containerd/containerd.sock), the nvidia runtime registered by nvidia-ctk; versions as captured on a DGX
    # Spark (captures/dgx-spark-docker-version.txt). RKE2 never uses them.
    "docker": {"installed": True, "running": True, "version": "28.5.1", "containerd_version": "v1.7.28",
               "containerd_commit": "b98a3aace656320842a23f4a392a33f46af97866", "nvidia_runtime": True},
    "unreachable": False,
}


# Keys a host spec may carry beyond DEFAULTS: cpu_vendor (NFD's, from the arch when unset); pods (the orchestrator's
# CRI snapshot).
EXTRA_KEYS = frozenset({"cpu_vendor", "pods"})


# What changes on an RKE2 agent node (rke2 `bundle/lib/systemd/system/rke2-agent.service`: `rke2 agent`).
AGENT_OVERRIDES: dict[str, Any] = {
    "services": {"rke2-server": {"active": "inactive", "enabled": "disabled"},
                 "rke2-agent": {"active": "active", "enabled": "enabled"}},
    "processes": ["/usr/local/bin/rke2 agent"] + DEFAULTS["processes"][1:],
}


@dataclass(frozen=True)
class HostHandle:
    """A running simulated host; `pid` is its PID 1 (killing it ends the whole namespace)."""

    name: str
    address: str
    port: int
    netns: str
    pid: int
    node_dir: Path


def host_spec(spec: dict[str, Any] | None, *, name: str | None = None, role: str = "server") -> dict[str, Any]:
    """`spec` merged over DEFAULTS (hostname defaults to the node name; `role` agent runs `rke2 agent`), checked."""
    if role not in ("server", "agent"):
        raise ValueError(f"node role must be 'server' or 'agent', got {role!r}")
    base = merge(DEFAULTS, AGENT_OVERRIDES) if role == "agent" else DEFAULTS
    merged = merge(merge(base, {"hostname": name} if name else {}), spec or {})
    problems = []
    known = set(DEFAULTS) | EXTRA_KEYS
    for key in sorted(set(spec or {}) - known):
        close = difflib.get_close_matches(key, sorted(known), n=1)
        problems.append(f"{key}: unknown key{f' (did you mean {close[0]!r}?)' if close else ''}; "
                        "the keys are listed in docs/scenarios-hosts.md")
    if merged.get("nvml") not in ("present", "missing"):
        problems.append(f"nvml must be 'present' or 'missing', got {merged.get('nvml')!r}")
    if merged["driver"].get("smi") not in ("ok", "hang", "error"):
        problems.append(f"driver.smi must be ok|hang|error, got {merged['driver'].get('smi')!r}")
    if merged["driver"].get("flavour") not in ("open", "proprietary"):
        problems.append(f"driver.flavour must be open|proprietary, got {merged['driver'].get('flavour')!r}")
    for key in ("hostname", "kernel", "arch"):
        if not isinstance(merged.get(key), str) or not merged[key]:
            problems.append(f"{key} must be a non-empty string, got {merged.get(key)!r}")
    if merged.get("arch") not in hardware.KUBE_ARCH:
        problems.append(f"arch must be one of {sorted(hardware.KUBE_ARCH)} (uname -m), got {merged.get('arch')!r}")
    for key in ("cpus", "memory_kib"):
        if not isinstance(merged.get(key), int) or merged[key] < 1:
            problems.append(f"{key} must be a whole number >= 1, got {merged.get(key)!r}")
    try:
        merged["gpus"] = hardware.normalize_gpus(merged.get("gpus", []), seed=str(merged.get("hostname")))
    except ValueError as exc:
        problems.append(str(exc))
    for key in ("outputs", "journals"):
        if not isinstance(merged.get(key), dict):
            problems.append(f"{key} must be a mapping, got {type(merged.get(key)).__name__}")
            continue
        for item, value in list(merged[key].items()):
            try:
                merged[key][item] = captures.output(value, where=f"{key}.{item}")
            except ValueError as exc:
                problems.append(str(exc))
    problems += _fault_problems(merged.get("faults"))
    if isinstance(merged.get("docker"), dict):
        _add_docker(merged)
    elif merged.get("docker") is not None:
        problems.append(f"docker must be a mapping (installed, running, version, ...) or null, got {merged['docker']!r}")
    if problems:
        raise ValueError("nodes.<name>.host: " + "; ".join(problems))
    return merged


DOCKERD = "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"  # Docker's own docker.service
SYSTEM_CONTAINERD = "/usr/bin/containerd"  # containerd.service (containerd.io): serves /run/containerd/containerd.sock


def _add_docker(spec: dict[str, Any]) -> None:
    """Docker and the system containerd as DGX OS installs them: units, and when running their daemons."""
    docker = spec["docker"]
    if not docker.get("installed", True):
        return
    running = bool(docker.get("running", True))
    state = {"active": "active" if running else "inactive", "enabled": "enabled" if running else "disabled"}
    services = spec.setdefault("services", {})
    services.setdefault("docker", {"description": "Docker Application Container Engine", "main": "dockerd",
                                   "path": "/usr/lib/systemd/system/docker.service", "exec": DOCKERD, **state})
    services.setdefault("containerd", {"description": "containerd container runtime", "main": "containerd",
                                       "path": "/usr/lib/systemd/system/containerd.service", "exec": SYSTEM_CONTAINERD, **state})
    if running:
        listed = [str(p if isinstance(p, str) else " ".join(p)).split()[0] for p in spec["processes"]]
        if not any(os.path.basename(head) == "dockerd" for head in listed):
            spec["processes"] = [*spec["processes"], DOCKERD]
        if SYSTEM_CONTAINERD not in listed:
            spec["processes"] = [*spec["processes"], SYSTEM_CONTAINERD]


FAULT_KEYS = {"drop_after": "commands after which the SSH connection is dropped (sshd killed: later connects refused)",
              "freeze_after": "commands after which the host freezes (commands hang, TCP stays up)",
              "latency_ms": "delay added to every SSH command, in milliseconds"}


def _fault_problems(faults: Any) -> list[str]:
    if not isinstance(faults, dict):
        return [f"faults must be a mapping, got {type(faults).__name__}"]
    problems = [f"faults.{k}: unknown; expected one of {sorted(FAULT_KEYS)}" for k in sorted(set(faults) - set(FAULT_KEYS))]
    for key in sorted(set(faults) & set(FAULT_KEYS)):
        if not isinstance(faults[key], int) or isinstance(faults[key], bool) or faults[key] < 0:
            problems.append(f"faults.{key} must be a whole number >= 0 ({FAULT_KEYS[key]}), got {faults[key]!r}")
    return problems


def _ensure_host_key(host_key_dir: Path) -> Path:
    key = host_key_dir / "ssh_host_ed25519_key"
    if not key.exists():
        host_key_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dgxspark-testbed", "-f", str(key)],
                       check=True, capture_output=True)
    os.chmod(key, 0o600)
    return key


def _sshd_config(node_dir: Path, link: netns.Link, host_key: Path, *, faults: bool = False) -> Path:
    """sshd's config; `VersionAddendum dgxspark-testbed` names the testbed in the banner every client sees. With host
    faults every session runs through the fault wrapper (ForceCommand), which then runs the asked command."""
    config = node_dir / "sshd_config"
    force = f"ForceCommand {hostfiles.SESSION_WRAPPER}\n" if faults else ""
    config.write_text(
        f"ListenAddress {link.node_ip}:22\nHostKey {host_key}\nPidFile {node_dir / 'sshd.pid'}\n"
        f"VersionAddendum {IDENTITY}\n{force}"
        f"AuthorizedKeysFile {node_dir / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nLogLevel VERBOSE\nPrintMotd no\nPrintLastLog no\nUseDNS no\nMaxSessions 64\n"
        "MaxStartups 64:30:128\nAcceptEnv LANG LC_*\nSubsystem sftp internal-sftp\n")
    return config


def _rename_interface(link: netns.Link, interface: str) -> None:
    if interface == netns.NODE_IFNAME:
        return
    for args in (["link", "set", netns.NODE_IFNAME, "down"], ["link", "set", netns.NODE_IFNAME, "name", interface],
                 ["link", "set", interface, "up"], ["route", "replace", "default", "via", link.host_ip]):
        proc = subprocess.run(["ip", "-n", link.netns, *args], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"naming the node interface {interface!r} in netns {link.netns} failed at "
                               f"`ip {' '.join(args)}`: {proc.stderr.strip()}")


def _ns_inode(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _child_of(pid: int) -> int | None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(none)"


def _wait_ssh(address: str, deadline: float) -> str | None:
    """Wait until sshd sends its banner on address:22; returns why not, or None."""
    last = "no attempt"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, 22), timeout=1.0) as sock:
                if sock.recv(64).startswith(b"SSH-2.0-"):
                    return None
                last = "no SSH banner"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.02)
    return last


def start_host(name: str, spec: dict[str, Any], *, node_dir: Path, link: netns.Link, authorized_key: str,
               host_key_dir: Path, scenario_dir: Path | None = None, cache_dir: Path | None = None,
               role: str = "server", timeout: float = START_TIMEOUT_S, scenario: str = "") -> HostHandle:
    """Start one simulated host in `link.netns`; returns once sshd answers (or, when unreachable, once set up)."""
    spec = host_spec(spec, name=name, role=role)
    node_dir = Path(node_dir).resolve()
    node_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("ready", "init-error.txt"):
        (node_dir / stale).unlink(missing_ok=True)
    rendered = hostfiles.render(name, spec, node_dir / "root", node_ip=link.node_ip, prefix=link.prefix,
                                gateway=link.host_ip, scenario_dir=scenario_dir, cache_dir=cache_dir, scenario=scenario)
    (node_dir / "authorized_keys").write_text(authorized_key.strip() + "\n")
    config = _sshd_config(node_dir, link, _ensure_host_key(Path(host_key_dir)), faults=bool(spec["faults"]))
    (node_dir / "sshd.log").touch()
    _rename_interface(link, spec["network"]["interface"])
    plan = {
        "tree": str(rendered.root), "rw": str(node_dir / "rw"), "hostname": spec["hostname"],
        "overlays": list(rendered.overlays), "proc_driver": rendered.proc_driver,
        "modules_file": str(rendered.modules_file), "devices": [d.__dict__ for d in rendered.devices],
        "serve_sockets": list(rendered.serve_sockets),
        "processes": [{"exe": p.exe, "argv": list(p.argv), "listen": list(p.listen)} for p in rendered.processes],
        "sshd": None if spec["unreachable"] else ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
        "sshd_log": str(node_dir / "sshd.log"), "ready": str(node_dir / "ready"), "error": str(node_dir / "init-error.txt"),
    }
    (node_dir / "plan.json").write_text(json.dumps(plan, indent=1))
    with open(node_dir / "init.log", "ab") as log:
        proc = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{link.netns}", "unshare", "--mount", "--pid", "--uts", "--fork",
             "--mount-proc", "--propagation", "private", "--kill-child",
             sys.executable, "-I", str(NODEINIT), str(node_dir / "plan.json")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True)
    _CHILDREN[proc.pid] = proc
    deadline = time.monotonic() + timeout
    init_pid = None
    while time.monotonic() < deadline and not (node_dir / "ready").exists():
        init_pid = init_pid or _child_of(proc.pid)
        if proc.poll() is not None or (node_dir / "init-error.txt").exists():
            break
        time.sleep(0.01)
    init_pid = init_pid or _child_of(proc.pid)
    handle = HostHandle(name, link.node_ip, 22, link.netns, init_pid or proc.pid, node_dir)
    (node_dir / "host.json").write_text(json.dumps({
        "launcher_pid": proc.pid, "init_pid": init_pid, "pidns": _ns_inode(init_pid, "pid") if init_pid else None,
        "netns": link.netns}))
    why = None
    if not (node_dir / "ready").exists():
        why = f"its PID 1 did not finish setting up:\n{_tail(node_dir / 'init-error.txt')}\ninit.log:\n{_tail(node_dir / 'init.log')}"
    elif not spec["unreachable"]:
        failure = _wait_ssh(link.node_ip, deadline)
        if failure:
            why = f"sshd never answered on {link.node_ip}:22 ({failure}); sshd.log:\n{_tail(node_dir / 'sshd.log')}"
    if why:
        stop_host(handle)
        raise RuntimeError(f"simulated host {name!r} must start within {timeout:.0f}s, but {why}")
    return handle


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _pids_in_pidns(inode: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ns_inode(int(entry), "pid") == inode and int(entry) != os.getpid():
            pids.append(int(entry))
    return pids


def stop_host(handle: HostHandle) -> None:
    """Kill the host's whole pid namespace (its mounts go with it); idempotent."""
    try:
        info = json.loads((Path(handle.node_dir) / "host.json").read_text())
    except (OSError, ValueError):
        info = {"init_pid": handle.pid, "pidns": None, "launcher_pid": None}
    init_pid, inode = info.get("init_pid") or handle.pid, info.get("pidns")
    if inode is not None and _ns_inode(init_pid, "pid") == inode:
        _kill(init_pid)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while inode is not None and time.monotonic() < deadline:
        left = _pids_in_pidns(inode)
        if not left:
            break
        for pid in left:
            _kill(pid)
        time.sleep(0.02)
    launcher = info.get("launcher_pid")
    if launcher in _CHILDREN:
        proc = _CHILDREN.pop(launcher)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)
    if inode is not None and _pids_in_pidns(inode):
        raise RuntimeError(f"host {handle.name!r}: processes of its pid namespace survived SIGKILL: {_pids_in_pidns(inode)}")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def ssh_connection_count(node_dir: Path) -> int:
    """Accepted (authenticated) SSH connections so far, counted from the node's sshd.log."""
    try:
        text = (Path(node_dir) / "sshd.log").read_text(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if _ACCEPTED.search(line))
