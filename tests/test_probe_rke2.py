"""The RKE2 probe's parser: config.yaml and its drop-ins merged as RKE2 reads them."""

from __future__ import annotations

from pytest_dgxspark.probes import rke2 as p


def test_rke2_config_merge_last_wins_lists_replace_plus_appends() -> None:
    merged = p.merge_rke2_config([
        {"cni": "canal", "node-label": ["a=1"], "node-taint": ["x=y:NoSchedule"]},
        {"cni": "cilium", "node-label": ["b=2"]},
        {"node-taint+": ["z:NoExecute"]},
    ])
    assert merged == {"cni": "cilium", "node-label": ["b=2"], "node-taint": ["x=y:NoSchedule", "z:NoExecute"]}
