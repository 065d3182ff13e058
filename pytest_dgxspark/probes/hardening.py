"""Probe of a host's hardening: the CIS kernel parameters (running and persisted), the etcd account, and the audit
policy and Pod Security files the provisioning writes (hardening.py says what they must be)."""

from __future__ import annotations

from typing import Any

from pytest_dgxspark.probes import Command, Reading, Settings
from pytest_dgxspark.site.hardening import (
    AUDIT_POLICY_PATH,
    CIS_SYSCTLS,
    PSA_CONFIG_PATH,
    etcd_account,
    parse_sysctl,
    persisted_sysctls,
)

NAME = "hardening"

# -e: a key this kernel lacks is left out (no error exit); `; true`: sysctl's own status says nothing here
SYSCTL = "sysctl -e " + " ".join(CIS_SYSCTLS) + "; true"
_KEYS = "|".join(k.replace(".", r"\.") for k in CIS_SYSCTLS)
SYSCTL_FILES = (f"grep -H -E '^[[:space:]]*({_KEYS})[[:space:]]*=' /etc/sysctl.d/*.conf /run/sysctl.d/*.conf "
                "/usr/local/lib/sysctl.d/*.conf /usr/lib/sysctl.d/*.conf /etc/sysctl.conf 2>/dev/null; true")
ETCD_ACCOUNT = "grep -H '^etcd:' /etc/passwd /etc/group; true"
AUDIT_POLICY = f"cat {AUDIT_POLICY_PATH}"  # exit 1: no such file
POD_SECURITY = f"cat {PSA_CONFIG_PATH}"


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    found = [Command(SYSCTL), Command(SYSCTL_FILES)]
    if spec.role == "server":
        found += [Command(ETCD_ACCOUNT), Command(AUDIT_POLICY), Command(POD_SECURITY)]
    return tuple(found)


class Hardening(Reading):
    """One host's hardening facts, parsed; the raw answers stay readable for completed() and the evidence."""

    @property
    def sysctl(self) -> Any:
        return self.answer(SYSCTL)

    @property
    def sysctl_files(self) -> Any:
        return self.answer(SYSCTL_FILES)

    @property
    def etcd(self) -> Any:
        return self.answer(ETCD_ACCOUNT)

    @property
    def audit_policy(self) -> Any:
        return self.answer(AUDIT_POLICY)

    @property
    def pod_security(self) -> Any:
        return self.answer(POD_SECURITY)

    def sysctls(self) -> dict[str, str]:
        return parse_sysctl(self.sysctl.stdout)

    def persisted(self) -> dict[str, tuple[str, str]]:
        return persisted_sysctls(self.sysctl_files.stdout)

    def etcd_account(self) -> frozenset[str]:
        return frozenset(etcd_account(self.etcd.stdout))


def read(target: Any, settings: Settings) -> Hardening:
    """The hardening probe of one host."""
    return Hardening(target, settings)
