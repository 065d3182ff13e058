"""Network layer: Cilium's settings (hubble, kube-proxy replacement, WireGuard) are the site's (ADR 0001 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require, unreadable
from pytest_dgxspark.data.values import as_bool, dig
from pytest_dgxspark.data.yamlload import loads
from pytest_dgxspark.kube.objects import pod_summary


def _cilium_config(cluster: Any) -> dict[str, Any] | None:
    for item in cluster.list("helmchartconfigs", namespace="kube-system"):
        if item["metadata"]["name"] == "rke2-cilium":
            return item
    return None


@pytest.mark.rule("ADR-0001.cilium-settings")
def test_rke2_cilium_values_match_site_vars(cluster: Any, site: Any, evidence: Any) -> None:
    config = _cilium_config(cluster)
    require(config is not None, (
        f"{cluster.where}: no HelmChartConfig kube-system/rke2-cilium; ADR 0001 §5-2 expresses Cilium settings there "
        "(/var/lib/rancher/rke2/server/manifests/rke2-cilium-config.yaml)"
    ))
    try:
        values = loads(dig(config, "spec.valuesContent") or "", f"{cluster.where}: HelmChartConfig "
                       "kube-system/rke2-cilium spec.valuesContent") or {}
    except ValueError as error:
        unreadable(f"{error}; Cilium's settings cannot be read")
    wanted = site.vars.get("rke2_cilium") or {}
    live = {
        "hubble_enabled": as_bool(dig(values, "hubble.enabled")),
        "kube_proxy_replacement": as_bool(dig(values, "kubeProxyReplacement")),
        "wireguard_enabled": as_bool(dig(values, "encryption.enabled")) and dig(values, "encryption.type") == "wireguard",
    }
    evidence.record("rke2-cilium valuesContent", values)
    evidence.record("vars rke2_cilium", wanted)
    differ = {k: {"vars": bool(wanted.get(k, False)), "live": v} for k, v in live.items() if v != bool(wanted.get(k, False))}
    require(
        differ == {},
        f"{cluster.where}: HelmChartConfig rke2-cilium differs from {site.root}/rke2/vars.yml rke2_cilium: "
        + ", ".join(f"{k} is {d['live']} there, {d['vars']} in the vars" for k, d in differ.items()),
    )


# kube-system/cilium-config keys of the running agent; kube-proxy-replacement was strict/partial/disabled before 1.14
_EFFECTIVE = {"hubble_enabled": "enable-hubble", "kube_proxy_replacement": "kube-proxy-replacement",
              "wireguard_enabled": "enable-wireguard"}
_TRUE = {"true", "strict"}


@pytest.mark.rule("ADR-0001.cilium-settings")
def test_running_cilium_config_matches_site_vars(cluster: Any, site: Any, evidence: Any) -> None:
    maps = [c for c in cluster.list("configmaps", namespace="kube-system") if c["metadata"]["name"] == "cilium-config"]
    require(
        maps,
        f"{cluster.where}: no ConfigMap kube-system/cilium-config: the Cilium agent has no effective configuration",
    )
    data = maps[0].get("data") or {}
    wanted = site.vars.get("rke2_cilium") or {}
    live = {key: str(data.get(name, "false")).strip().lower() in _TRUE for key, name in _EFFECTIVE.items()}
    evidence.record("cilium-config (effective)", {name: data.get(name) for name in _EFFECTIVE.values()})
    differ = {k: {"vars": bool(wanted.get(k, False)), "running": v} for k, v in live.items() if v != bool(wanted.get(k, False))}
    require(differ == {}, (
        f"{cluster.where}: the running Cilium (kube-system/cilium-config) differs from {site.root}/rke2/vars.yml "
        "rke2_cilium: " + ", ".join(f"{k} is {d['running']} running, {d['vars']} in the vars" for k, d in differ.items())
        + "; a setting changed outside the HelmChartConfig, or the HelmChartConfig did not apply"
    ))


@pytest.mark.rule("ADR-0001.cilium-settings")
def test_kube_proxy_runs_only_when_not_replaced(cluster: Any, site: Any, evidence: Any) -> None:
    disabled = bool(site.vars.get("rke2_disable_kube_proxy", False))
    replacement = bool((site.vars.get("rke2_cilium") or {}).get("kube_proxy_replacement", False))
    proxies = [p for p in cluster.list("pods", namespace="kube-system") if p["metadata"]["name"].startswith("kube-proxy-")]
    evidence.record("kube-proxy pods", [pod_summary(p) for p in proxies])
    evidence.record("vars", {"rke2_disable_kube_proxy": disabled, "rke2_cilium.kube_proxy_replacement": replacement})
    require(replacement == disabled, (
        f"{site.root}/rke2/vars.yml: kube_proxy_replacement ({replacement}) requires rke2_disable_kube_proxy ({disabled}) "
        "to be the same"
    ))
    running_on = {(p.get("spec") or {}).get("nodeName") for p in proxies if (p.get("status") or {}).get("phase") == "Running"}
    nodes = {n["metadata"]["name"] for n in cluster.nodes}
    if disabled:
        require(running_on == set(), f"{cluster.where}: kube-proxy is disabled but runs on {', '.join(sorted(running_on))}")
    else:
        require(
            nodes <= running_on,
            f"{cluster.where}: kube-proxy must run on every node; missing on {', '.join(sorted(nodes - running_on))}",
        )
