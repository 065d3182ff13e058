"""RKE2 layer: the rke2-server or rke2-agent unit is enabled and active per the host's role (ADR 0001 §6-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.connections import HostTarget
from pytest_dgxspark.checking import require


@pytest.mark.rule("ADR-0001.rke2-service")
def test_rke2_unit_of_the_role_is_enabled_and_active(host_target: HostTarget, evidence: Any) -> None:
    unit = f"rke2-{host_target.spec.role}"
    other = "rke2-agent" if host_target.spec.role == "server" else "rke2-server"
    evidence.command(host_target, f"systemctl show -p ActiveState,SubState,UnitFileState,ActiveEnterTimestamp {unit}")
    service = host_target.host.service(unit)
    enabled, running = service.is_enabled, service.is_running
    other_running = host_target.host.service(other).is_running
    evidence.record("units", {unit: {"enabled": enabled, "active": running}, other: {"active": other_running}})
    require(
        running,
        f"{host_target.where}: {unit} is not active (role {host_target.spec.role}); see journalctl -u {unit}",
    )
    require(enabled, f"{host_target.where}: {unit} is active but not enabled: it will not come back after a reboot")
    require(
        not other_running,
        f"{host_target.where}: {other} is active too; a {host_target.spec.role} runs only {unit}",
    )
