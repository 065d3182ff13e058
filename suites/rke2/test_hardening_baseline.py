"""RKE2 layer: the hardening the site declares in rke2/vars.yml is in effect on every host (ADR 0001 §6-2); where the
site declares none, the options the RKE2 config sets and the running API server uses are recorded (`recorded`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_dgxspark.checking import command_of, completed, require, unreadable
from pytest_dgxspark.data.yamlload import loads
from pytest_dgxspark.probes.hardening import Hardening
from pytest_dgxspark.probes.rke2 import Rke2Host
from pytest_dgxspark.site.hardening import HostState, declared, problems
from pytest_dgxspark.targets.connections import HostTarget

HARDENING_KEYS = (
    "profile", "secrets-encryption", "selinux", "protect-kernel-defaults", "pod-security-admission-config-file",
    "kube-apiserver-arg", "kubelet-arg", "audit-policy-file", "write-kubeconfig-mode",
)
# kube-apiserver flags the RKE2 CIS hardening guide sets or checks
APISERVER_FLAGS = ("anonymous-auth", "encryption-provider-config", "audit-log-path", "audit-policy-file",
                   "admission-control-config-file", "enable-admission-plugins", "profiling", "kubelet-certificate-authority",
                   "tls-min-version", "tls-cipher-suites", "service-account-lookup")


def apiserver_flags(cmdline: str) -> dict[str, str]:
    """The hardening flags of a kube-apiserver command line (`--flag=value` or `--flag value`)."""
    found = {}
    for name in APISERVER_FLAGS:
        match = re.search(rf"--{name}(?:=|\s+)(\S+)", cmdline)
        if match:
            found[name] = match.group(1)
    return found


@pytest.mark.rule("ADR-0001.hardening-baseline")
def test_declared_hardening_is_in_effect(host_target: HostTarget, rke2_probe: Rke2Host, hardening_probe: Hardening,
                                         rke2_config: Any, site: Any, evidence: Any) -> None:
    if rke2_config.error is not None:
        unreadable(f"{rke2_config.error}: the hardening baseline cannot be read")
    config = rke2_config.merged
    baseline: dict[str, Any] = {key: config.get(key) for key in HARDENING_KEYS}
    baseline["cis_profile"] = config.get("profile") or "none (RKE2 runs without a CIS profile)"
    psa = completed(rke2_probe.pod_security, host_target)
    baseline["pod_security_config"] = psa.stdout.strip() or None
    server = host_target.spec.role == "server"
    apiserver = None
    if server:
        proc = completed(rke2_probe.apiserver, host_target)
        apiserver = rke2_probe.apiserver_cmdline if proc.rc == 0 else None
        baseline["kube-apiserver (running) hardening flags"] = (
            apiserver_flags(apiserver) if apiserver is not None else "no kube-apiserver process found")
    want = declared(site)
    if want.anything:
        completed(hardening_probe.sysctl, host_target)
        completed(hardening_probe.sysctl_files, host_target)
        if server:
            completed(hardening_probe.etcd, host_target)
        state = HostState(
            role=host_target.spec.role, config=config, sysctls=hardening_probe.sysctls(),
            persisted=hardening_probe.persisted(),
            etcd_account=hardening_probe.etcd_account() if server else frozenset(), apiserver=apiserver,
            audit_policy=_policy(hardening_probe.audit_policy, host_target) if server else None,
            pod_security=_policy(hardening_probe.pod_security, host_target) if server else None)
        baseline["kernel parameters (running)"] = dict(state.sysctls)
        baseline["kernel parameters (applied at boot)"] = {k: f"{v} ({f})" for k, (v, f) in state.persisted.items()}
        if server:
            baseline["etcd account in"] = sorted(state.etcd_account)
        found = problems(want, state)
        evidence.record("declared hardening", want.as_dict())
        evidence.record("hardening baseline", baseline)
        require(found == [], f"{host_target.where}: the hardening {site.root}/rke2/vars.yml declares is not in effect: "
                + "; ".join(found))
    else:
        evidence.record("hardening baseline", baseline)


def _policy(result: Any, target: HostTarget) -> Any:
    """A policy file read from the host: its parsed YAML, None when absent; YAML that does not parse cannot be judged."""
    completed(result, target)
    if result.rc != 0:
        return None
    try:
        return loads(result.stdout, f"{target.where}: {command_of(result).removeprefix('cat ')}")
    except ValueError as exc:
        unreadable(str(exc))
