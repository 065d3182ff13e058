"""Tolerant parsers of real command outputs and Kubernetes objects the checks read."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import yaml

# --- versions -------------------------------------------------------------------------------


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric dotted components of a version: 'v2.1.5-k3s1' -> (2, 1, 5)."""
    match = re.search(r"(\d+(?:\.\d+)*)", text or "")
    if match is None:
        return ()
    return tuple(int(part) for part in match.group(1).split("."))


def image_tag(image: str) -> str | None:
    """Tag (or digest) of an image reference; None when it has neither."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_registry(image: str) -> str:
    """Registry host of an image reference ('docker.io' when it names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


# --- host driver ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DriverVersion:
    """What /proc/driver/nvidia/version says about the loaded kernel module."""

    version: str
    flavour: str  # "open" | "proprietary"
    arch: str | None
    gcc: str | None


_NVRM_OPEN = re.compile(r"NVRM version:\s*NVIDIA UNIX Open Kernel Module(?: for (\S+))?\s+(\d+(?:\.\d+)+)")
# Proprietary: `NVIDIA UNIX x86_64 Kernel Module  X` (x86_64) or `NVIDIA UNIX Kernel Module for aarch64  X` (arm64).
_NVRM_PROP = re.compile(
    r"NVRM version:\s*NVIDIA UNIX(?:\s+(?!Kernel\b)(\S+))?\s+Kernel Module(?:\s+for\s+(\S+))?\s+(\d+(?:\.\d+)+)"
)
_GCC = re.compile(r"GCC version:\s*(.+)")


def parse_proc_driver_version(text: str) -> DriverVersion | None:
    """Parse /proc/driver/nvidia/version of either flavour; None when it is not one."""
    gcc_match = _GCC.search(text or "")
    gcc = gcc_match.group(1).strip() if gcc_match else None
    match = _NVRM_OPEN.search(text or "")
    if match is not None:
        return DriverVersion(match.group(2), "open", match.group(1), gcc)
    match = _NVRM_PROP.search(text or "")
    if match is not None:
        return DriverVersion(match.group(3), "proprietary", match.group(1) or match.group(2), gcc)
    return None


def module_loaded(proc_modules: str, name: str = "nvidia") -> bool:
    """Whether /proc/modules (or lsmod output) lists the module by its exact name."""
    for line in (proc_modules or "").splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return True
    return False


def ldconfig_has(ldconfig_p: str, soname: str = "libnvidia-ml.so.1") -> list[str]:
    """Paths `ldconfig -p` resolves for a soname (empty when it resolves none)."""
    paths = []
    for line in (ldconfig_p or "").splitlines():
        line = line.strip()
        if line.startswith(soname + " ") and "=>" in line:
            paths.append(line.split("=>", 1)[1].strip())
    return paths


# --- nvidia-smi -----------------------------------------------------------------------------

_NOT_AVAILABLE = {"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", ""}


def parse_nvidia_smi_csv(text: str) -> list[dict[str, str | None]]:
    """Rows of `nvidia-smi --query-gpu=... --format=csv`; '[N/A]'-like cells become None.

    Header units ('memory.total [MiB]') are dropped from the keys; a noheader output is keyed 0, 1, ...
    """
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    first = [cell.strip() for cell in reader[0]]
    has_header = any(re.match(r"^[a-z_]+(\.[a-z_]+)+", cell) for cell in first) or "name" in first
    if has_header:
        keys = [re.sub(r"\s*\[.*?\]$", "", cell) for cell in first]
        body = reader[1:]
    else:
        keys = [str(i) for i in range(len(first))]
        body = reader
    rows = []
    for row in body:
        cells = [cell.strip() for cell in row]
        rows.append({k: (None if v.lower() in _NOT_AVAILABLE else v) for k, v in zip(keys, cells, strict=False)})
    return rows


@dataclass(frozen=True)
class SmiGpu:
    """One GPU line of `nvidia-smi -L`, with its MIG devices."""

    index: int
    name: str
    uuid: str | None
    mig_devices: tuple[str, ...] = ()


_SMI_GPU = re.compile(r"^GPU\s+(\d+):\s*(.*?)\s*(?:\(UUID:\s*([^)]+)\))?\s*$")
_SMI_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+\d+:")


def parse_nvidia_smi_list(text: str) -> list[SmiGpu]:
    """GPUs of `nvidia-smi -L` (MIG lines are attached to their GPU, not counted as GPUs)."""
    gpus: list[SmiGpu] = []
    for line in (text or "").splitlines():
        gpu = _SMI_GPU.match(line.strip()) if not line[:1].isspace() else None
        if gpu is not None:
            gpus.append(SmiGpu(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
            continue
        mig = _SMI_MIG.match(line)
        if mig is not None and gpus:
            last = gpus[-1]
            gpus[-1] = SmiGpu(last.index, last.name, last.uuid, last.mig_devices + (mig.group(1),))
    return gpus


# --- container runtime ----------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeVersion:
    """A Node's status.nodeInfo.containerRuntimeVersion, split."""

    runtime: str
    version: tuple[int, ...]
    k3s: bool
    raw: str


_RUNTIME = re.compile(r"^(?P<runtime>[a-z0-9.-]+)://v?(?P<ver>[0-9][^\s]*)$")
_K3S_SUFFIX = re.compile(r"-k3s\d+(?:\.\d+)?$")


def parse_runtime_version(raw: str) -> RuntimeVersion | None:
    """'containerd://2.1.5-k3s1' -> RuntimeVersion('containerd', (2, 1, 5), True); None if unparsable."""
    match = _RUNTIME.match((raw or "").strip())
    if match is None:
        return None
    ver = match.group("ver")
    return RuntimeVersion(match.group("runtime"), version_tuple(ver), bool(_K3S_SUFFIX.search(ver)), raw)


def kubelet_runtime_endpoint(config_texts: Iterable[str], cmdline: str = "") -> str | None:
    """The kubelet's containerRuntimeEndpoint: the flag wins over config files (last file wins)."""
    flag = re.search(r"--container-runtime-endpoint(?:=|\s+)(\S+)", cmdline or "")
    if flag is not None:
        return flag.group(1).strip("'\"")
    endpoint = None
    for text in config_texts:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and data.get("containerRuntimeEndpoint"):
            endpoint = str(data["containerRuntimeEndpoint"])
    return endpoint


def split_cmdline(proc_cmdline: str) -> str:
    """/proc/<pid>/cmdline (NUL separated) as one space-separated line."""
    return " ".join(part for part in (proc_cmdline or "").replace("\x00", " ").split())


# --- rke2 config ----------------------------------------------------------------------------


def merge_rke2_config(documents: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Effective RKE2 config: config.yaml then config.yaml.d/*.yaml in the order given.

    The last value wins; lists are replaced unless the key ends with '+', which appends.
    """
    merged: dict[str, Any] = {}
    for document in documents:
        for key, value in (document or {}).items():
            key = str(key)
            if key.endswith("+"):
                base = key[:-1]
                current = merged.get(base)
                current_list = [] if current is None else (current if isinstance(current, list) else [current])
                merged[base] = current_list + (value if isinstance(value, list) else [value])
            else:
                merged[key] = value
    return merged


def as_list(value: Any) -> list[str]:
    """A config value as a list of strings (None -> [], 'a,b' -> ['a', 'b'])."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def as_bool(value: Any, default: bool = False) -> bool:
    """A YAML/CLI boolean ('true', True, 'yes') as bool."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "yes", "1", "on"}


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """['k=v', 'k2='] -> {'k': 'v', 'k2': ''}."""
    labels = {}
    for item in items:
        key, _, value = str(item).partition("=")
        labels[key.strip()] = value.strip()
    return labels


@dataclass(frozen=True, order=True)
class Taint:
    """A node taint as key, value and effect."""

    key: str
    value: str
    effect: str


def parse_taint(text: str) -> Taint:
    """'key=value:NoSchedule' or 'key:NoSchedule' -> Taint."""
    body, _, effect = str(text).rpartition(":")
    if not body:
        body, effect = effect, ""
    key, _, value = body.partition("=")
    return Taint(key.strip(), value.strip(), effect.strip())


def node_taints(node: Mapping[str, Any]) -> list[Taint]:
    """Taints of a Node object as Taint values."""
    return [
        Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
        for t in (node.get("spec") or {}).get("taints") or []
    ]


# --- host network ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HostAddress:
    """An address of `ip -j addr`, with whether the kernel marks it dynamic (DHCP lease)."""

    ifname: str
    address: str
    prefixlen: int
    dynamic: bool


def parse_ip_addr_json(text: str) -> list[HostAddress]:
    """Addresses of `ip -j addr show`."""
    result = []
    for iface in json.loads(text or "[]"):
        for info in iface.get("addr_info", []):
            if "local" in info:
                result.append(
                    HostAddress(iface.get("ifname", ""), info["local"], int(info.get("prefixlen", 0)), bool(info.get("dynamic")))
                )
    return result


def netplan_dhcp_interfaces(documents: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Netplan interface definitions (ethernets, bonds, bridges, vlans, wifis) keyed by id."""
    found: dict[str, dict[str, Any]] = {}
    for document in documents:
        network = (document or {}).get("network") or {}
        for group in ("ethernets", "bonds", "bridges", "vlans", "wifis"):
            for name, definition in (network.get(group) or {}).items():
                found[str(name)] = {**found.get(str(name), {}), **(definition or {})}
    return found


def netplan_uses_dhcp(definition: Mapping[str, Any]) -> bool:
    """Whether a netplan interface definition asks for DHCP (v4 or v6)."""
    return as_bool(definition.get("dhcp4")) or as_bool(definition.get("dhcp6"))


def addresses_of(host: str) -> set[str]:
    """The IP addresses a host name (or literal address) stands for; the name itself when it does not resolve."""
    import ipaddress
    import socket

    host = host.strip("[]")
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)} or {host}
    except OSError:
        return {host}


def same_endpoint(url_a: str, url_b: str) -> bool:
    """Two https://host:port URLs reach the same API: same port, and host names that share an address."""
    from urllib.parse import urlsplit

    a, b = urlsplit(url_a.rstrip("/")), urlsplit(url_b.rstrip("/"))
    if (a.port or 443) != (b.port or 443) or not a.hostname or not b.hostname:
        return False
    return a.hostname == b.hostname or bool(addresses_of(a.hostname) & addresses_of(b.hostname))


# --- os-release -----------------------------------------------------------------------------


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value pairs of /etc/os-release (quotes removed)."""
    result = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            result[key.strip()] = value.strip().strip("'\"")
    return result


# --- Kubernetes objects ---------------------------------------------------------------------


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod is Running with its Ready condition True."""
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == "True"


def pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Pod an auditor reads: name, node, phase, readiness, waiting reasons, images."""
    status = pod.get("status") or {}
    waiting = []
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "waiting" in state:
            waiting.append(f"{cs.get('name')}: {state['waiting'].get('reason')}")
    return {
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"].get("namespace"),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": status.get("phase"),
        "ready": pod_ready(pod),
        "waiting": waiting,
        "images": [c.get("image") for c in (pod.get("spec") or {}).get("containers") or []],
    }


def owner_kinds(obj: Mapping[str, Any]) -> list[str]:
    """'Kind/name' of an object's ownerReferences."""
    return [f"{o.get('kind')}/{o.get('name')}" for o in (obj.get("metadata") or {}).get("ownerReferences") or []]


def node_internal_ips(node: Mapping[str, Any]) -> list[str]:
    """InternalIP addresses of a Node."""
    return [a["address"] for a in (node.get("status") or {}).get("addresses") or [] if a.get("type") == "InternalIP"]


def node_condition(node: Mapping[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    """A Node condition by type."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


# ClusterPolicy condition reasons (gpu-operator v26.3.2 internal/conditions/consts.go) that say the OPERATOR itself
# found nothing to manage or could not reconcile; OperandNotReady/DriverNotReady say an operand is not ready yet.
OPERATOR_FAULT_REASONS = frozenset({"NoGPUNodes", "NFDLabelsMissing", "ReconcileFailed"})
_STATES_NOT_READY = re.compile(r"states not ready:\s*\[([^\]]*)\]")


@dataclass(frozen=True)
class PolicyReadiness:
    """What a ClusterPolicy status says, and whether it is truly ready."""

    ready: bool
    state: str | None
    reason: str | None
    message: str | None
    reasons: tuple[str, ...] = ()  # reasons of the Ready condition and of an Error condition that is True

    @property
    def operator_fault(self) -> bool:
        """The operator found no GPU node / NFD labels, or failed to reconcile (not an operand problem)."""
        return any(reason in OPERATOR_FAULT_REASONS for reason in self.reasons)

    @property
    def states_not_ready(self) -> tuple[str, ...]:
        """The operand states named in 'ClusterPolicy is not ready, states not ready: [state-driver ...]'."""
        match = _STATES_NOT_READY.search(self.message or "")
        return tuple(match.group(1).replace(",", " ").split()) if match else ()


def clusterpolicy_readiness(policy: Mapping[str, Any]) -> PolicyReadiness:
    """Ready only with state 'ready' AND a Ready=True condition with reason Reconciled.

    `state: ready` is also set with NoGPUNodes or NFDLabelsMissing; those are not ready here. The reason shown is
    the Error condition's when it is True (the operator puts OperandNotReady there), else the Ready condition's.
    """
    status = policy.get("status") or {}
    state = status.get("state")
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    ready_condition = next((c for c in conditions if c.get("type") == "Ready"), None)
    error_condition = next((c for c in conditions if c.get("type") == "Error" and c.get("status") == "True"), None)
    shown = error_condition if error_condition is not None else ready_condition
    reasons = tuple(str(c.get("reason")) for c in (ready_condition, error_condition) if c is not None and c.get("reason"))
    ok = (
        state == "ready"
        and ready_condition is not None
        and ready_condition.get("status") == "True"
        and ready_condition.get("reason") == "Reconciled"
    )
    return PolicyReadiness(ok, state, (shown or {}).get("reason"), (shown or {}).get("message"), reasons)


# --- containerd config ----------------------------------------------------------------------

_CRI_PLUGINS = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")  # config version 3, version 2


@dataclass(frozen=True)
class ContainerdCri:
    """The CRI part of a containerd config.toml: CDI settings and the runtimes it names."""

    version: int
    enable_cdi: bool | None  # as written; None when the file does not set it
    cdi_spec_dirs: tuple[str, ...] | None
    runtimes: tuple[str, ...]

    @property
    def cdi_enabled(self) -> bool:
        """enable_cdi, else containerd's default: on in 2.x (config version 3), off in 1.7 (version 2)."""
        return self.enable_cdi if self.enable_cdi is not None else self.version >= 3


def parse_containerd_config(text: str) -> ContainerdCri | None:
    """A containerd config.toml (version 2 or 3, as RKE2 generates it); None when it is not TOML."""
    import tomllib

    try:
        data = tomllib.loads(text or "")
    except tomllib.TOMLDecodeError:
        return None
    plugins = data.get("plugins") if isinstance(data.get("plugins"), dict) else {}
    cri: dict[str, Any] = next((plugins[k] for k in _CRI_PLUGINS if isinstance(plugins.get(k), dict)), {})
    enable = cri.get("enable_cdi")
    dirs = cri.get("cdi_spec_dirs")
    runtimes = dig(cri, "containerd.runtimes", {}) or {}
    return ContainerdCri(
        version=int(data.get("version", 1)) if str(data.get("version", 1)).isdigit() else 1,
        enable_cdi=enable if isinstance(enable, bool) else None,
        cdi_spec_dirs=tuple(str(d) for d in dirs) if isinstance(dirs, list) else None,
        runtimes=tuple(sorted(runtimes)) if isinstance(runtimes, dict) else (),
    )


def helm_values(helmchart: Mapping[str, Any]) -> dict[str, Any]:
    """The HelmChart's spec.valuesContent parsed as YAML ({} when empty)."""
    content = (helmchart.get("spec") or {}).get("valuesContent") or ""
    values = yaml.safe_load(content) if content.strip() else {}
    return values if isinstance(values, dict) else {}


def dig(data: Mapping[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """data['a']['b'] for 'a.b', default when a step is missing."""
    current: Any = data
    for part in dotted.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    return current


_EXACT_CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def exact_chart_version(version: Any) -> bool:
    """Whether a chart version pins one release (no range, no wildcard, not 'latest')."""
    return isinstance(version, str) and bool(_EXACT_CHART_VERSION.match(version.strip()))


def nvml_probe_result(text: str) -> dict[str, Any]:
    """The JSON line the NVML probe prints (last line that parses as a JSON object)."""
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    raise ValueError(f"NVML probe printed no JSON result: {text[-300:]!r}")
