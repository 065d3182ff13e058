"""Host forecasts (catalog/beyond.yaml): what breaks at the next GPU restart, reboot or unattended upgrade though
everything passes today. Advisory: they never fail the run (unless the site sets forecast: enforce)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed
from pytest_dgxspark.judge.upkeep import driver_versions, pending_reboot, skew, unattended_enabled, unprotected
from pytest_dgxspark.probes.nvidia_driver import Driver
from pytest_dgxspark.probes.upkeep import Upkeep, module_on_disk
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.gpu_host
@pytest.mark.forecast("SPARK.driver-version-skew")
def test_the_driver_is_one_version_in_memory_on_disk_and_in_its_packages(
        host_target: HostTarget, nvidia_driver_probe: Driver, upkeep_probe: Upkeep, evidence: Any, forecast: Any) -> None:
    completed(nvidia_driver_probe.version_file, host_target)
    completed(nvidia_driver_probe.host_driver, host_target)
    completed(upkeep_probe.nvml_files, host_target)
    completed(upkeep_probe.packages, host_target)
    loaded = nvidia_driver_probe.version.version if nvidia_driver_probe.version else None
    versions = driver_versions(loaded, module_on_disk(nvidia_driver_probe.host_driver.stdout),
                               upkeep_probe.nvml_versions, upkeep_probe.installed)
    evidence.record("driver versions", versions)
    if skew(versions):
        seen = "; ".join(f"{where}: {version}" for where, version in versions.items())
        forecast.advise(f"{host_target.where}: the driver is not one version ({seen}): the next start of a GPU process "
                        "or the next boot meets \"Failed to initialize NVML: Driver/library version mismatch\"",
                        target=f"ssh:{host_target.spec.name}", due="at the next GPU pod restart or reboot")


@pytest.mark.forecast("SPARK.reboot-pending")
def test_no_reboot_is_pending_for_a_kernel_or_nvidia_package(host_target: HostTarget, upkeep_probe: Upkeep,
                                                               evidence: Any, forecast: Any) -> None:
    completed(upkeep_probe.reboot, host_target)
    files = upkeep_probe.reboot_files
    evidence.record("reboot-required", files or "no /var/run/reboot-required")
    pending = pending_reboot(files, upkeep_probe.installed)
    if pending:
        forecast.advise(f"{host_target.where}: a reboot is pending for {', '.join(pending)} "
                        "(/var/run/reboot-required.pkgs): the next boot runs a kernel or driver this run did not verify",
                        target=f"ssh:{host_target.spec.name}", due="at the next reboot")


@pytest.mark.forecast("SPARK.unattended-upgrades-unheld")
def test_unattended_upgrades_cannot_replace_the_gpu_stack(host_target: HostTarget, upkeep_probe: Upkeep, evidence: Any,
                                                          forecast: Any) -> None:
    completed(upkeep_probe.apt_config, host_target)
    completed(upkeep_probe.packages, host_target)
    apt = upkeep_probe.apt
    enabled = unattended_enabled(apt)
    exposed = unprotected(apt, upkeep_probe.installed) if enabled else {}
    evidence.record("unattended-upgrades", {
        "APT::Periodic::Unattended-Upgrade": apt.get("APT::Periodic::Unattended-Upgrade"),
        "Unattended-Upgrade::Package-Blacklist": apt.get("Unattended-Upgrade::Package-Blacklist") or [],
        "held": sorted(p.name for p in upkeep_probe.installed if p.held), "exposed": exposed})
    if exposed:
        listed = "; ".join(f"{kind}: {', '.join(sorted(names))}" for kind, names in exposed.items())
        forecast.advise(f"{host_target.where}: unattended-upgrades runs (APT::Periodic::Unattended-Upgrade "
                        f"\"{apt.get('APT::Periodic::Unattended-Upgrade')}\") and may replace packages that are neither "
                        f"held nor in Unattended-Upgrade::Package-Blacklist ({listed})",
                        target=f"ssh:{host_target.spec.name}", due="at the next unattended upgrade (daily)")
