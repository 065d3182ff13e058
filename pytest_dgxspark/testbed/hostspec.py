"""A simulated host's spec: the healthy DGX Spark defaults, a scenario's `nodes.<name>.host` merged over them, checked."""

from __future__ import annotations

import difflib
import os
from typing import Any

from pytest_dgxspark.testbed import captures, hardware
from pytest_dgxspark.testbed.scenario import deep_merge as merge

# The servers' etcd-s3 credentials (the rke2 role's config.yaml.d drop-in) and the testbed's made-up values of them.
ETCD_S3_CREDENTIALS_FILE = "/etc/rancher/rke2/config.yaml.d/50-etcd-s3-credentials.yaml"
TESTBED_ETCD_S3_CREDENTIALS = ("testbed-etcd-s3-access-0417", "testbed-etcd-s3-secret-9c2e71")

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
    # inline files laid over the tree; the servers' etcd-s3 credentials drop-in as the rke2 role writes it from its
    # vault variable (rke2_etcd_s3_credentials): the testbed's own values, which no bundle file may show
    "files": {ETCD_S3_CREDENTIALS_FILE: "etcd-s3-access-key: \"{0}\"\netcd-s3-secret-key: \"{1}\"\n".format(
        *TESTBED_ETCD_S3_CREDENTIALS)},
    "containerd_socket": True,
    "nri": True,
    # the CRI's default runtime in RKE2's generated containerd config (RKE2's own: runc; an nvidia one runs every pod
    # through the nvidia runtime, which honours NVIDIA_VISIBLE_DEVICES: testbed/containers.py)
    "containerd_default_runtime": "runc",
    # /etc/rancher/rke2/config.yaml as tirosh-home's provisioning writes it; node_labels/node_taints become
    # node-label/node-taint. The scenario's own data: never read from --site, so a changed site shows drift.
    "rke2_config": {"write-kubeconfig-mode": "0600", "node-name": "{hostname}", "cni": "cilium", "disable-kube-proxy": False,
                    # what sites/tirosh-home declares (rke2_etcd_s3): every etcd snapshot uploaded off the node
                    "etcd-s3": True, "etcd-s3-endpoint": "s3.tirosh.home.arpa:9000",
                    "etcd-s3-bucket": "tirosh-home-etcd-snapshots", "etcd-s3-folder": "gpu",
                    # what sites/tirosh-home declares (rke2_kubelet_args): GB10 memory headroom
                    "kubelet-arg": ["system-reserved=memory=4Gi", "kube-reserved=memory=2Gi",
                                    "eviction-hard=memory.available<2Gi"]},
    "node_labels": ["node.tirosh.ai/role=gpu", "node.tirosh.ai/workload=ai", "node.tirosh.ai/model=dgx-spark",
                    "nvidia.com/gpu.present=true"],
    "node_taints": [],
    "outputs": {},             # verbatim command results: "<command line>" -> text | {capture} | {stdout, stderr, rc}
    "journals": {},            # unit -> its journal (journalctl -u <unit>): text | {capture}
    "faults": {},              # SSH session faults: drop_after, freeze_after (sessions), latency_ms
    # DGX OS ships Docker (docker.service, dockerd) over a system containerd (containerd.service, /usr/bin/containerd,
    # /run/containerd/containerd.sock), the nvidia runtime registered by nvidia-ctk; versions as captured on a DGX
    # Spark (captures/dgx-spark-docker-version.txt). RKE2 never uses them.
    "docker": {"installed": True, "running": True, "version": "28.5.1", "containerd_version": "v1.7.28",
               "containerd_commit": "b98a3aace656320842a23f4a392a33f46af97866", "nvidia_runtime": True},
    "unreachable": False,
    "sysctl": {},              # kernel parameters `sysctl` answers (others: the machine's own /proc/sys)
    "users": [],               # the node's own system accounts, added to the machine's /etc/passwd and /etc/group
    # an RKE2 server's scheduled etcd snapshots (every 12 hours): how many, the newest's age, each one's size
    "etcd_snapshots": {"count": 5, "age_hours": 2, "size": 16384},
    "rke2_cert_days_left": 365,  # RKE2's certificate files: leaves expire in this many days (issued for 365)
    "packages": None,          # what dpkg-query lists ({name, version, want}); null: derived (hostfiles.default_packages)
}


# Keys a host spec may carry beyond DEFAULTS: cpu_vendor (NFD's, from the arch when unset); pods (the orchestrator's
# CRI snapshot).
EXTRA_KEYS = frozenset({"cpu_vendor", "pods"})


# What changes on an RKE2 agent node (rke2 `bundle/lib/systemd/system/rke2-agent.service`: `rke2 agent`).
AGENT_OVERRIDES: dict[str, Any] = {
    "services": {"rke2-server": {"active": "inactive", "enabled": "disabled"},
                 "rke2-agent": {"active": "active", "enabled": "enabled"}},
    "processes": ["/usr/local/bin/rke2 agent"] + DEFAULTS["processes"][1:],
    # etcd and its S3 upload are a server's (the rke2 role writes them on servers only)
    "rke2_config": {key: None for key in DEFAULTS["rke2_config"] if key.startswith("etcd-s3")},
    "files": {ETCD_S3_CREDENTIALS_FILE: None},
}


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
    if not isinstance(merged.get("sysctl"), dict):
        problems.append(f"sysctl must be a mapping of kernel parameters to values, got {merged.get('sysctl')!r}")
    snaps = merged.get("etcd_snapshots")
    if not (isinstance(snaps, dict) and set(snaps) <= {"count", "age_hours", "size"}
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in snaps.values())):
        problems.append(f"etcd_snapshots must be {{count, age_hours, size}} numbers >= 0, got {snaps!r}")
    days = merged.get("rke2_cert_days_left")
    if not isinstance(days, (int, float)) or isinstance(days, bool) or not -3650 <= days <= 3650:
        problems.append(f"rke2_cert_days_left must be a number of days (negative: expired), got {days!r}")
    packages = merged.get("packages")
    if packages is not None and not (isinstance(packages, list) and all(
            isinstance(p, dict) and set(p) <= {"name", "version", "want", "arch"} and {"name", "version"} <= set(p)
            and p.get("want", "install") in ("install", "hold", "deinstall") for p in packages)):
        problems.append("packages must be a list of {name, version, want: install|hold|deinstall} (dpkg-query's view), "
                        f"got {packages!r}")
    if not (isinstance(merged.get("users"), list) and all(isinstance(u, str) and u.isidentifier() for u in merged["users"])):
        problems.append(f"users must be a list of account names (e.g. [etcd]), got {merged.get('users')!r}")
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


# Counted per SSH session on the host (one per remote command, also over a shared master; a run opens ~3 per host).
FAULT_KEYS = {"drop_after": "SSH sessions after which the connection is dropped (sshd killed: later connects refused)",
              "freeze_after": "SSH sessions after which the host freezes (sessions hang, TCP stays up)",
              "latency_ms": "delay added to every SSH session, in milliseconds"}


def _fault_problems(faults: Any) -> list[str]:
    if not isinstance(faults, dict):
        return [f"faults must be a mapping, got {type(faults).__name__}"]
    problems = [f"faults.{k}: unknown; expected one of {sorted(FAULT_KEYS)}" for k in sorted(set(faults) - set(FAULT_KEYS))]
    for key in sorted(set(faults) & set(FAULT_KEYS)):
        if not isinstance(faults[key], int) or isinstance(faults[key], bool) or faults[key] < 0:
            problems.append(f"faults.{key} must be a whole number >= 0 ({FAULT_KEYS[key]}), got {faults[key]!r}")
    return problems
