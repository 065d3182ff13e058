"""RKE2 layer (informational): the hardening options the RKE2 config sets and the running API server uses, recorded
for the audit (ADR 0001 §6-2). Nothing is judged: the rule is `recorded`, never `passed`."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_dgxspark.checking import completed, unreadable
from pytest_dgxspark.probes.rke2 import Rke2Host
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
def test_hardening_options_are_recorded(host_target: HostTarget, rke2_probe: Rke2Host, rke2_config: Any,
                                        evidence: Any) -> None:
    if rke2_config.error is not None:
        unreadable(f"{rke2_config.error}: the hardening baseline cannot be recorded")
    config = rke2_config.merged
    baseline: dict[str, Any] = {key: config.get(key) for key in HARDENING_KEYS}
    baseline["cis_profile"] = config.get("profile") or "none (RKE2 runs without a CIS profile)"
    psa = completed(rke2_probe.pod_security, host_target)
    baseline["pod_security_config"] = psa.stdout.strip() or None
    if host_target.spec.role == "server":
        proc = completed(rke2_probe.apiserver, host_target)
        baseline["kube-apiserver (running) hardening flags"] = (
            apiserver_flags(rke2_probe.apiserver_cmdline) if proc.rc == 0 else "no kube-apiserver process found"
        )
    evidence.record("hardening baseline", baseline)
