"""What a simulated container sees of its node's GPUs, and what a `/bin/sh -c` of plain commands prints in it.

Which GPUs a container gets (the NVIDIA Container Toolkit's rules; rke2-docs-gpu_operators.md, gpu-operator CDI/NRI docs):
- the device plugin's allocation: the GPUs of its nvidia.com/gpu, injected through CDI (/dev/nvidia<minor> and the
  common nodes of the plugin's spec), with nvidia-smi and libnvidia-ml mounted by the toolkit;
- the nvidia runtime, when it runs the container (containerd's default runtime is an nvidia one) and honours the
  NVIDIA_VISIBLE_DEVICES of the image or pod (always for a privileged container; for an unprivileged one only with
  `accept-nvidia-visible-devices-envvar-when-unprivileged = true`, the toolkit's default): CUDA base images set
  NVIDIA_VISIBLE_DEVICES=all, so such a container gets every GPU of the node whatever it requested.
With RKE2's default runc and the NRI plugin (healthy), a container without a GPU request gets nothing.
"""
from __future__ import annotations

import re
import shlex
from typing import Any

# Where the GPU Operator's toolkit writes the nvidia runtime's config on the host (ROOT=/usr/local/nvidia)
TOOLKIT_CONFIG = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"
ACCEPT_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
# The device plugin's CDI spec: the GPU's own node and the common ones (nodefiles.cdi_device_plugin)
COMMON_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl")


def node_devices(host: dict[str, Any], registered: int) -> dict[str, Any]:
    """What the node offers containers: its GPUs (when the driver is loaded and the toolkit installed), how many the
    device plugin registered, and the nvidia runtime's reach (default runtime, envvar when unprivileged)."""
    injectable = bool(host.get("toolkit")) and bool((host.get("driver") or {}).get("loaded"))
    gpus = [{"uuid": g["uuid"], "name": g["name"], "minor": i} for i, g in enumerate(host.get("gpus") or [])] \
        if injectable else []
    config = str((host.get("files") or {}).get(TOOLKIT_CONFIG) or "")
    said = re.search(rf"^\s*{re.escape(ACCEPT_KEY)}\s*=\s*(true|false)\s*$", config, re.M)
    return {"gpus": gpus, "registered": registered if injectable else 0,
            "replicas": max(1, registered // len(gpus)) if gpus else 1,  # time-slicing: each GPU offered that often
            "default_runtime": str(host.get("containerd_default_runtime") or "runc"),
            "accept_envvar_unprivileged": said is None or said.group(1) == "true"}


def visible(devices: dict[str, Any], allocated: list[str], container: dict[str, Any], image: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's GPUs the container holds: its allocation, and every GPU its NVIDIA_VISIBLE_DEVICES names where the
    nvidia runtime runs it and honours that variable."""
    gpus = devices.get("gpus") or []
    seen = {g["uuid"] for g in gpus if g["uuid"] in allocated}
    env = {**(image.get("env") or {}), **{e.get("name"): e.get("value") for e in container.get("env") or [] if e.get("name")}}
    wanted = str(env.get("NVIDIA_VISIBLE_DEVICES") or "")
    privileged = bool((container.get("securityContext") or {}).get("privileged"))
    honoured = str(devices.get("default_runtime", "runc")).startswith("nvidia") and (
        privileged or devices.get("accept_envvar_unprivileged", True))
    if honoured and wanted not in ("", "void", "none"):
        names = {w.strip() for w in wanted.split(",")}
        seen |= {g["uuid"] for g in gpus if "all" in names or g["uuid"] in names or str(g["minor"]) in names}
    return [g for g in gpus if g["uuid"] in seen]


def run_shell(container: dict[str, Any], image: dict[str, Any], gpus: list[dict[str, Any]]) -> tuple[str, int] | None:
    """(log, exit status) of a container whose command is `sh -c` of plain commands (echo, ls, nvidia-smi -L) run
    against the GPUs it holds; None for any other program (the kubelet then runs it as before)."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    if len(argv) != 3 or argv[0] not in ("sh", "/bin/sh") or argv[1] != "-c":
        return None
    shell = image.get("shell", "dash")
    try:
        steps = [shlex.split(step) for step in argv[2].split(";") if step.strip()]
    except ValueError:
        return None
    if not steps or any(s[0] not in ("echo", "ls", "nvidia-smi") or (s[0] == "ls" and any(a.startswith("-") for a in s))
                        for s in steps):
        return None
    out: list[str] = []
    status = 0
    for step in steps:
        words = [w.replace("$?", str(status)) for w in step]
        if words[0] == "echo":
            out.append(" ".join(words[1:]))
            status = 0
        elif words[0] == "ls":
            status = _ls(words[1:], gpus, shell, out)
        elif not gpus:  # the toolkit mounts nvidia-smi only into a container it gives GPUs
            out.append("sh: 1: nvidia-smi: not found" if shell == "dash" else "sh: nvidia-smi: not found")
            status = 127
        elif words[1:] == ["-L"]:
            out += [f"GPU {i}: {g['name']} (UUID: {g['uuid']})" for i, g in enumerate(gpus)]
            status = 0
        else:
            return None
    return "".join(line + "\n" for line in out), status


def device_nodes(gpus: list[dict[str, Any]]) -> list[str]:
    """The /dev/nvidia* nodes of a container holding `gpus`, as the shell's glob sorts them (C locale)."""
    if not gpus:
        return []
    return sorted([f"/dev/nvidia{g['minor']}" for g in gpus] + list(COMMON_NODES))


def _ls(args: list[str], gpus: list[dict[str, Any]], shell: str, out: list[str]) -> int:
    present = device_nodes(gpus)
    status = 0
    listed: list[str] = []
    for arg in args or ["."]:
        if arg.endswith("*"):
            found = [d for d in present if d.startswith(arg[:-1])]
        else:
            found = [arg] if arg in present else []
        if not found:  # no match: the shell hands the pattern itself to ls (GNU coreutils / busybox wording)
            out.append(f"ls: cannot access '{arg}': No such file or directory" if shell == "dash" else
                       f"ls: {arg}: No such file or directory")
            status = 2 if shell == "dash" else 1
        listed += found
    out += sorted(listed)
    return status
