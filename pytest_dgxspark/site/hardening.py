"""The hardening a site declares in rke2/vars.yml, RKE2's CIS host prerequisites, and how a host's state meets them.

The contract of ADR-0001.hardening-baseline and of the provisioning that applies it (roles/rke2): what is declared is
judged on every host; where nothing is declared the rule only records (rules.JUDGED_WHEN). Sources: RKE2's hardening
guide (rke2-docs security/hardening_guide.md), secrets encryption (security/secrets_encryption.md), pod security
standards (security/pod_security_standards.md), as summarised in shared/reference/rke2-provisioning-facts.md §3.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_yaml

# Where the provisioning writes the site's policy files on a server and what config.yaml points RKE2 at (RKE2's own
# default paths: with profile: cis RKE2 writes a default audit policy and Pod Security file there when none exists).
AUDIT_POLICY_PATH = "/etc/rancher/rke2/audit-policy.yaml"
PSA_CONFIG_PATH = "/etc/rancher/rke2/rke2-pss.yaml"
# The kernel parameters RKE2 checks with a CIS profile (and the kubelet's protect-kernel-defaults): RKE2's own
# bundle/share/rke2/rke2-cis-sysctl.conf, which the hardening guide copies to /etc/sysctl.d/60-rke2-cis.conf.
CIS_SYSCTLS = {"vm.panic_on_oom": "0", "vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"}
CIS_SYSCTL_FILE = "/etc/sysctl.d/60-rke2-cis.conf"
# The site's policy files must be these kinds (the apiserver refuses anything else at start).
_POLICY_KINDS = {"rke2_audit_policy": ("audit.k8s.io/v1", "Policy"),
                 "rke2_pod_security_admission_config": ("apiserver.config.k8s.io/v1", "AdmissionConfiguration")}


@dataclass(frozen=True)
class Declared:
    """What rke2/vars.yml declares (None: not declared); policies are the parsed site files, `*_source` their path."""

    profile: str | None = None
    secrets_encryption: bool | None = None
    audit_policy: Any = None
    audit_policy_source: str | None = None
    pod_security: Any = None
    pod_security_source: str | None = None

    @property
    def anything(self) -> bool:
        return any(v is not None for v in (self.profile, self.secrets_encryption, self.audit_policy, self.pod_security))

    def as_dict(self) -> dict[str, Any]:
        return {"rke2_profile": self.profile, "rke2_secrets_encryption": self.secrets_encryption,
                "rke2_audit_policy": self.audit_policy_source, "rke2_pod_security_admission_config": self.pod_security_source}


def policy_file(root: Path, value: str) -> Path:
    """The site file a policy key names: relative to sites/<site>/rke2/ (site_problems holds it inside, no symlink)."""
    return Path(root) / "rke2" / value


def site_problems(root: Path, vars_: Mapping[str, Any]) -> list[str]:
    """Every problem of the policy files the vars name (missing, outside rke2/, a symlink, wrong kind), by file and key."""
    problems = []
    where = Path(root) / "rke2" / "vars.yml"
    for key, (api, kind) in _POLICY_KINDS.items():
        value = vars_.get(key)
        if value is None:
            continue
        path = policy_file(root, str(value))
        rke2 = (Path(root) / "rke2").resolve()
        if Path(str(value)).is_absolute() or ".." in Path(str(value)).parts:
            problems.append(f"{where}: {key}: expected a file name relative to {Path(root) / 'rke2'}, got {value!r}")
            continue
        if path.is_symlink() or not path.is_file() or rke2 not in path.resolve().parents:
            problems.append(f"{where}: {key}: {path} must be a regular file of the site (not a symlink), "
                            f"holding the {kind} the servers get")
            continue
        try:
            data = load_yaml(path)
        except ValueError as exc:
            problems.append(f"{where}: {key}: {exc}")
            continue
        if not isinstance(data, dict) or (data.get("apiVersion"), data.get("kind")) != (api, kind):
            got = (data.get("apiVersion"), data.get("kind")) if isinstance(data, dict) else type(data).__name__
            problems.append(f"{where}: {key}: {path} must be apiVersion {api} kind {kind}, got {got}")
    return problems


def declared(site: Any) -> Declared:
    """What the site declares (its files were checked at load: site.load_site calls site_problems)."""
    vars_ = site.vars or {}
    found: dict[str, Any] = {}
    for key, attr in (("rke2_audit_policy", "audit_policy"), ("rke2_pod_security_admission_config", "pod_security")):
        if vars_.get(key) is not None:
            path = policy_file(site.root, str(vars_[key]))
            found[attr], found[f"{attr}_source"] = load_yaml(path), f"rke2/{vars_[key]}"
    return Declared(profile=vars_.get("rke2_profile"), secrets_encryption=vars_.get("rke2_secrets_encryption"), **found)


def parse_sysctl(text: str) -> dict[str, str]:
    """`sysctl k1 k2 ...` ("key = value" lines) as a mapping; lines that are not a value (errors) are left out."""
    found = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and not key.startswith("sysctl:"):
            found[key.strip()] = value.strip()
    return found


_SYSCTL_DIRS = ("/etc/sysctl.d/", "/run/sysctl.d/", "/usr/local/lib/sysctl.d/", "/usr/lib/sysctl.d/")


def persisted_sysctls(grep_output: str) -> dict[str, tuple[str, str]]:
    """key -> (value, file) as systemd-sysctl applies them at boot: *.conf of the sysctl.d dirs by file name (a name
    in /etc shadows the same name below it), then /etc/sysctl.conf; the last assignment wins."""
    lines: dict[str, list[tuple[str, str]]] = {}
    for line in (grep_output or "").splitlines():
        path, sep, assignment = line.partition(":")
        key, eq, value = assignment.partition("=")
        if sep and eq:
            lines.setdefault(path, []).append((key.strip(), value.strip()))
    chosen: dict[str, tuple[int, str]] = {}  # file name -> (rank of its dir, path): /etc wins over /usr/lib
    for path in lines:
        rank = next((i for i, d in enumerate(_SYSCTL_DIRS) if path.startswith(d)), None)
        name = Path(path).name
        if rank is not None and (name not in chosen or rank < chosen[name][0]):
            chosen[name] = (rank, path)
    order = [chosen[name][1] for name in sorted(chosen)] + [p for p in lines if p == "/etc/sysctl.conf"]
    found: dict[str, tuple[str, str]] = {}
    for path in order:
        for key, value in lines[path]:
            found[key] = (value, path)
    return found


def etcd_account(grep_output: str) -> set[str]:
    """Which of /etc/passwd and /etc/group hold an `etcd` entry (from `grep -H '^etcd:' /etc/passwd /etc/group`)."""
    return {line.split(":", 1)[0] for line in (grep_output or "").splitlines() if line.split(":", 2)[1:2] == ["etcd"]}


def flag(cmdline: str, name: str) -> str | None:
    """The last value of `--name=value` (or `--name value`) on a command line: the one the program uses."""
    words = (cmdline or "").split()
    value = None
    for i, word in enumerate(words):
        if word.startswith(f"--{name}="):
            value = word.split("=", 1)[1]
        elif word == f"--{name}" and i + 1 < len(words):
            value = words[i + 1]
    return value


@dataclass(frozen=True)
class HostState:
    """What one host shows of its hardening (probes/hardening.py, probes/rke2.py)."""

    role: str
    config: Mapping[str, Any]
    sysctls: Mapping[str, str]
    persisted: Mapping[str, tuple[str, str]]
    etcd_account: frozenset[str]
    apiserver: str | None  # the running kube-apiserver's command line; None: no such process (or not a server)
    audit_policy: Any  # parsed host file, or None when missing
    pod_security: Any


def _as_bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in ("true", "1", "yes")


def problems(want: Declared, host: HostState) -> list[str]:
    """What of `want` is not in effect on `host`, each naming the key, what was found and where."""
    found: list[str] = []
    server = host.role == "server"
    if want.profile is not None:
        profile = host.config.get("profile")
        if (profile or "") != want.profile:
            found.append(f"profile is {profile!r} in config.yaml (+ config.yaml.d), vars declare rke2_profile: {want.profile!r}")
        if want.profile == "cis":
            if _as_bool(host.config.get("protect-kernel-defaults"), True) is False:
                found.append("protect-kernel-defaults is false: RKE2 refuses to start with profile: cis")
            for key, need in CIS_SYSCTLS.items():
                if host.sysctls.get(key) != need:
                    found.append(f"kernel parameter {key} is {host.sysctls.get(key, 'unreadable')}, the CIS profile needs {need}")
                value, path = host.persisted.get(key, (None, None))
                if value != need:
                    found.append(f"{key} = {need} is not persisted (boot applies {value!r} from {path}); "
                                 f"copy rke2-cis-sysctl.conf to {CIS_SYSCTL_FILE}" if value is not None else
                                 f"{key} = {need} is in no sysctl.d file, so a reboot loses it and RKE2 then refuses "
                                 f"to start; copy rke2-cis-sysctl.conf to {CIS_SYSCTL_FILE}")
            if server:
                missing = sorted({"/etc/passwd", "/etc/group"} - set(host.etcd_account))
                if missing:
                    found.append(f"no etcd user/group in {' and '.join(missing)} (the CIS profile runs etcd as etcd:etcd; "
                                 "useradd -r -c 'etcd user' -s /sbin/nologin -M etcd -U)")
    if server and (want.secrets_encryption is not None or want.audit_policy is not None or want.pod_security is not None) \
            and host.apiserver is None:
        found.append("no kube-apiserver process runs on this server, so no declared apiserver setting is in effect")
    if server and want.secrets_encryption is not None:
        configured = _as_bool(host.config.get("secrets-encryption"), True)
        if configured != want.secrets_encryption:
            found.append(f"secrets-encryption is {configured} in config.yaml, vars declare {want.secrets_encryption}")
        if host.apiserver is not None and (flag(host.apiserver, "encryption-provider-config") is not None) != want.secrets_encryption:
            found.append("the running kube-apiserver " + ("has no --encryption-provider-config: Secrets are stored in "
                         "plain text in etcd" if want.secrets_encryption else "still encrypts Secrets (--encryption-"
                         "provider-config is set)"))
    for attr, key, path, apiflag, config_key in (
            ("audit_policy", "rke2_audit_policy", AUDIT_POLICY_PATH, "audit-policy-file", "audit-policy-file"),
            ("pod_security", "rke2_pod_security_admission_config", PSA_CONFIG_PATH, "admission-control-config-file",
             "pod-security-admission-config-file")):
        wanted = getattr(want, attr)
        if not server or wanted is None:
            continue
        configured = host.config.get(config_key)
        if configured is not None and configured != path:
            found.append(f"{config_key} is {configured!r} in config.yaml, the provisioning writes {key} to {path}")
        on_host = getattr(host, attr)
        if on_host is None:
            found.append(f"{path} is missing; vars declare {key}: {getattr(want, attr + '_source')}")
        elif on_host != wanted:
            found.append(f"{path} differs from the site's {getattr(want, attr + '_source')} ({_summary(attr, on_host)} "
                         f"in effect, the site declares {_summary(attr, wanted)})")
        if host.apiserver is not None and flag(host.apiserver, apiflag) != path:
            found.append(f"the running kube-apiserver has --{apiflag}={flag(host.apiserver, apiflag)}, not {path}")
    return found


def _summary(attr: str, policy: Any) -> str:
    """A policy in a few words: an audit Policy's rule levels, a PodSecurity configuration's enforce level."""
    if not isinstance(policy, dict):
        return repr(policy)[:80]
    if attr == "audit_policy":
        levels = [str(r.get("level")) for r in policy.get("rules") or [] if isinstance(r, dict)]
        return f"rules at level {', '.join(levels) or 'none'}"
    for plugin in policy.get("plugins") or []:
        if isinstance(plugin, dict) and plugin.get("name") == "PodSecurity":
            config = plugin.get("configuration") or {}
            defaults = config.get("defaults") or {}
            exempt = (config.get("exemptions") or {}).get("namespaces") or []
            return f"enforce {defaults.get('enforce')!r}, exempt namespaces {exempt}"
    return "no PodSecurity plugin"
