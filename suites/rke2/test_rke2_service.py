"""RKE2 layer: the rke2-server or rke2-agent unit is enabled and active per the host's role (ADR 0001 §6-1)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.probes.rke2 import Rke2Host, parse_unit_show, unit_show
from pytest_dgxspark.targets.connections import HostTarget

NOT_INSTALLED = 127

# systemctl's words when PID 1 is not systemd (a container, a chroot): an observation, never unreadable output
NO_SYSTEMD = "System has not been booted with systemd as init system"

def unit_state(host_target: HostTarget, rke2_probe: Rke2Host, evidence: Any, unit: str) -> dict[str, str]:
    """systemd's own view of a unit (`systemctl show`): LoadState not-found means the unit does not exist."""
    shown = completed(evidence.answer(host_target, unit_show(unit), rke2_probe.unit(unit)), host_target)
    require(shown.rc != NOT_INSTALLED, (
        f"{host_target.where}: systemctl is not installed (exit 127): {host_target.name} is not a systemd host, so "
        f"RKE2's {unit}.service cannot run there"
    ))
    require(NO_SYSTEMD not in (shown.stderr or ""), (
        f"{host_target.where}: systemd is not running (systemctl: '{NO_SYSTEMD} (PID 1). Can't operate.'): "
        f"{host_target.name} was not booted with systemd, so RKE2's {unit}.service cannot run there"
    ))
    state = parse_unit_show(shown.stdout)
    if shown.rc != 0 or "LoadState" not in state:
        unreadable(f"{host_target.where}: `systemctl show {unit}.service` exited {shown.rc} without a LoadState: "
                   f"{(shown.stderr or shown.stdout).strip()[-300:]!r}")
    return state


@pytest.mark.rule("ADR-0001.rke2-service")
def test_rke2_unit_of_the_role_is_enabled_and_active(host_target: HostTarget, rke2_probe: Rke2Host, evidence: Any) -> None:
    role = host_target.spec.role
    unit = f"rke2-{role}"
    other = "rke2-agent" if role == "server" else "rke2-server"
    mine, theirs = unit_state(host_target, rke2_probe, evidence, unit), unit_state(host_target, rke2_probe, evidence, other)
    evidence.record("units", {f"{unit}.service": mine, f"{other}.service": theirs})
    require(mine.get("LoadState") != "not-found", (
        f"{unit}.service does not exist on {host_target.where}: RKE2 is not installed for role {role}; "
        f"run make rke2/{role}/install"
    ))
    active, sub = mine.get("ActiveState", ""), mine.get("SubState", "")
    require(active == "active", (
        f"{host_target.where}: {unit}.service is {active} ({sub}), not active (role {role}); see journalctl -u {unit}"
    ))
    enabled = mine.get("UnitFileState", "")
    require(enabled == "enabled", (
        f"{host_target.where}: {unit}.service is active but {enabled or 'has no unit file state'}, not enabled: it will "
        f"not come back after a reboot; run systemctl enable {unit}"
    ))
    require(theirs.get("ActiveState") != "active", (
        f"{host_target.where}: {other}.service is active too; a {role} runs only {unit}.service"
    ))
