"""Simulated DGX Spark hosts: a real sshd in private net, mount, pid and uts namespaces over the node's tree."""

from __future__ import annotations

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

from pytest_dgxspark.testbed import hostfiles, netns
from pytest_dgxspark.testbed.hostspec import AGENT_OVERRIDES, DEFAULTS, host_spec  # noqa: F401 - re-exported
from pytest_dgxspark.testbed.leftovers import start_time

NODEINIT = Path(__file__).resolve().parent / "native" / "nodeinit.py"
START_TIMEOUT_S = 30.0
IDENTITY = "dgxspark-testbed"  # sshd's VersionAddendum: the banner reads `SSH-2.0-OpenSSH_<v> dgxspark-testbed`
STOP_TIMEOUT_S = 10.0
_ACCEPTED = re.compile(r"\bAccepted \S+ for \S+ from ")


@dataclass(frozen=True)
class HostHandle:
    """A running simulated host; `pid` is its PID 1 (killing it ends the whole namespace)."""

    name: str
    address: str
    port: int
    netns: str
    pid: int
    node_dir: Path


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
    try:
        while time.monotonic() < deadline and not (node_dir / "ready").exists():
            init_pid = init_pid or _child_of(proc.pid)
            if proc.poll() is not None or (node_dir / "init-error.txt").exists():
                break
            time.sleep(0.01)
    except BaseException:  # a signal while it starts: nothing records this host yet, so it is stopped here
        handle = _recorded(name, node_dir, link, proc.pid, init_pid or _child_of(proc.pid))
        stop_host(handle)
        raise
    handle = _recorded(name, node_dir, link, proc.pid, init_pid or _child_of(proc.pid))
    why = None
    if not (node_dir / "ready").exists():
        why = f"its PID 1 did not finish setting up:\n{_tail(node_dir / 'init-error.txt')}\ninit.log:\n{_tail(node_dir / 'init.log')}"
    elif not spec["unreachable"]:
        try:
            failure = _wait_ssh(link.node_ip, deadline)
        except BaseException:  # a signal while sshd comes up: the caller has not recorded this host yet
            stop_host(handle)
            raise
        if failure:
            why = f"sshd never answered on {link.node_ip}:22 ({failure}); sshd.log:\n{_tail(node_dir / 'sshd.log')}"
    if why:
        stop_host(handle)
        raise RuntimeError(f"simulated host {name!r} must start within {timeout:.0f}s, but {why}")
    return handle


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _recorded(name: str, node_dir: Path, link: netns.Link, launcher: int, init_pid: int | None) -> HostHandle:
    """The host's handle, with host.json (what stop_host reads) written."""
    (node_dir / "host.json").write_text(json.dumps({
        "launcher_pid": launcher, "init_pid": init_pid, "pidns": _ns_inode(init_pid, "pid") if init_pid else None,
        "init_start": start_time(init_pid) if init_pid else None, "netns": link.netns}))
    return HostHandle(name, link.node_ip, 22, link.netns, init_pid or launcher, node_dir)


def _pids_in_pidns(inode: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ns_inode(int(entry), "pid") == inode and int(entry) != os.getpid():
            pids.append(int(entry))
    return pids


def _hold_pidns(info: dict[str, Any], fallback_pid: int) -> int | None:
    """An open descriptor on the host's pid namespace while its PID 1 is the process host.json names, else None.

    A namespace's inode number names it only while it exists: the kernel gives a freed one to the next namespace made
    (two `unshare --pid` in a row get the same number), so a sweep by a stale number killed another host's PID 1 as
    it started (its unshare printed 'sigprocmask unblock failed: Invalid argument', how unshare --kill-child words a
    child SIGKILLed). Holding the descriptor keeps the namespace, and its number, ours until the sweep is done.
    """
    init_pid, inode = info.get("init_pid") or fallback_pid, info.get("pidns")
    if inode is None or (info.get("init_start") is not None and start_time(init_pid) != info["init_start"]):
        return None
    try:
        fd = os.open(f"/proc/{init_pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # PID 1 is gone: the kernel killed the rest of its namespace with it
    if os.fstat(fd).st_ino != inode:
        os.close(fd)
        return None
    return fd


def stop_host(handle: HostHandle) -> None:
    """Kill the host's whole pid namespace (its mounts go with it); idempotent, and never touches another host's."""
    try:
        info = json.loads((Path(handle.node_dir) / "host.json").read_text())
    except (OSError, ValueError):
        info = {"init_pid": handle.pid, "pidns": None, "launcher_pid": None}
    init_pid, inode = info.get("init_pid") or handle.pid, info.get("pidns")
    held = _hold_pidns(info, handle.pid)
    survivors: list[int] = []
    try:
        if held is not None:
            _kill(init_pid)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while time.monotonic() < deadline:
                left = _pids_in_pidns(inode)
                if not left:
                    break
                for pid in left:
                    _kill(pid)
                time.sleep(0.02)
            survivors = _pids_in_pidns(inode)
        launcher = info.get("launcher_pid")
        if launcher in _CHILDREN:
            proc = _CHILDREN.pop(launcher)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
    finally:
        if held is not None:
            os.close(held)
    if survivors:
        raise RuntimeError(f"host {handle.name!r}: processes of its pid namespace survived SIGKILL: {survivors}")


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
