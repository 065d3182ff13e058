"""RKE2 layer: the effective RKE2 config (config.yaml + config.yaml.d) matches the site vars (ADR 0001 §5-2)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import require
from pytest_dgxspark.data.values import as_bool, as_list
from pytest_dgxspark.kube.objects import parse_taint
from pytest_dgxspark.probes.rke2 import CONFIG_FILE as CONFIG
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.rule("ADR-0001.rke2-config")
def test_effective_config_matches_site_vars(host_target: HostTarget, rke2_config: Any, site: Any, node_metadata: Any) -> None:
    require(rke2_config.error is None, rke2_config.error)
    config = rke2_config.merged
    vars_ = site.vars
    problems = []
    if host_target.spec.role == "server":
        cni = [c for c in as_list(config.get("cni")) if c != "multus"]
        if cni != [vars_.get("rke2_cni", "canal")]:
            problems.append(f"cni is {config.get('cni')!r} (RKE2 default canal when unset), vars say {vars_.get('rke2_cni')!r}")
        want_kp = bool(vars_.get("rke2_disable_kube_proxy", False))
        if as_bool(config.get("disable-kube-proxy")) != want_kp:
            problems.append(f"disable-kube-proxy is {config.get('disable-kube-proxy')!r}, vars say {want_kp}")
    labels = sorted(as_list(config.get("node-label")))
    want_labels = sorted(node_metadata.labels)
    if labels != want_labels:
        problems.append(f"node-label is {labels}, {node_metadata.labels_from} says {want_labels}")
    taints = sorted(parse_taint(t) for t in as_list(config.get("node-taint")))
    want_taints = sorted(parse_taint(t) for t in node_metadata.taints)
    if taints != want_taints:
        problems.append(f"node-taint is {as_list(config.get('node-taint'))}, {node_metadata.taints_from} says {list(node_metadata.taints)}")
    require(
        problems == [],
        f"{host_target.where}: {CONFIG} (+ config.yaml.d) does not match {site.root}/rke2/vars.yml: " + "; ".join(problems),
    )
