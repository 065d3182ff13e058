"""Renders a simulated node's file tree (laid over its root) and its launch plan from `nodes.<name>.host`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pytest_dgxspark.testbed import captures, native

SHIMS_DIR = Path(__file__).resolve().parent / "shims"
# Top-level directories a node's tree may replace (overlayfs over the real root); /run is a fresh tmpfs.
OVERLAID = ("etc", "usr", "var", "opt")
# The machine's own /usr/local tools (a docker CLI, CUDA stubs) must not show through on a node.
OPAQUE_DIRS = ("usr/local/bin", "usr/local/sbin")
SHADOWED = ("docker", "nvidia-smi", "containerd", "crictl", "kubectl", "ctr")
# Top-level directories the node gets fresh (tmpfs filled from the tree, nothing of the real machine's).
TMPFS_DIRS = ("run", "root")
RKE2_SOCKET = "/run/k3s/containerd/containerd.sock"
# The shims' data and helpers (node.json, nvml.conf, ...): the testbed's own folder, never read by checks.
STATE_DIR = "/usr/lib/dgxspark-testbed"
# Self-identification every testbed host carries: one line, the scenario's name (docs/internals.md).
IDENTITY_FILE = "/etc/dgxspark-testbed"
# sshd's ForceCommand on hosts with `faults`: counts commands, adds latency, freezes or drops, then runs the command.
SESSION_WRAPPER = f"{STATE_DIR}/session"
SESSION_SCRIPT = r"""#!/bin/bash
# SSH session wrapper of a simulated host with faults (sshd ForceCommand); settings in faults.env.
. /usr/lib/dgxspark-testbed/faults.env
exec 9>>/run/dgxspark-testbed-commands.lock
flock 9
n=$(( $(cat /run/dgxspark-testbed-commands 2>/dev/null || echo 0) + 1 ))
echo "$n" > /run/dgxspark-testbed-commands
exec 9>&-
if [ "${LATENCY_MS:-0}" -gt 0 ]; then sleep "$(printf '%d.%03d' $((LATENCY_MS / 1000)) $((LATENCY_MS % 1000)))"; fi
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
# Loaded-module table (name, size, holders) of a DGX Spark; sizes are illustrative, names and holders real.
NVIDIA_MODULES = (("nvidia_uvm", 2076672, ()), ("nvidia_drm", 135168, ()), ("nvidia_modeset", 1638400, ("nvidia_drm",)),
                  ("nvidia", 14381056, ("nvidia_uvm", "nvidia_modeset")))
BASE_MODULES = (("br_netfilter", 32768, ()), ("bridge", 421888, ("br_netfilter",)), ("overlay", 212992, ()))
GCC_LINE = "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)"


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


def _install_shim(root: Path, path: str, shim: str, python: str) -> Path:
    text = (SHIMS_DIR / shim).read_text()
    first, rest = text.split("\n", 1)
    if not first.startswith("#!"):
        raise RuntimeError(f"shim {SHIMS_DIR / shim} must start with a #! line")
    return _write(root, path, f"#!{python} -IS\n{rest}", 0o755)


def system_python() -> str:
    """The node's python3: the system one the SSH session also finds on PATH."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return os.path.realpath(sys.executable)


def _os_release(osd: dict[str, Any]) -> str:
    name = osd["name"]
    ident = osd.get("id") or name.lower()
    codename = osd.get("codename", "noble")
    pretty = osd.get("pretty_name") or f"{name} {osd['version_id']}"
    version = osd.get("version") or f"{pretty.removeprefix(name + ' ')} ({osd.get('codename_pretty', 'Noble Numbat')})"
    return (f'PRETTY_NAME="{pretty}"\nNAME="{name}"\nVERSION_ID="{osd["version_id"]}"\nVERSION="{version}"\n'
            f"VERSION_CODENAME={codename}\nID={ident}\nID_LIKE=debian\nHOME_URL=\"https://www.ubuntu.com/\"\n"
            'SUPPORT_URL="https://help.ubuntu.com/"\nBUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
            'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
            f"UBUNTU_CODENAME={codename}\nLOGO=ubuntu-logo\n")


def _dgx_release(osd: dict[str, Any]) -> str:
    # Real DGX Spark form: DGX_SWBUILD_* from the factory image, DGX_OTA_* appended after an OTA.
    text = ('DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\nDGX_SWBUILD_DATE="2025-09-10-13-50-03"\n'
            f'DGX_SWBUILD_VERSION="{osd["dgx_release"]}"\nDGX_COMMIT_ID="833b4a7"\nDGX_PLATFORM="DGX Server for KVM"\n'
            'DGX_SERIAL_NUMBER="XXXXXXXXXXXX"\n')
    if osd.get("dgx_ota_version"):
        text += f'\nDGX_OTA_VERSION="{osd["dgx_ota_version"]}"\nDGX_OTA_DATE="Wed Nov 19 05:05:30 PM UTC 2025"\n'
    return text


def _netplan(spec: dict[str, Any], node_ip: str, prefix: int, gateway: str) -> str:
    iface = spec["network"]["interface"]
    if spec["network"].get("dhcp"):
        return f"network:\n  version: 2\n  ethernets:\n    {iface}:\n      dhcp4: true\n"
    return (f"network:\n  version: 2\n  ethernets:\n    {iface}:\n      dhcp4: false\n      addresses:\n"
            f"        - {node_ip}/{prefix}\n      routes:\n        - to: default\n          via: {gateway}\n"
            f"      nameservers:\n        addresses: [{gateway}]\n")


def proc_version(driver: dict[str, Any]) -> str:
    """/proc/driver/nvidia/version: open module `for aarch64` form, or the proprietary form (gpu-stack-facts §1)."""
    arch = driver.get("arch", "aarch64")
    if driver.get("flavour", "open") == "open":
        module = f"NVIDIA UNIX Open Kernel Module for {arch}  {driver['version']}"
    elif arch == "aarch64":  # arm64 builds say `Kernel Module for aarch64`
        module = f"NVIDIA UNIX Kernel Module for {arch}  {driver['version']}"
    else:  # x86_64 proprietary: `NVIDIA UNIX x86_64 Kernel Module  <v>  <date>`, no `Release Build (builder)`
        return (f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {driver['version']}  Tue Sep 23 21:01:56 UTC 2025\n"
                f"GCC version:  {GCC_LINE}\n")
    return (f"NVRM version: {module}  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 21:01:56 UTC 2025\n"
            f"GCC version:  {GCC_LINE}\n")


def _gpu_information(gpu: dict[str, Any], minor: int, driver_version: str) -> str:
    rows = [("Model", gpu["name"]), ("IRQ", "0"), ("GPU UUID", gpu["uuid"]), ("Video BIOS", "??.??.??.??.??"),
            ("Bus Type", "PCIe"), ("DMA Size", "52 bits"), ("DMA Mask", "0xfffffffffffff"),
            ("Bus Location", short_bus_id(gpu["bus_id"])), ("Device Minor", str(minor)),
            ("GPU Firmware", driver_version), ("GPU Excluded", "No")]
    return "".join(f"{key + ':':<14}\t {value}\n" for key, value in rows)


def short_bus_id(bus_id: str) -> str:
    """NVML bus id `0000000F:01:00.0` -> sysfs/procfs form `000f:01:00.0`."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _modules(spec: dict[str, Any]) -> str:
    mods = list(BASE_MODULES) + ([] if not spec["driver"]["loaded"] else list(NVIDIA_MODULES))
    mods += [(name, 16384, ()) for name in spec.get("modules", [])]
    return "".join(f"{n} {size} {len(h)} {''.join(x + ',' for x in h) or '-'} Live 0x0000000000000000 "
                   f"{'(O)' if n.startswith('nvidia') and spec['driver'].get('flavour') == 'open' else '(POE)' if n.startswith('nvidia') else ''}\n"
                   for n, size, h in mods)


def _nvml_conf(spec: dict[str, Any]) -> str:
    driver = spec["driver"]
    major, minor = (spec["cuda_version"].split(".") + ["0"])[:2]
    lines = [f"driver_loaded={1 if driver['loaded'] else 0}", f"driver_version={driver['version']}",
             f"cuda_driver_version={int(major) * 1000 + int(minor) * 10}", f"nvml_version={major}.{driver['version']}",
             f"gpu_count={len(spec['gpus'])}"]
    for i, gpu in enumerate(spec["gpus"]):
        memory = gpu.get("memory", "not-supported")
        lines += [f"gpu{i}.name={gpu['name']}", f"gpu{i}.uuid={gpu['uuid']}", f"gpu{i}.bus_id={gpu['bus_id']}",
                  f"gpu{i}.memory={memory}", f"gpu{i}.compute={gpu.get('compute', '12.1')}",
                  f"gpu{i}.arch={gpu.get('arch', 10)}", f"gpu{i}.pci_device_id={gpu.get('pci_device_id', 0)}"]
    return "\n".join(lines) + "\n"


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


def _defaults_files(spec: dict[str, Any], context: dict[str, str]) -> dict[str, str]:
    runtimes = ""
    if spec.get("toolkit"):
        runtimes = ('\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia"]\n'
                    '  runtime_type = "io.containerd.runc.v2"\n'
                    '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia".options]\n'
                    '  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n  SystemdCgroup = true\n')
    return {
        "/etc/rancher/rke2/config.yaml": rke2_config_yaml(spec, context),
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml": (
            "# File generated by rke2. DO NOT EDIT. Use config-v3.toml.tmpl instead.\nversion = 3\n"
            'root = "/var/lib/rancher/rke2/agent/containerd"\nstate = "/run/k3s/containerd"\n\n'
            '[grpc]\n  address = "/run/k3s/containerd/containerd.sock"\n\n'
            '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc"]\n  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc".options]\n  SystemdCgroup = true\n' + runtimes
            + ('' if spec.get("nri", True) else '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')),
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf": (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
            f"containerRuntimeEndpoint: unix://{RKE2_SOCKET}\nclusterDNS:\n- 10.43.0.10\nclusterDomain: cluster.local\n"),
        "/var/lib/rancher/rke2/agent/etc/crictl.yaml": f"runtime-endpoint: unix://{RKE2_SOCKET}\n",
    }


def rke2_config_yaml(spec: dict[str, Any], context: dict[str, str]) -> str:
    """/etc/rancher/rke2/config.yaml from the host's `rke2_config` mapping (its own data), `node_labels` and
    `node_taints` as `node-label`/`node-taint`; `{hostname}`, `{node_ip}` are substituted in string values."""
    config = {k: (v.format(**context) if isinstance(v, str) else v) for k, v in (spec.get("rke2_config") or {}).items()}
    if spec.get("node_labels"):
        config["node-label"] = [str(label) for label in spec["node_labels"]]
    if spec.get("node_taints"):
        config["node-taint"] = [str(taint) for taint in spec["node_taints"]]
    return "".join(_yaml_item(key, value) for key, value in config.items())


def _yaml_item(key: str, value: Any) -> str:
    """One top-level key as provisioning templates write it (`- item` lists indented two spaces, "0600" quoted)."""
    if isinstance(value, list):
        return f"{key}:\n" + "".join(f"  - {_yaml_scalar(item)}\n" for item in value)
    if isinstance(value, dict):
        return f"{key}:\n" + "".join(f"  {k}: {_yaml_scalar(v)}\n" for k, v in value.items())
    return f"{key}: {_yaml_scalar(value)}\n"


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = yaml.safe_load(text) == text if text and text.strip() == text and ": " not in text and "#" not in text else False
    return text if plain else json.dumps(text)


def render(name: str, spec: dict[str, Any], root: Path, *, node_ip: str, prefix: int, gateway: str,
           scenario_dir: Path | None = None, cache_dir: Path | None = None, scenario: str = "") -> Rendered:
    """Write the node's tree under `root` and return its launch plan; `spec` is already merged with defaults."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    python = system_python()
    context = {"hostname": spec["hostname"], "node_ip": node_ip, "name": name}
    osd, driver = spec["os"], spec["driver"]
    _write(root, "/etc/os-release", _os_release(osd))
    if osd.get("dgx_release"):
        _write(root, "/etc/dgx-release", _dgx_release(osd))
    _write(root, "/etc/hostname", spec["hostname"] + "\n")
    _write(root, "/etc/netplan/50-cloud-init.yaml", _netplan(spec, node_ip, prefix, gateway), 0o600)
    for path, content in _defaults_files(spec, context).items():
        _write(root, path, content)
    for unit, service in (spec.get("services") or {}).items():
        if service and service.get("path"):
            _write(root, service["path"], _unit_file(unit, service))
    state_dir = STATE_DIR
    _write(root, IDENTITY_FILE, (scenario or "unnamed") + "\n")
    modules = _write(root, f"{state_dir}/modules", _modules(spec))
    _write(root, f"{state_dir}/nvml.conf", _nvml_conf(spec))
    # what the rke2 stand-in prints for `rke2 --version`, in the real binary's two lines (rancher/rke2 #558)
    _write(root, f"{state_dir}/versions/rke2", f"rke2 version {spec['rke2_version']} ({RKE2_COMMIT})\ngo version {RKE2_GO}\n")
    for path, shim in (("/usr/bin/nvidia-smi", "nvidia-smi"), ("/usr/bin/systemctl", "systemctl"),
                       ("/usr/bin/uname", "uname"), ("/usr/sbin/lsmod", "lsmod"), ("/usr/sbin/modinfo", "modinfo"),
                       ("/usr/bin/dmesg", "dmesg"),
                       ("/usr/bin/journalctl", "journalctl"), ("/var/lib/rancher/rke2/bin/crictl", "crictl"),
                       ("/var/lib/rancher/rke2/bin/ctr", "ctr")):
        _install_shim(root, path, shim, python)
    docker = spec.get("docker") or {}
    if docker.get("installed"):
        _install_shim(root, "/usr/bin/docker", "docker", python)
        runtimes = {"nvidia": {"args": [], "path": "nvidia-container-runtime"}} if docker.get("nvidia_runtime") else {}
        _write(root, "/etc/docker/daemon.json", json.dumps({"runtimes": runtimes}, indent=4) + "\n" if runtimes else "{}\n")
    ldconfig_shim = _install_shim(root, f"{state_dir}/shims/ldconfig", "ldconfig", python)
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
        _write(root, "/proc/driver/nvidia/version", proc_version({**driver, "arch": spec["arch"]}))
        for minor, gpu in enumerate(spec["gpus"]):
            _write(root, f"/proc/driver/nvidia/gpus/{short_bus_id(gpu['bus_id'])}/information",
                   _gpu_information(gpu, minor, driver["version"]))
            devices.append(Device(f"/dev/nvidia{minor}", 195, minor))
        devices += [Device("/dev/nvidiactl", 195, 255), Device("/dev/nvidia-modeset", 195, 254),
                    Device("/dev/nvidia-uvm", 511, 0), Device("/dev/nvidia-uvm-tools", 511, 1)]
    if spec["nvml"] == "present":
        libdir = f"/usr/lib/{spec['arch']}-linux-gnu"
        real = _write(root, f"{libdir}/libnvidia-ml.so.{driver['version']}", native.build_nvml_mock(cache_dir).read_bytes(), 0o644)
        for link in ("libnvidia-ml.so.1", "libnvidia-ml.so"):
            (real.parent / link).symlink_to(real.name)
        _write(root, f"/etc/ld.so.conf.d/{spec['arch']}-linux-gnu.conf",
               f"# Multiarch support\n/usr/local/lib/{spec['arch']}-linux-gnu\n/lib/{spec['arch']}-linux-gnu\n{libdir}\n")
    if spec.get("toolkit"):
        for tool in ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-ctk"):
            _write(root, f"/usr/local/nvidia/toolkit/{tool}", native.build_sleeper(cache_dir).read_bytes(), 0o755)
    if spec.get("toolkit") and driver["loaded"]:
        _write(root, "/var/run/cdi/management.nvidia.com-gpu.yaml", _cdi_management(spec))
        if spec["gpus"]:
            _write(root, "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json", _cdi_device_plugin(spec))
    for item in spec.get("validations", []):
        _write(root, f"/run/nvidia/validations/{item}-ready", _validation(item))
    sleeper = native.build_sleeper(cache_dir).read_bytes()
    plans = _process_plans(spec, context)
    for plan in plans:
        if not (root / _tree_path(plan.exe)).exists():
            _write(root, plan.exe, sleeper, 0o755)
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
    _write(root, f"{state_dir}/node.json", json.dumps(_state(spec, node_ip), indent=1, sort_keys=True))
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


def _unit_file(unit: str, service: dict[str, Any]) -> str:
    """A unit file at the service's FragmentPath; RKE2's follows rke2 `bundle/lib/systemd/system/rke2-server.service`."""
    name = unit.removesuffix(".service")
    lines = ["[Unit]", f"Description={service.get('description', name)}"]
    rke2 = name in ("rke2-server", "rke2-agent")
    if rke2:
        other = "rke2-agent" if name == "rke2-server" else "rke2-server"
        lines += ["Documentation=https://github.com/rancher/rke2#readme", "Wants=network-online.target",
                  "After=network-online.target", f"Conflicts={other}.service"]
    lines += ["", "[Install]", "WantedBy=multi-user.target", "", "[Service]", f"Type={service.get('type', 'simple')}"]
    if rke2:
        lines += ["EnvironmentFile=-/etc/default/%N", "EnvironmentFile=-/etc/sysconfig/%N",
                  "EnvironmentFile=-/usr/local/lib/systemd/system/%N.env", "KillMode=process", "Delegate=yes",
                  "LimitNOFILE=1048576", "TimeoutStartSec=0", f"Restart={service.get('restart', 'always')}",
                  "RestartSec=5s", f"ExecCondition=/bin/sh -xc '! /usr/bin/systemctl is-active --quiet {other}'",
                  "ExecStartPre=-/sbin/modprobe br_netfilter", "ExecStartPre=-/sbin/modprobe overlay",
                  f"ExecStart=/usr/local/bin/rke2 {name.split('-')[1]}"]
    elif service.get("exec"):
        lines.append(f"ExecStart={service['exec']}")
    return "\n".join(lines) + "\n"


def _cdi_management(spec: dict[str, Any]) -> str:
    """The toolkit's management CDI spec (kind management.nvidia.com/gpu, device `all`)."""
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] + [f"/dev/nvidia{i}" for i in range(len(spec["gpus"]))]
    edits = "".join(f"      - path: {n}\n" for n in nodes)
    return ("---\ncdiVersion: 0.5.0\nkind: management.nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
            f"    deviceNodes:\n{edits}containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n")


def _cdi_device_plugin(spec: dict[str, Any]) -> str:
    """The device plugin's CDI spec (kind k8s.device-plugin.nvidia.com/gpu, one device per GPU UUID)."""
    devices = [{"name": g["uuid"], "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}}
               for i, g in enumerate(spec["gpus"])]
    return json.dumps({"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu", "devices": devices,
                       "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}})


def _validation(item: str) -> str:
    if item == "driver":
        return ("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\n"
                "NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n")
    return ""


def _state(spec: dict[str, Any], node_ip: str) -> dict[str, Any]:
    """The per-node data the shims answer from (written to /usr/lib/dgxspark-testbed/node.json)."""
    state = {key: spec[key] for key in ("hostname", "kernel", "arch", "driver", "cuda_version", "gpus", "nvml",
                                        "services", "containerd_version", "toolkit", "kernel_version", "outputs")}
    state["journals"] = {unit.removesuffix(".service"): value for unit, value in (spec.get("journals") or {}).items()}
    state["node_ip"] = node_ip
    state["runtime_endpoint"] = f"unix://{RKE2_SOCKET}"
    state["kernel_log"] = list(spec.get("kernel_log") or []) + _kernel_log(spec)
    state["containers"] = spec.get("containers") or []
    state["pods"] = spec.get("pods") or []
    state["docker"] = spec.get("docker") or {}
    state["os_pretty"] = spec["os"].get("pretty_name", "")
    state["cpus"], state["memory_kib"] = spec["cpus"], spec["memory_kib"]
    return state


def _kernel_log(spec: dict[str, Any]) -> list[str]:
    driver = spec["driver"]
    if not driver["loaded"]:
        return []
    lines = ["nvidia: loading out-of-tree module taints kernel.",
             f"NVRM: loading {proc_version({**driver, 'arch': spec['arch']}).splitlines()[0].removeprefix('NVRM version: ')}"]
    if driver.get("flavour") != "open":  # Blackwell runs only on the open modules (gpu-stack-facts F1); Hopper on both
        for g in spec["gpus"]:  # as a DGX Spark logs it (captures/gb10-proprietary-dmesg.txt, Start9Labs#3693)
            if g.get("family", "blackwell") == "blackwell":
                pci = short_bus_id(g["bus_id"]).rsplit(".", 1)[0]
                lines += [f"NVRM: GPU at PCI:{pci}: {g['uuid']}", f"NVRM: Xid (PCI:{pci}): 169, fd8cd000 94000000",
                          f"NVRM: GPU {short_bus_id(g['bus_id'])}: RmInitAdapter failed! (0x62:0x1a:2631)"]
    return lines
