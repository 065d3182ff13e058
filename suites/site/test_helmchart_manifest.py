"""Site layer: the GPU Operator HelmChart of the site (ADR 0002 §5-3)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.data.values import as_bool, dig
from pytest_dgxspark.kube.objects import exact_chart_version

NVIDIA_REPO = "https://helm.ngc.nvidia.com/nvidia"
RKE2_GENERATED = ("config.toml", "config.toml.tmpl", "config-v3.toml.tmpl")


@pytest.mark.rule("ADR-0002.helmchart-manifest")
def test_helmchart_pins_nvidia_gpu_operator_chart(site: Any, evidence: Any) -> None:
    chart = site.helmchart
    spec = chart.get("spec") or {}
    where = f"{site.root}/rke2/gpu-operator.helmchart.yaml"
    evidence.record("helmchart", {k: v for k, v in spec.items() if k != "valuesContent"} | {"kind": chart.get("kind")})
    problems = []
    if chart.get("apiVersion") != "helm.cattle.io/v1" or chart.get("kind") != "HelmChart":
        problems.append(f"must be a helm.cattle.io/v1 HelmChart, is {chart.get('apiVersion')} {chart.get('kind')}")
    if spec.get("chart") != "gpu-operator":
        problems.append(f"spec.chart must be 'gpu-operator', is {spec.get('chart')!r}")
    if str(spec.get("repo", "")).rstrip("/") != NVIDIA_REPO:
        problems.append(f"spec.repo must be {NVIDIA_REPO}, is {spec.get('repo')!r}")
    if not exact_chart_version(spec.get("version")):
        problems.append(f"spec.version must pin one release (e.g. v26.3.2), is {spec.get('version')!r}")
    if spec.get("targetNamespace") != "gpu-operator":
        problems.append(f"spec.targetNamespace must be 'gpu-operator', is {spec.get('targetNamespace')!r}")
    if spec.get("createNamespace") is not True:
        problems.append(f"spec.createNamespace must be true, is {spec.get('createNamespace')!r}")
    require(problems == [], f"{where}: " + "; ".join(problems))


@pytest.mark.rule("ADR-0002.helmchart-manifest")
def test_helmchart_values_set_driver_and_nri_plugin(site: Any, site_values: dict[str, Any], evidence: Any) -> None:
    where = f"{site.root}/rke2/gpu-operator.helmchart.yaml spec.valuesContent"
    evidence.record("valuesContent", site_values)
    problems = []
    if not isinstance(dig(site_values, "driver.enabled"), bool):
        problems.append(f"driver.enabled must be set explicitly (true or false), is {dig(site_values, 'driver.enabled')!r}")
    nri = dig(site_values, "cdi.nriPluginEnabled")
    if not isinstance(nri, bool):
        problems.append(f"cdi.nriPluginEnabled must be set explicitly, is {nri!r}")
    if nri is True:
        if dig(site_values, "cdi.enabled") is not None and not as_bool(dig(site_values, "cdi.enabled")):
            problems.append("cdi.nriPluginEnabled requires cdi.enabled (the chart renders the NRI plugin only with CDI)")
        if dig(site_values, "toolkit.enabled") is not None and not as_bool(dig(site_values, "toolkit.enabled")):
            problems.append("cdi.nriPluginEnabled requires toolkit.enabled (the NRI plugin runs in the toolkit DaemonSet)")
    require(problems == [], f"{where}: " + "; ".join(problems))


@pytest.mark.rule("ADR-0002.helmchart-manifest")
def test_toolkit_does_not_rewrite_rke2_containerd_config(site: Any, site_values: dict[str, Any], evidence: Any) -> None:
    env = dig(site_values, "toolkit.env") or []
    env_map = {str(e.get("name")): str(e.get("value", "")) for e in env if isinstance(e, dict)}
    evidence.record("toolkit.env", env_map)
    config = env_map.get("CONTAINERD_CONFIG", "")
    generated = config.startswith("/var/lib/rancher/") and config.rsplit("/", 1)[-1] in RKE2_GENERATED
    require(not generated, (
        f"{site.root}/rke2/gpu-operator.helmchart.yaml: toolkit env CONTAINERD_CONFIG={config} points at RKE2's generated "
        "containerd config; RKE2 rewrites it at start (template errors, restart loops: gpu-stack-facts §8 F9/F10). "
        "Remove it (NRI/CDI need no containerd config patch)."
    ))
