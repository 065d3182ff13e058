"""Renders a simulated node's file tree (laid over its root) and its launch plan from `nodes.<name>.host`."""

from __future__ import annotations

import json
import marshal
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed import captures, native, nodefiles, pki
from pytest_dgxspark.testbed.nodefiles import RKE2_SOCKET, proc_version, rke2_config_yaml, short_bus_id  # noqa: F401

SHIMS_DIR = Path(__file__).resolve().parent / "shims"
# Top-level directories a node's tree may replace (overlayfs over the real root); /run is a fresh tmpfs.
OVERLAID = ("etc", "usr", "var", "opt")
# The machine's own /usr/local tools (a docker CLI, CUDA stubs) must not show through on a node.
OPAQUE_DIRS = ("usr/local/bin", "usr/local/sbin", "etc/apt/apt.conf.d")  # the node's own, none of the machine's
SHADOWED = ("docker", "nvidia-smi", "containerd", "crictl", "kubectl", "ctr")
# Top-level directories the node gets fresh (tmpfs filled from the tree, nothing of the real machine's).
TMPFS_DIRS = ("run", "root")
# The shims' data and helpers (node.json, nvml.conf, ...): the testbed's own folder, never read by checks.
STATE_DIR = "/usr/lib/dgxspark-testbed"
# The Python fake tools the node's shim server runs (native/shimserver.py); each tool's path holds the C client.
SHIM_SOURCES = f"{STATE_DIR}/shims-py"
# Self-identification every testbed host carries: one line, the scenario's name (docs/internals.md).
IDENTITY_FILE = "/etc/dgxspark-testbed"
# sshd's ForceCommand on hosts with `faults`: counts sessions (one per remote command), adds latency, freezes or
# drops, then runs the command.
SESSION_WRAPPER = f"{STATE_DIR}/session"
SESSION_SCRIPT = r"""#!/bin/bash
# SSH session wrapper of a simulated host with faults (sshd ForceCommand); settings in faults.env.
. /usr/lib/dgxspark-testbed/faults.env
exec 9>>/run/dgxspark-testbed-commands.lock
flock 9
# builtins only up to the command (no cat, printf or sleep process per session): the wait is read's timeout on a
# FIFO nobody writes (made by the node's PID 1)
n=0
read -r n 2>/dev/null </run/dgxspark-testbed-commands
n=$(( ${n:-0} + 1 ))
echo "$n" > /run/dgxspark-testbed-commands
exec 9>&-
if [ "${LATENCY_MS:-0}" -gt 0 ]; then
  printf -v wait '%d.%03d' $((LATENCY_MS / 1000)) $((LATENCY_MS % 1000))
  read -r -t "$wait" -u 8 _ 8<>/run/dgxspark-testbed-latency.fifo
fi
if [ -n "$FREEZE_AFTER" ] && [ "$n" -gt "$FREEZE_AFTER" ]; then exec sleep infinity; fi
if [ -n "$DROP_AFTER" ] && [ "$n" -gt "$DROP_AFTER" ]; then
  for p in /proc/[0-9]*; do
    case "$(cat "$p/comm" 2>/dev/null)" in sshd|sshd-session|sshd-auth) kill -9 "${p#/proc/}" 2>/dev/null ;; esac
  done
  exit 255
fi
case "$SSH_ORIGINAL_COMMAND" in
  "") exec /bin/bash -l ;;
  internal-sftp) exec /usr/lib/openssh/sftp-server ;;
  *) exec /bin/bash -c "$SSH_ORIGINAL_COMMAND" ;;
esac
"""
# `rke2 --version` of the stand-in: the release line carries the build commit, then the Go toolchain (FIPS build).
RKE2_COMMIT = "6ce1a80e4d9c3b0f2a7e5d8c1b4a9f3e2d7c6b5a"
RKE2_GO = "go1.24.11 X:boringcrypto"
# containerd 2.x enables NRI by default and serves its socket at /var/run/nri/nri.sock (containerd docs/NRI.md).
NRI_SOCKET = "/run/nri/nri.sock"
# Binaries RKE2 runs from its data dir (k3s `pkg/agent/containerd`, `pkg/daemons/agent`).
RKE2_BUNDLED = frozenset({"containerd", "kubelet", "containerd-shim-runc-v2", "runc"})
SOCKET_FLAGS = {"containerd": ("-a", "--address"), "dockerd": ("-H", "--host"), "cri-dockerd": ("--container-runtime-endpoint",)}
DEFAULT_SOCKETS = {"dockerd": "/run/docker.sock", "cri-dockerd": "/run/cri-dockerd.sock", "containerd": "/run/containerd/containerd.sock"}
@dataclass(frozen=True)
class ProcessPlan:
    """One scenario process: the executable file, its exact argv and the unix sockets it serves."""

    exe: str
    argv: tuple[str, ...]
    listen: tuple[str, ...] = ()


@dataclass(frozen=True)
class Device:
    path: str
    major: int
    minor: int


@dataclass(frozen=True)
class Rendered:
    """What the node's PID 1 needs besides the tree: mounts, devices, processes, the ldconfig shim."""

    root: Path
    overlays: tuple[str, ...]
    processes: tuple[ProcessPlan, ...]
    devices: tuple[Device, ...]
    serve_sockets: tuple[str, ...]
    proc_driver: bool
    modules_file: Path
    ldconfig_shim: Path


def _write(root: Path, path: str, content: str | bytes, mode: int = 0o644) -> Path:
    rel = _tree_path(path)
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.unlink()
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    os.chmod(target, mode)
    return target


def _tree_path(path: str) -> str:
    """Map an absolute node path to its place in the tree, refusing paths the node cannot carry."""
    if not path.startswith("/") or ".." in Path(path).parts:
        raise ValueError(f"node file paths must be absolute without '..', got {path!r}")
    if path.startswith("/var/run/"):
        path = "/run/" + path[len("/var/run/"):]
    top = path.strip("/").split("/", 1)[0]
    allowed = OVERLAID + TMPFS_DIRS + ("proc", "dev")
    if top not in allowed:
        raise ValueError(f"node file {path!r} must be under one of /{', /'.join(allowed)}")
    return path.lstrip("/")


def _install_shim(root: Path, path: str, shim: str, python: str, client: bytes) -> Path:
    """The tool at `path` is the shim client (native/shimclient.c), which has the node's shim server run the Python
    shim (shims-py/<tool>, the same name as the tool's) or, without a server, execs `python3 -IS` on it."""
    if Path(path).name != shim:
        raise ValueError(f"shim {shim!r} must be installed under its own name, not at {path!r}")
    text = (SHIMS_DIR / shim).read_text()
    first, rest = text.split("\n", 1)
    if not first.startswith("#!"):
        raise RuntimeError(f"shim {SHIMS_DIR / shim} must start with a #! line")
    _write(root, f"{SHIM_SOURCES}/{shim}", f"#!{python} -IS\n{rest}", 0o755)
    return _write(root, path, client, 0o755)


def system_python() -> str:
    """The node's python3: the system one the SSH session also finds on PATH."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


def _process_plans(spec: dict[str, Any], context: dict[str, str]) -> list[ProcessPlan]:
    data_bin = f"/var/lib/rancher/rke2/data/{spec['rke2_version'].replace('+', '-')}/bin"
    plans = []
    for entry in spec["processes"]:
        argv = tuple(shlex.split(entry.format(**context)) if isinstance(entry, str) else [str(a) for a in entry])
        if not argv:
            raise ValueError("host.processes entries must be non-empty command lines")
        head = argv[0]
        base = os.path.basename(head)
        exe = head if head.startswith("/") else f"{data_bin}/{head}" if head in RKE2_BUNDLED else f"/usr/bin/{head}"
        listen = []
        for flag in SOCKET_FLAGS.get(base, ()):
            for i, arg in enumerate(argv):
                value = argv[i + 1] if arg == flag and i + 1 < len(argv) else arg.split("=", 1)[1] if arg.startswith(flag + "=") else None
                if value and not value.startswith("fd:"):
                    listen.append(value.removeprefix("unix://"))
        if not listen and base in DEFAULT_SOCKETS and not (base == "containerd" and "-c" in argv):
            listen.append(DEFAULT_SOCKETS[base])
        if not spec.get("containerd_socket", True):
            listen = [p for p in listen if p != RKE2_SOCKET]
        if base == "containerd" and _is_rke2_containerd(argv) and _serves_nri(spec):
            listen.append(NRI_SOCKET)
        plans.append(ProcessPlan(exe=exe, argv=argv, listen=tuple(listen)))
    return plans


def _is_rke2_containerd(argv: tuple[str, ...]) -> bool:
    """RKE2's own containerd: started with its generated config under /var/lib/rancher/rke2 (or its socket)."""
    return any("/var/lib/rancher/rke2/" in a or a.endswith(RKE2_SOCKET) for a in argv[1:])


def _serves_nri(spec: dict[str, Any]) -> bool:
    """Whether RKE2's containerd serves NRI: `nri` (default true) on containerd >= 2.0, where NRI is on by default."""
    major = str(spec.get("containerd_version", "")).lstrip("v").split(".", 1)[0]
    return bool(spec.get("nri", True)) and major.isdigit() and int(major) >= 2


def render(name: str, spec: dict[str, Any], root: Path, *, node_ip: str, prefix: int, gateway: str,
           scenario_dir: Path | None = None, cache_dir: Path | None = None, scenario: str = "") -> Rendered:
    """Write the node's tree under `root` and return its launch plan; `spec` is already merged with defaults."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    python = system_python()
    client = native.build_shim_client(python, cache_dir).read_bytes()
    context = {"hostname": spec["hostname"], "node_ip": node_ip, "name": name}
    osd, driver = spec["os"], spec["driver"]
    _write(root, "/etc/os-release", nodefiles.os_release(osd))
    if osd.get("dgx_release"):
        _write(root, "/etc/dgx-release", nodefiles.dgx_release(osd))
    _write(root, "/etc/hostname", spec["hostname"] + "\n")
    _write(root, "/etc/netplan/50-cloud-init.yaml", nodefiles.netplan(spec, node_ip, prefix, gateway), 0o600)
    for path, content in nodefiles.defaults_files(spec, context).items():
        _write(root, path, content)
    for unit, service in (spec.get("services") or {}).items():
        if service and service.get("path"):
            _write(root, service["path"], nodefiles.unit_file(unit, service))
    state_dir = STATE_DIR
    _write(root, IDENTITY_FILE, (scenario or "unnamed") + "\n")
    modules = _write(root, f"{state_dir}/modules", nodefiles.modules(spec))
    _write(root, f"{state_dir}/nvml.conf", nodefiles.nvml_conf(spec))
    # what the rke2 stand-in prints for `rke2 --version`, in the real binary's two lines (rancher/rke2 #558)
    _write(root, f"{state_dir}/versions/rke2", f"rke2 version {spec['rke2_version']} ({RKE2_COMMIT})\ngo version {RKE2_GO}\n")
    for path, shim in (("/usr/bin/nvidia-smi", "nvidia-smi"), ("/usr/bin/systemctl", "systemctl"),
                       ("/usr/bin/uname", "uname"), ("/usr/sbin/lsmod", "lsmod"), ("/usr/sbin/modinfo", "modinfo"),
                       ("/usr/bin/dmesg", "dmesg"),
                       ("/usr/bin/journalctl", "journalctl"), ("/var/lib/rancher/rke2/bin/crictl", "crictl"),
                       ("/var/lib/rancher/rke2/bin/ctr", "ctr"), ("/usr/sbin/sysctl", "sysctl"),
                       ("/usr/bin/dpkg-query", "dpkg-query")):
        _install_shim(root, path, shim, python, client)
    docker = spec.get("docker") or {}
    if docker.get("installed"):
        _install_shim(root, "/usr/bin/docker", "docker", python, client)
        runtimes = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}} if docker.get("nvidia_runtime") else {}
        _write(root, "/etc/docker/daemon.json", json.dumps({"runtimes": runtimes}, indent=4) + "\n" if runtimes else "{}\n")
    ldconfig_shim = _install_shim(root, f"{state_dir}/shims/ldconfig", "ldconfig", python, client)
    server = (Path(native.__file__).parent / "shimserver.py").read_text()
    _write(root, f"{state_dir}/shim-server", f"#!{python} -IS\n{server}", 0o755)
    faults = spec.get("faults") or {}
    if faults:
        _write(root, SESSION_WRAPPER, SESSION_SCRIPT, 0o755)
        _write(root, f"{state_dir}/faults.env", "".join(f"{key.upper()}={int(value)}\n" for key, value in sorted(faults.items())))
    # root's own home, nothing of the machine's: Ubuntu's skeleton, so sessions run no host login hooks
    _write(root, "/root/.profile", 'if [ "$BASH" ] && [ -f ~/.bashrc ]; then\n  . ~/.bashrc\nfi\nmesg n 2> /dev/null || true\n')
    _write(root, "/root/.bashrc", "# ~/.bashrc: executed by bash(1) for non-login shells.\n[ -z \"$PS1\" ] && return\n")
    (root / "run/systemd/system").mkdir(parents=True)
    (root / "run/sshd").mkdir(parents=True)
    (root / "var/lib/rancher/rke2/server/manifests").mkdir(parents=True)
    devices: list[Device] = []
    if driver["loaded"]:
        _write(root, "/proc/driver/nvidia/version", nodefiles.proc_version({**driver, "arch": spec["arch"]}))
        for minor, gpu in enumerate(spec["gpus"]):
            _write(root, f"/proc/driver/nvidia/gpus/{nodefiles.short_bus_id(gpu['bus_id'])}/information",
                   nodefiles.gpu_information(gpu, minor, driver["version"]))
            devices.append(Device(f"/dev/nvidia{minor}", 195, minor))
        devices += [Device("/dev/nvidiactl", 195, 255), Device("/dev/nvidia-modeset", 195, 254),
                    Device("/dev/nvidia-uvm", 511, 0), Device("/dev/nvidia-uvm-tools", 511, 1)]
    if spec["nvml"] == "present":
        libdir = f"/usr/lib/{spec['arch']}-linux-gnu"
        real = _write(root, f"{libdir}/libnvidia-ml.so.{driver.get('library_version') or driver['version']}", native.build_nvml_mock(cache_dir).read_bytes(), 0o644)
        for link in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
            (real.parent / link).symlink_to(real.name)
        _write(root, f"/etc/ld.so.conf.d/{spec['arch']}-linux-gnu.conf",
               f"# Multiarch support\n/usr/local/lib/{spec['arch']}-linux-gnu\n/lib/{spec['arch']}-linux-gnu\n{libdir}\n")
    if spec.get("toolkit"):
        for tool in ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-ctk"):
            _write(root, f"/usr/local/nvidia/toolkit/{tool}", native.build_sleeper(cache_dir).read_bytes(), 0o755)
    if spec.get("toolkit") and driver["loaded"]:
        _write(root, "/var/run/cdi/management.nvidia.com-gpu.yaml", nodefiles.cdi_management(spec))
        if spec["gpus"]:
            _write(root, "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json", nodefiles.cdi_device_plugin(spec))
    for item in spec.get("validations", []):
        _write(root, f"/run/nvidia/validations/{item}-ready", nodefiles.validation(item))
    sleeper = native.build_sleeper(cache_dir).read_bytes()
    plans = _process_plans(spec, context)
    for plan in plans:
        if not (root / _tree_path(plan.exe)).exists():
            _write(root, plan.exe, sleeper, 0o755)
    rke2_server = any(str(p).split()[:2] == ["/usr/local/bin/rke2", "server"] for p in spec["processes"]
                      if isinstance(p, str))
    for path, pem in pki.rke2_node_certs(rke2_server, float(spec["rke2_cert_days_left"])).items():
        _write(root, path, pem)
    if rke2_server:
        _write_snapshots(root, spec["hostname"], spec["etcd_snapshots"])
    for path, lines in _accounts(spec.get("users") or []).items():  # the machine's accounts plus the node's own
        _write(root, path, Path(path).read_text() + lines)
    for path, content in (spec.get("files") or {}).items():
        if content is None:
            continue
        if isinstance(content, dict) and set(content) == {"capture"}:
            content = captures.body(str(content["capture"]))
        _write(root, path, content if isinstance(content, (str, bytes)) else json.dumps(content))
    if scenario_dir is not None and (Path(scenario_dir) / "nodes" / name / "root").is_dir():
        src = Path(scenario_dir) / "nodes" / name / "root"
        for file in sorted(p for p in src.rglob("*") if p.is_file() or p.is_symlink()):
            _write(root, "/" + file.relative_to(src).as_posix(), file.read_bytes(), file.stat().st_mode & 0o7777)
    state = _state(spec, node_ip)
    _write(root, f"{state_dir}/node.json", json.dumps(state, indent=1, sort_keys=True))
    # the same data for the shims: marshal loads without importing json (re, enum), a third of a shim's start-up
    _write(root, f"{state_dir}/node.marshal", marshal.dumps(json.loads(json.dumps(state))))
    for local in OPAQUE_DIRS:  # only the node's own /usr/local/{bin,sbin} (rke2), nothing of the machine's
        _opaque(root / local)
    served = {p for plan in plans for p in plan.listen}
    serve = tuple(p for p in [RKE2_SOCKET] if spec.get("containerd_socket", True) and p not in served)
    tops = tuple(t for t in OVERLAID if (root / t).is_dir())
    return Rendered(root=root, overlays=tops, processes=tuple(plans), devices=tuple(devices), serve_sockets=serve,
                    proc_driver=(root / "proc/driver").is_dir(), modules_file=modules, ldconfig_shim=ldconfig_shim)


def _opaque(directory: Path) -> None:
    """Hide what the machine has below this directory (overlayfs opaque dir); else hide the names shims shadow."""
    directory.mkdir(parents=True, exist_ok=True)
    try:
        os.setxattr(directory, "trusted.overlay.opaque", b"y")
    except OSError:
        for name in SHADOWED:
            if os.path.lexists(f"/{directory.relative_to(directory.parents[2])}/{name}") and not (directory / name).exists():
                os.mknod(directory / name, 0o020000, os.makedev(0, 0))  # an overlayfs whiteout


def default_packages(spec: dict[str, Any]) -> list[dict[str, str]]:
    """The driver, kernel and toolkit packages dpkg lists on the node when the scenario names none: Ubuntu's names and
    version form (`nvidia-driver-550 550.107.02-0ubuntu0.24.04.1`, `libnvidia-compute-555`, as posted in
    oddmario/NVIDIA-Ubuntu-Driver-Guide#4 and NVIDIA/k8s-device-plugin#856) for the node's driver and kernel."""
    driver = spec["driver"]
    version, branch = driver["version"], driver["version"].split(".")[0]
    flavour = "-open" if driver.get("flavour", "open") == "open" else ""
    ubuntu = f"{version}-0ubuntu0.24.04.1"
    kernel_abi = spec["kernel"].rsplit("-", 1)[0]  # 6.17.0-1014 of 6.17.0-1014-nvidia
    found = [{"name": f"nvidia-driver-{branch}{flavour}", "version": ubuntu},
             {"name": f"nvidia-dkms-{branch}{flavour}", "version": ubuntu},
             {"name": f"libnvidia-compute-{branch}", "version": driver.get("library_package") or ubuntu},
             {"name": f"nvidia-utils-{branch}", "version": ubuntu},
             {"name": f"linux-image-{spec['kernel']}", "version": f"{kernel_abi}.{kernel_abi.rsplit('-', 1)[1][-2:]}"}]
    return found if driver.get("loaded", True) or driver.get("installed", True) else found[-1:]


SNAPSHOT_DIR = "/var/lib/rancher/rke2/server/db/snapshots"


def _write_snapshots(root: Path, hostname: str, snapshots: dict[str, Any]) -> None:
    """RKE2's scheduled etcd snapshots (`etcd-snapshot-<node>-<unix time>`, every 12 hours, newest `age_hours` old),
    `size` bytes each (0: the empty file a failed save leaves)."""
    import time

    newest = time.time() - float(snapshots.get("age_hours", 2)) * 3600
    for index in range(int(snapshots.get("count", 5))):
        taken = int(newest - index * 12 * 3600)
        path = _write(root, f"{SNAPSHOT_DIR}/etcd-snapshot-{hostname}-{taken}", b"\0" * int(snapshots.get("size", 16384)))
        os.utime(path, (taken, taken))


def _accounts(users: list[Any]) -> dict[str, str]:
    """/etc/passwd and /etc/group lines of the node's own system accounts (`users`: names, as `useradd -r -M -U`
    makes them: uid = gid from 990 down, no home, /sbin/nologin)."""
    passwd = group = ""
    for index, user in enumerate(users):
        name, number = str(user), 990 - index
        passwd += f"{name}:x:{number}:{number}:{name} user:/nonexistent:/sbin/nologin\n"
        group += f"{name}:x:{number}:\n"
    return {"/etc/passwd": passwd, "/etc/group": group} if users else {}


def _state(spec: dict[str, Any], node_ip: str) -> dict[str, Any]:
    """The per-node data the shims answer from (written to /usr/lib/dgxspark-testbed/node.json)."""
    state = {key: spec[key] for key in ("hostname", "kernel", "arch", "driver", "cuda_version", "gpus", "nvml",
                                        "services", "containerd_version", "toolkit", "kernel_version", "outputs")}
    state["journals"] = {unit.removesuffix(".service"): value for unit, value in (spec.get("journals") or {}).items()}
    state["node_ip"] = node_ip
    state["runtime_endpoint"] = f"unix://{RKE2_SOCKET}"
    state["kernel_log"] = list(spec.get("kernel_log") or []) + nodefiles.kernel_log(spec)
    state["containers"] = spec.get("containers") or []
    state["pods"] = spec.get("pods") or []
    state["docker"] = spec.get("docker") or {}
    state["os_pretty"] = spec["os"].get("pretty_name", "")
    state["cpus"], state["memory_kib"] = spec["cpus"], spec["memory_kib"]
    state["sysctl"] = {str(k): str(v) for k, v in (spec.get("sysctl") or {}).items()}
    state["packages"] = spec["packages"] if spec.get("packages") is not None else default_packages(spec)
    return state

