"""PID 1 of a simulated node: lays the node's tree over the root, starts its processes and sshd, reaps.

Runs inside fresh mount, pid and uts namespaces (and the node's network namespace) as
`python3 nodeinit.py <plan.json>`; stdlib only. Everything it mounts lives in the private mount
namespace and disappears with the namespace. On success it writes plan["ready"]; on failure
plan["error"] with the traceback, then exits (which ends the namespace).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import traceback

SHIM_SOURCES = "/usr/lib/dgxspark-testbed/shims-py"
SHIM_SOCKET = "/run/dgxspark-testbed/shims.sock"
SHIM_SERVER = "/usr/lib/dgxspark-testbed/shim-server"  # native/shimserver.py under the shims' #! line


def sh(*args: str) -> None:
    proc = subprocess.run(list(args), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args)}` must succeed inside the node, exited {proc.returncode}: {proc.stderr.strip()}")


def overlay(tree: str, rw: str, top: str) -> None:
    upper, work = f"{rw}/{top}/upper", f"{rw}/{top}/work"
    os.makedirs(upper)
    os.makedirs(work)
    sh("mount", "-t", "overlay", "overlay", "-o", f"lowerdir={tree}/{top}:/{top},upperdir={upper},workdir={work}", f"/{top}")


def make_dev(rw: str, devices: list[dict]) -> None:
    dev = f"{rw}/dev"
    os.makedirs(dev)
    sh("mount", "-t", "tmpfs", "-o", "mode=0755,nosuid", "dev", dev)
    for name, major, minor, mode in (("null", 1, 3, 0o666), ("zero", 1, 5, 0o666), ("full", 1, 7, 0o666),
                                     ("random", 1, 8, 0o666), ("urandom", 1, 9, 0o666), ("tty", 5, 0, 0o666)):
        os.mknod(f"{dev}/{name}", mode | 0o020000, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", mode)
    for item in devices:
        os.mknod(f"{dev}/{os.path.basename(item['path'])}", 0o666 | 0o020000, os.makedev(item["major"], item["minor"]))
        os.chmod(f"{dev}/{os.path.basename(item['path'])}", 0o666)
    for sub in ("pts", "shm"):
        os.makedirs(f"{dev}/{sub}")
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{dev}/{link}")
    sh("mount", "--move", dev, "/dev")
    sh("mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666,mode=0620", "devpts", "/dev/pts")
    sh("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "shm", "/dev/shm")


def serve(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(64)

    def loop() -> None:
        while True:
            conn, _ = sock.accept()
            conn.close()

    threading.Thread(target=loop, daemon=True).start()


def start_shim_server(env: dict) -> None:
    """The fake tools' server (shimserver.py), listening before any session can call a tool; not one of the node's
    processes (pids): the tools work without it, a little slower."""
    os.makedirs(os.path.dirname(SHIM_SOCKET), exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.bind(SHIM_SOCKET)
    sock.listen(128)
    log = open("/run/dgxspark-testbed/shim-server.log", "ab")
    subprocess.Popen([SHIM_SERVER, str(sock.fileno())], env=env, cwd="/", pass_fds=[sock.fileno()],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    sock.close()
    log.close()


def setup(plan: dict) -> list[int]:
    tree, rw = plan["tree"], plan["rw"]
    os.makedirs(rw, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", "mode=0700", "noderw", rw)
    socket.sethostname(plan["hostname"])
    for top in plan["overlays"]:
        overlay(tree, rw, top)
    for top, mode in (("run", "0755"), ("root", "0700")):  # fresh, nothing of the machine's
        sh("mount", "-t", "tmpfs", "-o", f"mode={mode},nosuid,nodev", top, f"/{top}")
        shutil.copytree(f"{tree}/{top}", f"/{top}", symlinks=True, dirs_exist_ok=True)
    os.makedirs("/run/lock", mode=0o1777, exist_ok=True)
    os.mkfifo("/run/dgxspark-testbed-latency.fifo", 0o600)  # the SSH session wrapper's wait (hostfiles.SESSION_SCRIPT)
    if os.path.isdir("/proc/driver"):  # the host's /proc/driver (nvidia included) is never the node's
        sh("mount", "-t", "tmpfs", "-o", "mode=0555", "driver", "/proc/driver")
    if plan["proc_driver"]:
        shutil.copytree(f"{tree}/proc/driver", "/proc/driver", dirs_exist_ok=True)
    if os.path.exists("/proc/modules"):
        sh("mount", "--bind", plan["modules_file"], "/proc/modules")
    make_dev(rw, plan["devices"])
    sh("/usr/sbin/ldconfig")  # the real one: the node's ld.so.cache, with libnvidia-ml.so.1 when present
    cache = subprocess.run(["/usr/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    with open("/usr/lib/dgxspark-testbed/ldconfig-p.txt", "w") as handle:
        handle.write(cache)
    sh("mount", "--bind", "/usr/lib/dgxspark-testbed/shims/ldconfig", "/usr/sbin/ldconfig")
    for path in plan["serve_sockets"]:
        serve(path)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    pids = []
    if os.path.exists(SHIM_SERVER):
        start_shim_server(env)
    for proc in plan["processes"]:
        child_env = dict(env, DGXSPARK_LISTEN=":".join(proc["listen"])) if proc["listen"] else env
        child = subprocess.Popen(proc["argv"], executable=proc["exe"], env=child_env, cwd="/",
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pids.append(child.pid)
    if plan["sshd"]:
        log = open(plan["sshd_log"], "ab")
        child = subprocess.Popen(plan["sshd"], env=env, cwd="/", stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        pids.append(child.pid)
    return pids


def main() -> int:
    with open(sys.argv[1]) as handle:
        plan = json.load(handle)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # so pause() wakes for orphans when PID 1 has no child left
    try:
        pids = setup(plan)
    except BaseException:
        with open(plan["error"], "w") as handle:
            handle.write(traceback.format_exc())
        return 1
    with open(plan["ready"] + ".tmp", "w") as handle:
        json.dump({"pids": pids}, handle)
    os.rename(plan["ready"] + ".tmp", plan["ready"])
    while True:  # PID 1 reaps every orphan of the namespace
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main())
