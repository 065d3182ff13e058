"""Probe of the container runtime: the kubelet's runtime endpoint, RKE2's containerd and CRI, Docker beside them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pytest_dgxspark.data.values import dig, version_tuple
from pytest_dgxspark.data.yamlload import loads
from pytest_dgxspark.probes import Command, Reading, Settings, quoted, split_cmdline

KUBELET_CMDLINE = "pid=$(pgrep -o -x kubelet) && cat /proc/$pid/cmdline"
KUBELET_CONFIG_DIR = "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d"  # RKE2's --config-dir when the flag is absent
RKE2_SOCKET_PATH = "/run/k3s/containerd/containerd.sock"
RKE2_SOCKET = f"test -S {RKE2_SOCKET_PATH}"
CRICTL = f"/var/lib/rancher/rke2/bin/crictl --runtime-endpoint unix://{RKE2_SOCKET_PATH} version"
CRICTL_TIMEOUT_S = 30
NAME = "containerd"
RKE2_CONTAINERD_CONFIG_FILE = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"
RKE2_CONTAINERD_CONFIG = f"cat {RKE2_CONTAINERD_CONFIG_FILE}"
NRI_SOCKET_PATH = "/var/run/nri/nri.sock"  # containerd 2.x serves it when NRI is enabled (the default)
NRI_SOCKET = f"test -S {NRI_SOCKET_PATH}"
CDI_SPECS = ("grep -l -E '\"?kind\"?[[:space:]]*:[[:space:]]*\"?[A-Za-z0-9.-]*nvidia\\.com/gpu' "
             "/var/run/cdi/*.yaml /var/run/cdi/*.json /etc/cdi/*.yaml /etc/cdi/*.json 2>/dev/null; true")
DOCKER_DAEMON_JSON = "cat /etc/docker/daemon.json 2>/dev/null; true"
CRI_DOCKERD = "pgrep -a -x cri-dockerd; true"
DOCKER = "systemctl is-active docker 2>/dev/null; command -v docker; true"
SYSTEM_CONTAINERD = "ls -l /usr/bin/containerd /usr/local/bin/containerd /run/containerd/containerd.sock 2>/dev/null; true"


def cat(path: str) -> str:
    """The command that reads one file the kubelet names."""
    return quoted("cat {}", path)


def kubelet_dropins(config_dir: str) -> str:
    """The command that lists a kubelet --config-dir's drop-ins in the kubelet's (lexical) order."""
    return quoted("ls -1 {}/*.conf 2>/dev/null | LC_ALL=C sort; true", config_dir)


def kubelet_flag(cmdline: str, name: str) -> str | None:
    """`--name=value` or `--name value` of a kubelet command line."""
    match = re.search(rf"--{name}(?:=|\s+)(\S+)", cmdline)
    return match.group(1).strip("'\"") if match else None


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    found = [Command(KUBELET_CMDLINE), Command(kubelet_dropins(KUBELET_CONFIG_DIR)), Command(RKE2_SOCKET),
             Command(CRICTL, CRICTL_TIMEOUT_S), Command(RKE2_CONTAINERD_CONFIG), Command(DOCKER_DAEMON_JSON),
             Command(CRI_DOCKERD), Command(DOCKER), Command(SYSTEM_CONTAINERD)]
    if spec.gpu:
        found += [Command(NRI_SOCKET), Command(CDI_SPECS)]
    return tuple(found)


def followups(spec: Any, settings: Settings, answers: Mapping[str, Any]) -> tuple[Command, ...]:
    """The kubelet's --config file, its --config-dir listing, and each drop-in that listing names."""
    proc = answers.get(KUBELET_CMDLINE)
    cmdline = split_cmdline(proc.stdout) if proc is not None and proc.rc == 0 else ""
    found = [Command(cat(path)) for path in (kubelet_flag(cmdline, "config"),) if path]
    listing_cmd = kubelet_dropins(kubelet_flag(cmdline, "config-dir") or KUBELET_CONFIG_DIR)
    listing = answers.get(listing_cmd)
    if listing is None:
        found.append(Command(listing_cmd))
    elif listing.rc == 0:
        found += [Command(cat(line.strip())) for line in listing.stdout.splitlines() if line.strip()]
    return tuple(found)


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
            data = loads(text, "kubelet config")
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("containerRuntimeEndpoint"):
            endpoint = str(data["containerRuntimeEndpoint"])
    return endpoint


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


# kubelet --container-runtime-endpoint default (Kubernetes >= 1.27): what a kubelet uses when nothing sets it
KUBELET_DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"


@dataclass(frozen=True)
class KubeletInfo:
    """The running kubelet's command line, its config files and the runtime endpoint they give."""

    running: bool
    cmdline: str
    config_files: tuple[str, ...]
    endpoint: str | None

    @property
    def effective_endpoint(self) -> str:
        """The endpoint the running kubelet dials: its flag or config, else the kubelet's own default."""
        return self.endpoint or KUBELET_DEFAULT_ENDPOINT

    def require_running(self, where: str) -> None:
        """Without a kubelet process its runtime endpoint cannot be observed: that is no finding, the check errors."""
        from pytest_dgxspark.checking import unreadable

        if not self.running:
            unreadable(f"{where}: no kubelet process (pgrep -x kubelet), so the runtime endpoint the kubelet uses "
                       "cannot be observed; runtime-rke2-containerd judges the missing kubelet")


def read_kubelet(target: Any) -> KubeletInfo:
    """The kubelet of a host from its process and config files (effective, not rendered config); a command that did
    not complete ends the check as `error` (checking.completed)."""
    from pytest_dgxspark.checking import completed

    proc = completed(target.cached(KUBELET_CMDLINE), target)
    cmdline = split_cmdline(proc.stdout) if proc.rc == 0 else ""
    files = [f for f in (kubelet_flag(cmdline, "config"),) if f]
    config_dir = kubelet_flag(cmdline, "config-dir") or KUBELET_CONFIG_DIR
    texts = [completed(target.cached(cat(path)), target).stdout for path in files]
    listing = completed(target.cached(kubelet_dropins(config_dir)), target)
    dropins = [line.strip() for line in listing.stdout.splitlines() if line.strip()]
    texts += [target.cached(cat(path)).stdout for path in dropins]
    return KubeletInfo(proc.rc == 0 and bool(cmdline), cmdline, tuple(files + dropins), kubelet_runtime_endpoint(texts, cmdline))


class Runtime(Reading):
    """The container runtime of one host: the kubelet's wiring, RKE2's containerd and CRI, Docker beside them."""

    @cached_property
    def kubelet(self) -> KubeletInfo:
        """The running kubelet, read from its process and the config files it names (effective, not rendered)."""
        return read_kubelet(self.target)

    @property
    def rke2_socket(self) -> Any:
        return self.answer(RKE2_SOCKET)

    @property
    def crictl(self) -> Any:
        return self.answer(CRICTL, CRICTL_TIMEOUT_S)

    @property
    def containerd_config(self) -> Any:
        return self.answer(RKE2_CONTAINERD_CONFIG)

    @cached_property
    def cri(self) -> ContainerdCri | None:
        """RKE2's generated config.toml as CRI settings; None when it is not TOML."""
        return parse_containerd_config(self.containerd_config.stdout)

    @property
    def nri_socket(self) -> Any:
        return self.answer(NRI_SOCKET)

    @property
    def cdi_specs(self) -> Any:
        return self.answer(CDI_SPECS)

    @property
    def docker_daemon_json(self) -> Any:
        return self.answer(DOCKER_DAEMON_JSON)

    @property
    def cri_dockerd(self) -> Any:
        return self.answer(CRI_DOCKERD)

    @property
    def docker(self) -> Any:
        return self.answer(DOCKER)

    @property
    def system_containerd(self) -> Any:
        return self.answer(SYSTEM_CONTAINERD)


def read(target: Any, settings: Settings) -> Runtime:
    """The container runtime probe of one host."""
    return Runtime(target, settings)
