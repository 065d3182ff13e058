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


@pytest.mark.forecast("SPARK.rke2-certificates-expiry")
def test_the_kubeconfig_client_certificate_outlasts_the_longest_declared_shutdown(cluster: Any, site: Any,
                                                                                   evidence: Any, forecast: Any) -> None:
    from pytest_dgxspark.probes.upkeep import parse_certificate
    from pytest_dgxspark.site.kubeconfig import client_certificate

    longest = int((site.vars or {}).get("forecast_longest_shutdown_days", DEFAULT_LONGEST_SHUTDOWN_DAYS))
    where = f"{cluster.kubeconfig or '~/.kube/config'} context {cluster.context}"
    pem = client_certificate(cluster.kubeconfig, cluster.context) if cluster.kubeconfig else None
    cert = parse_certificate(pem or "")
    evidence.record("kubeconfig client certificate (not after)",
                    {"context": cluster.context, "not_after": cert.not_after.isoformat() if cert else None,
                     "authenticates with": "a client certificate" if cert else "no client certificate (token or other)"})
    now = datetime.datetime.now(datetime.timezone.utc)
    soon = expiring({where: cert} if cert else {}, now, longest)
    if soon:
        _, days, ends = soon[0]
        forecast.advise(f"{where}: the client certificate expires in {days} days, within the site's longest shutdown "
                        f"of {longest} days: the suite, Argo CD and kubectl lose the cluster with it",
                        target=cluster.target_id, due=ends.date().isoformat(),
                        fix="Run make rke2/kubeconfig after RKE2 rotated its certificates (restart rke2-server or "
                            "rke2 certificate rotate) to fetch the new client certificate, and rerun the suite.",
                        fix_ko="RKE2가 인증서를 교체한 뒤(rke2-server 재시작 또는 rke2 certificate rotate) make "
                               "rke2/kubeconfig로 새 클라이언트 인증서를 받고 스위트를 다시 실행한다.")
