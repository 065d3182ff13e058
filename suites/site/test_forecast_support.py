"""Support forecast (catalog/beyond.yaml SPARK.component-support): a pinned component past the end of its support
gets no more bug or CVE fixes. Judged against the run's date from the dated table support-lifecycle.yaml; a version
the table does not cover is not judged, saying why. Advisory: it never fails the run (unless forecast: enforce)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pytest_dgxspark.catalog.support import DEPRECATED, ENDED, UNKNOWN, Support, load_support
from pytest_dgxspark.checking import completed
from pytest_dgxspark.probes.nvidia_driver import Driver
from pytest_dgxspark.targets.connections import HostTarget


def _shown(found: Support) -> dict[str, Any]:
    line = found.line
    return {"version": found.version, "status": found.status, "reason": found.reason or None,
            "line": line.line if line else None, "deprecated": line.deprecated.isoformat() if line and line.deprecated else None,
            "end": line.end.isoformat() if line and line.end else None, "sources": list(line.sources) if line else []}


def _advise(found: list[Support], where: str, target: str, run_date: datetime.date, forecast: Any) -> None:
    for entry in found:
        if entry.status == ENDED and entry.line is not None and entry.line.end is not None:
            forecast.advise(f"{where}: {entry.what} {entry.version} is past the end of its support on "
                            f"{entry.line.end.isoformat()} (run date {run_date.isoformat()}; source: "
                            f"{'; '.join(entry.line.sources)}): no more bug or CVE fixes",
                            target=target, due=entry.line.end.isoformat())


def _judged(found: list[Support]) -> None:
    if all(entry.status == UNKNOWN for entry in found):
        pytest.skip("; ".join(entry.reason for entry in found))


@pytest.mark.forecast("SPARK.component-support")
def test_the_pinned_gpu_operator_chart_and_rke2_minor_are_within_support(cluster: Any, site: Any, run_date: Any,
                                                                         evidence: Any, forecast: Any) -> None:
    table = load_support()
    meta = site.helmchart.get("metadata") or {}
    charts = [c for c in cluster.list("helmcharts", namespace=meta.get("namespace", "kube-system"))
              if c["metadata"]["name"] == meta.get("name")]
    found = [table.status("gpu-operator", str((c.get("spec") or {}).get("version")), run_date)
             for c in charts if (c.get("spec") or {}).get("version")]
    rke2 = sorted({str(((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "") for n in cluster.nodes}
                  - {""})
    found += [table.status("rke2", version, run_date) for version in rke2]
    evidence.record("support on the run date", {"run date": run_date.isoformat(),
                                                 "components": [_shown(f) for f in found]})
    evidence.record("deprecated (maintenance only)", [f"{f.what} {f.version}" for f in found if f.status == DEPRECATED])
    if not found:
        pytest.skip(f"{cluster.where}: no HelmChart {meta.get('name')} with a version and no Node's kubelet version")
    _advise(found, cluster.where, cluster.target_id, run_date, forecast)
    _judged(found)


@pytest.mark.gpu_host
@pytest.mark.forecast("SPARK.component-support")
def test_the_host_driver_branch_is_within_support(host_target: HostTarget, nvidia_driver_probe: Driver, run_date: Any,
                                                  evidence: Any, forecast: Any) -> None:
    completed(nvidia_driver_probe.version_file, host_target)
    loaded = nvidia_driver_probe.version.version if nvidia_driver_probe.version else None
    if not loaded:
        pytest.skip(f"{host_target.where}: no NVIDIA driver loaded (/proc/driver/nvidia/version): no branch to judge")
    found = [load_support().status("nvidia-driver", loaded, run_date)]
    evidence.record("support on the run date", {"run date": run_date.isoformat(), "components": [_shown(f) for f in found]})
    _advise(found, host_target.where, f"ssh:{host_target.spec.name}", run_date, forecast)
    _judged(found)
