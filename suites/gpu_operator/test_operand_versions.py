"""GPU Operator layer: the operands run the versions of the chart the live HelmChart pins (ADR 0002 §5-3; issue 22,
after an upgrade), judged against NVIDIA's release table (catalog/gpu-operator-releases.yaml)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import not_applicable
from pytest_dgxspark.catalog.releases import load_releases
from pytest_dgxspark.checking import require, unreadable
from pytest_dgxspark.kube.operands import against_the_chart, with_set
from pytest_dgxspark.site.model import helm_values


def _live_chart(cluster: Any, site: Any) -> tuple[str, dict[str, Any] | None]:
    meta = site.helmchart.get("metadata") or {}
    namespace, name = meta.get("namespace", "kube-system"), meta.get("name", "gpu-operator")
    chart = next((c for c in cluster.list("helmcharts", namespace=namespace) if c["metadata"]["name"] == name), None)
    return f"{namespace}/{name}", chart


@pytest.mark.rule("ADR-0002.helmchart-live")
def test_operands_run_the_versions_of_the_pinned_chart(cluster: Any, site: Any, operator_namespace: str,
                                                        evidence: Any) -> None:
    where, live = _live_chart(cluster, site)
    require(live is not None, f"{cluster.where}: no HelmChart {where}; apply it with make rke2/gpu/operator/apply")
    spec = live.get("spec") or {}
    version = spec.get("version")
    table = load_releases()
    evidence.record("chart version the live HelmChart pins", version)
    if not version:
        not_applicable(f"{cluster.where}: HelmChart {where} pins no spec.version (the repository's newest chart is "
                       "installed), so the operand versions it gives cannot be told; pin one in the site's manifest")
    release = table.release(str(version))
    if release is None or not release.found:
        said = "; ".join(release.sources) if release is not None else "not in the table"
        not_applicable(f"{table.path.name} has no operand versions for GPU Operator {version} ({said}); its operands "
                       f"are not judged against a release (known: {', '.join(table.known())})")
    try:
        values = with_set(dict(helm_values(live, f"{cluster.where}: HelmChart {where} spec.valuesContent") or {}),
                           spec.get("set"))
    except ValueError as error:
        unreadable(f"{error}; the versions the chart gives cannot be told")
    namespace = spec.get("targetNamespace") or operator_namespace
    workloads = {"DaemonSet": cluster.list("daemonsets"), "Deployment": cluster.list("deployments")}
    seen, wrong = against_the_chart(release, values, workloads, namespace)
    evidence.record(f"operand images against GPU Operator {version} ({'; '.join(release.sources[:1])})", seen)
    require(any(s.get("found") for s in seen.values()), (
        f"{cluster.where}: no GPU Operator workload in {namespace} to compare with chart {version}: the chart is not "
        f"installed (see kubectl -n {where.split('/')[0]} logs job/helm-install-{where.split('/')[1]})"))
    require(wrong == [], (
        f"{cluster.where}: the operands do not run the versions of GPU Operator {version} that HelmChart {where} pins: "
        + "; ".join(wrong) + f". The chart's install or upgrade did not finish, or an operand was changed by hand "
        f"(the ClusterPolicy edited); read kubectl -n {where.split('/')[0]} logs job/helm-install-{where.split('/')[1]} "
        "and re-apply with make rke2/gpu/operator/apply"))
