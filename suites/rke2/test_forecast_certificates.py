"""RKE2 forecast (catalog/beyond.yaml): certificates that expire while the box is switched off keep RKE2 from
starting again (rancher/rke2#8318). Advisory: it never fails the run (unless the site sets forecast: enforce)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pytest_dgxspark.checking import completed
from pytest_dgxspark.judge.upkeep import DEFAULT_LONGEST_SHUTDOWN_DAYS, expiring
from pytest_dgxspark.probes.upkeep import Upkeep
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.forecast("SPARK.rke2-certificates-expiry")
def test_rke2_certificates_outlast_the_longest_declared_shutdown(host_target: HostTarget, upkeep_probe: Upkeep,
                                                                   site: Any, evidence: Any, forecast: Any) -> None:
    completed(upkeep_probe.rke2_certs, host_target)
    longest = int((site.vars or {}).get("forecast_longest_shutdown_days", DEFAULT_LONGEST_SHUTDOWN_DAYS))
    now = datetime.datetime.now(datetime.timezone.utc)
    certs = upkeep_probe.certificates
    evidence.record("RKE2 certificates (not after)", {p: c.not_after.isoformat() for p, c in sorted(certs.items())})
    evidence.record("longest shutdown (days)", longest)
    soon = expiring(certs, now, longest)
    if soon:
        first, days, ends = soon[0]
        forecast.advise(f"{host_target.where}: {len(soon)} RKE2 certificate(s) expire within the site's longest "
                        f"shutdown of {longest} days (forecast_longest_shutdown_days), first {first} in {days} days: "
                        "switched off that long, RKE2 does not start again with them",
                        target=f"ssh:{host_target.spec.name}",
                        due=ends.date().isoformat())
