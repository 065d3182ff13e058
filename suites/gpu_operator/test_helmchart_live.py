"""GPU Operator layer: the live HelmChart is the site's manifest and its install job completed (ADR 0002 §5-3)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require, unreadable
from pytest_dgxspark.data.redact import redact, remember_secrets
from pytest_dgxspark.site.model import helm_values

# HelmChart spec keys that change the installed chart or its values when set on the live object only
OVERRIDING_KEYS = frozenset({"set", "valuesSecrets", "chartContent", "repo", "version", "chart", "valuesContent"})


def _live_chart(cluster: Any, site: Any) -> dict[str, Any] | None:
    meta = site.helmchart.get("metadata") or {}
    for chart in cluster.list("helmcharts", namespace=meta.get("namespace", "kube-system")):
        if chart["metadata"]["name"] == meta.get("name", "gpu-operator"):
            return chart
    return None


def _difference(key: str, found: dict[str, Any]) -> str:
    """'spec.version is v26.3.1 live, v26.3.2 in the site' (valuesContent: the differing value paths)."""
    if key == "valuesContent":
        site, live = found["site"], found["live"]
        paths = sorted(_changed_paths(site, live))
        return "spec.valuesContent differs at " + ", ".join(
            f"{p} (site {_shown(_at(site, p), p)}, live {_shown(_at(live, p), p)})" for p in paths[:6])
    return f"spec.{key} is {_shown(found['live'], key)} live, {_shown(found['site'], key)} in the site"


def _changed_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) or isinstance(b, dict):
        if not isinstance(a, (dict, type(None))) or not isinstance(b, (dict, type(None))):
            return [prefix or "(root)"]
        a, b = a or {}, b or {}
        return [p for k in sorted(set(a) | set(b), key=str)
                for p in _changed_paths(a.get(k), b.get(k), f"{prefix}{'.' if prefix else ''}{k}")]
    return [] if a == b else [prefix or "(root)"]


def _shown(value: Any, path: str) -> str:
    """A value as the message quotes it: a secret (under a secret key, an env entry's, a token's shape) redacted."""
    if value is None:
        return "unset"
    return repr(redact({path.rsplit(".", 1)[-1]: value}, f"the HelmChart's {path}")[path.rsplit(".", 1)[-1]])


def _at(values: Any, path: str) -> Any:
    for part in path.split("."):
        values = values.get(part) if isinstance(values, dict) else None
    return values


@pytest.mark.rule("ADR-0002.helmchart-live")
def test_live_helmchart_equals_site_manifest(cluster: Any, site: Any, evidence: Any) -> None:
    live = _live_chart(cluster, site)
    meta = site.helmchart.get("metadata") or {}
    require(live is not None, (
        f"{cluster.where}: no HelmChart {meta.get('namespace', 'kube-system')}/{meta.get('name')}; apply it with "
        "make rke2/gpu/operator/apply"
    ))
    want = site.helmchart.get("spec") or {}
    have = live.get("spec") or {}
    try:  # the bounded loader: a valuesContent bomb is refused and named, never expanded into the report
        site_values = helm_values(site.helmchart)
        live_values = helm_values(live, f"{cluster.where}: the live HelmChart's spec.valuesContent")
    except ValueError as exc:
        error: ValueError | None = exc
    else:
        error = None
        # the values' secrets, however the YAML wrote them, are known before any of it is recorded or quoted
        remember_secrets(live_values, f"{cluster.where}: the live HelmChart's values")
    evidence.record("live HelmChart spec", have)
    if error is not None:
        unreadable(f"{error}; the live chart's values cannot be compared with the site's")
    differ = {}
    for key, value in want.items():
        if key == "valuesContent":
            if site_values != live_values:
                differ[key] = {"site": site_values, "live": live_values}
        elif have.get(key) != value:
            differ[key] = {"site": value, "live": have.get(key)}
    # keys only the live object carries can still change what is installed (`set` overrides valuesContent)
    for key in sorted(set(have) & OVERRIDING_KEYS - set(want)):
        if have[key] not in (None, "", {}, []):
            differ[key] = {"site": None, "live": have[key]}
    require(
        differ == {},
        f"{cluster.where}: the live HelmChart differs from {site.root}/rke2/gpu-operator.helmchart.yaml: "
        + "; ".join(_difference(key, d) for key, d in differ.items())
        + "; apply the site's manifest with make rke2/gpu/operator/apply",
    )


def _job_version(job: dict[str, Any]) -> str | None:
    """The chart version a helm-controller Job installs: its helm container's VERSION (k3s-io/helm-controller)."""
    containers = (((job.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    for container in containers:
        for env in container.get("env") or []:
            if env.get("name") == "VERSION":
                return str(env.get("value") or "")
    return None


@pytest.mark.rule("ADR-0002.helmchart-live")
def test_helm_install_job_completed(cluster: Any, site: Any, evidence: Any) -> None:
    meta = site.helmchart.get("metadata") or {}
    namespace, name = meta.get("namespace", "kube-system"), f"helm-install-{meta.get('name', 'gpu-operator')}"
    jobs = [j for j in cluster.list("jobs", namespace=namespace) if j["metadata"]["name"] == name]
    live = _live_chart(cluster, site)
    pinned = ((live or {}).get("spec") or {}).get("version")
    evidence.record(name, [j.get("status") for j in jobs])
    require(jobs, f"{cluster.where}: no Job {namespace}/{name}: helm-controller never installed the chart")
    status = jobs[0].get("status") or {}
    installs = _job_version(jobs[0])
    evidence.record(f"chart version {name} installs (its VERSION), and the live HelmChart's", {"job": installs, "helmchart": pinned})
    complete = any(c.get("type") == "Complete" and c.get("status") == "True" for c in status.get("conditions") or [])
    failed = [c.get("message") for c in status.get("conditions") or [] if c.get("type") == "Failed" and c.get("status") == "True"]
    of = f" (chart {installs})" if installs else ""
    require(complete or (status.get("succeeded") or 0) >= 1, (
        f"{cluster.where}: Job {namespace}/{name}{of} is not complete (succeeded {status.get('succeeded')}, failed "
        f"{status.get('failed')}{', ' + '; '.join(map(str, failed)) if failed else ''}); see kubectl -n {namespace} logs job/{name}"
    ))
    # the Job that completed is that of the version the HelmChart pins (an older one: helm-controller has not run it)
    require(installs is None or not pinned or installs == pinned, (
        f"{cluster.where}: Job {namespace}/{name} installed chart {installs}, but the live HelmChart pins {pinned}: "
        "helm-controller has not run the pinned version's install (is rke2-server's helm-controller running?); see "
        f"kubectl -n {namespace} describe helmchart {meta.get('name', 'gpu-operator')}"
    ))
