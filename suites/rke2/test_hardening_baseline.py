"""RKE2 layer (informational): the hardening options the RKE2 config sets, recorded for the audit (ADR 0001 §6-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.checking import require

HARDENING_KEYS = (
    "profile", "secrets-encryption", "selinux", "protect-kernel-defaults", "pod-security-admission-config-file",
    "kube-apiserver-arg", "kubelet-arg", "audit-policy-file", "write-kubeconfig-mode",
)


@pytest.mark.rule("ADR-0001.hardening-baseline")
def test_hardening_options_are_recorded(host_target: HostTarget, rke2_config: Any, evidence: Any) -> None:
    require(rke2_config.error is None, rke2_config.error)
    config = rke2_config.merged
    baseline = {key: config.get(key) for key in HARDENING_KEYS}
    baseline["cis_profile"] = config.get("profile") or "none"
    psa = host_target.run("cat /etc/rancher/rke2/rke2-pss.yaml 2>/dev/null || true")
    baseline["pod_security_config"] = psa.stdout.strip() or None
    evidence.record("hardening baseline", baseline)
