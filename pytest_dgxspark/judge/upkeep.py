"""What the host forecasts say, as pure functions of the upkeep probe's values: driver version skew, a pending
reboot that changes the kernel or driver, packages unattended-upgrades may replace, etcd snapshots and their off-node
copy (rules SPARK.* of beyond.yaml)."""
from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pytest_dgxspark.data.values import as_bool
from pytest_dgxspark.probes.upkeep import Package

# package name prefixes by what they are (the driver's user space and kernel module, CUDA, the kernel, the toolkit)
KINDS = {"NVIDIA driver": ("nvidia-", "libnvidia-"), "CUDA": ("cuda-",), "kernel": ("linux-image-",),
         "container toolkit": ("nvidia-container-toolkit",)}
_DRIVER_PACKAGE = re.compile(r"^(nvidia-(driver|dkms|utils|kernel-common|kernel-source|compute-utils)|libnvidia-(compute|"
                             r"common|gl|decode|encode|extra|cfg1|fbc1))-\d+")


def driver_versions(loaded: str | None, on_disk: str | None, libraries: Mapping[str, str],
                    packages: Iterable[Package]) -> dict[str, str]:
    """Where each driver version was seen: the loaded module, the module on disk, each libnvidia-ml file, each
    driver package (its upstream version)."""
    found: dict[str, str] = {}
    if loaded:
        found["loaded kernel module (/proc/driver/nvidia/version)"] = loaded
    if on_disk:
        found["kernel module on disk (modinfo nvidia)"] = on_disk
    for path, version in sorted(libraries.items()):
        found[path] = version
    for pkg in packages:
        if _DRIVER_PACKAGE.match(pkg.name):
            found[f"package {pkg.name} {pkg.version}" + (" (held)" if pkg.held else "")] = pkg.upstream
    return found


def skew(versions: Mapping[str, str]) -> bool:
    return len(set(versions.values())) > 1


def pending_reboot(files: Mapping[str, str], installed: Iterable[Package]) -> list[str]:
    """The packages a pending reboot is for that change the kernel or the NVIDIA driver (reboot-required.pkgs), or
    ["(unnamed)"] when the flag is set without a package list and a kernel or driver package is installed."""
    if "/var/run/reboot-required" not in files:
        return []
    names = [n.strip() for n in files.get("/var/run/reboot-required.pkgs", "").splitlines() if n.strip()]
    relevant = sorted({n for n in names if n.startswith(("linux-image-", "linux-modules-", "nvidia-", "libnvidia-"))})
    return relevant


def blacklisted(name: str, patterns: Iterable[str]) -> bool:
    """unattended-upgrades' Package-Blacklist: each entry a regular expression matched at the name's start."""
    for pattern in patterns:
        try:
            if re.match(pattern, name):
                return True
        except re.error:
            if name.startswith(pattern):
                return True
    return False


def unattended_enabled(apt: Mapping[str, Any]) -> bool:
    """Whether APT's periodic job runs unattended-upgrade (APT::Periodic::Unattended-Upgrade non-zero)."""
    value = str(apt.get("APT::Periodic::Unattended-Upgrade", "0")).strip()
    return value not in ("0", "", "false")


def unprotected(apt: Mapping[str, Any], installed: Iterable[Package]) -> dict[str, list[str]]:
    """kind -> installed packages of that kind unattended-upgrades may replace: neither held nor blacklisted."""
    patterns = list(apt.get("Unattended-Upgrade::Package-Blacklist") or [])
    found: dict[str, list[str]] = {}
    for pkg in installed:
        kind = next((k for k, prefixes in KINDS.items() if pkg.name.startswith(prefixes)), None)
        if kind and not pkg.held and not blacklisted(pkg.name, patterns):
            found.setdefault(kind, []).append(pkg.name)
    return found


DEFAULT_LONGEST_SHUTDOWN_DAYS = 30  # rke2/vars.yml forecast_longest_shutdown_days when the site declares none


def expiring(certificates: Mapping[str, Any], now: datetime.datetime,
             longest_shutdown_days: int) -> list[tuple[str, int, datetime.datetime]]:
    """(file, days left rounded up, its end) of the leaf certificates that expire within the longest shutdown, soonest
    first (CAs live ten years and are left out)."""
    found = []
    for path, cert in certificates.items():
        left = (cert.not_after - now).total_seconds() / 86400
        if not cert.ca and left < longest_shutdown_days:
            found.append((path, math.ceil(left), cert.not_after))
    return sorted(found, key=lambda item: (item[2], item[0]))


SNAPSHOT_RECENT_HOURS = 25  # RKE2 snapshots every 12 hours by default: two missed runs and an hour is not recent


def snapshot_problems(config: Mapping[str, Any], snapshots: Iterable[Any], now: datetime.datetime) -> list[str]:
    """Why the server's etcd snapshots will not save the cluster: disabled, none, the latest old or empty."""
    taken = list(snapshots)
    problems = []
    if str(config.get("etcd-disable-snapshots", "false")).lower() == "true":
        problems.append("etcd-disable-snapshots is true in config.yaml: RKE2 takes no scheduled snapshot")
    if not taken:
        problems.append("no etcd snapshot in the snapshot folder")
        return problems
    latest = taken[-1]
    age = (now - latest.taken).total_seconds() / 3600
    if age > SNAPSHOT_RECENT_HOURS:
        problems.append(f"the latest etcd snapshot {latest.name} is {age:.0f} hours old (scheduled every "
                        f"{config.get('etcd-snapshot-schedule-cron', '0 */12 * * *')!r}; not one in {SNAPSHOT_RECENT_HOURS} h)")
    if latest.size == 0:
        problems.append(f"the latest etcd snapshot {latest.name} is empty (0 bytes)")
    return problems


# RKE2's etcd-s3 keys that say where a snapshot's copy goes (rke2-docs reference/server_config.md "S3 etcd Snapshot
# Storage"): shown in evidence and messages. etcd-s3-access-key, etcd-s3-secret-key and etcd-s3-session-token are
# credentials: never read into a message or evidence (the redaction layer removes them from the config files' text).
ETCD_S3_SHOWN = ("etcd-s3", "etcd-s3-endpoint", "etcd-s3-bucket", "etcd-s3-region", "etcd-s3-folder",
                 "etcd-s3-config-secret")


def etcd_s3_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The effective config's etcd-s3 keys that name where the copy goes (none of its credentials)."""
    return {key: config[key] for key in ETCD_S3_SHOWN if key in config}


def offnode_copy_problems(config: Mapping[str, Any], site_vars: Mapping[str, Any], vars_file: str) -> list[str]:
    """Why no etcd snapshot leaves the server: RKE2 uploads each one when config.yaml (+ config.yaml.d) has etcd-s3
    true and names a bucket (etcd-s3-bucket, or etcd-s3-config-secret, a kube-system Secret holding the S3 settings);
    else the site may declare another off-node copy (etcd_snapshot_offnode_copy in rke2/vars.yml)."""
    enabled = as_bool(config.get("etcd-s3"))
    bucket = str(config.get("etcd-s3-bucket") or "").strip()
    secret = str(config.get("etcd-s3-config-secret") or "").strip()
    if enabled and (bucket or secret):
        return []
    declared = site_vars.get("etcd_snapshot_offnode_copy")
    if isinstance(declared, Mapping) and declared.get("destination"):
        return []
    if enabled:
        seen = "etcd-s3 is true but no etcd-s3-bucket (or etcd-s3-config-secret) names where RKE2 uploads"
    elif bucket:
        seen = f"etcd-s3-bucket is {bucket!r} but etcd-s3 is not true: RKE2 uploads nothing"
    else:
        seen = "config.yaml (+ config.yaml.d) has no etcd-s3"
    wanted = site_vars.get("rke2_etcd_s3")
    if isinstance(wanted, Mapping):
        where = wanted.get("bucket") or wanted.get("config_secret")
        return [f"no off-node copy of the etcd snapshots: {seen}, while {vars_file} declares rke2_etcd_s3 "
                f"({where!r}): the playbook's etcd-s3 settings are not in effect"]
    return [f"no off-node copy of the etcd snapshots: {seen}, and {vars_file} declares neither rke2_etcd_s3 nor "
            "etcd_snapshot_offnode_copy: a lost disk loses every snapshot with the cluster"]


# kubelet flags that keep memory back from pods (RKE2 passes them as config.yaml kubelet-arg "<flag>=<value>")
MEMORY_HEADROOM_FLAGS = ("system-reserved", "kube-reserved", "eviction-hard", "eviction-soft")
NVML_ERROR_NOT_SUPPORTED = 3


def unified_memory(nvml_result: Mapping[str, Any]) -> bool:
    """Whether the host's GPU shares the system's memory: NVML answers its memory info NOT_SUPPORTED (GB10)."""
    return any(d.get("memory_rc") == NVML_ERROR_NOT_SUPPORTED for d in nvml_result.get("devices") or [])


def memory_headroom(config: Mapping[str, Any]) -> dict[str, str]:
    """flag -> value of the kubelet-arg entries that reserve memory or evict on it (a memory= or memory.available)."""
    args = config.get("kubelet-arg") or []
    found: dict[str, str] = {}
    for arg in args if isinstance(args, list) else [args]:
        flag, _, value = str(arg).lstrip("-").partition("=")
        if flag in MEMORY_HEADROOM_FLAGS and "memory" in value:
            found[flag] = value
    return found


def gpu_pods_without_memory_limit(pods: Iterable[Mapping[str, Any]], node: str) -> list[str]:
    """namespace/name of the running or pending pods on `node` with a container that limits or requests
    nvidia.com/gpu and has no memory limit (the suite's own probe pods left out)."""
    found = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if spec.get("nodeName") != node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "pytest-dgxspark":
            continue
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
            if ("nvidia.com/gpu" in limits or "nvidia.com/gpu" in requests) and "memory" not in limits:
                found.append(f"{meta.get('namespace')}/{meta.get('name')}")
                break
    return sorted(found)
