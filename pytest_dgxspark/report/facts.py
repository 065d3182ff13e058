"""Provenance of results.json flattened per scope (the cluster, each node) for the summary and drift."""
from __future__ import annotations

import json
from typing import Any

CLUSTER = ""

# Display order; keys not listed follow alphabetically. Synonyms are the spellings results may use.
ORDER = (
    "dgx_os", "os", "os_image", "kernel", "arch", "driver", "nvidia_driver", "driver_flavour",
    "nvidia_driver_flavour", "cuda", "cuda_version", "rke2", "rke2_version", "containerd", "containerd_version",
    "cilium", "cilium_version", "gpu_operator_chart", "gpu_operator_chart_version", "gpu_operator_image",
    "device_plugin", "device_plugin_version", "gfd_version", "toolkit_version", "dcgm_exporter_version", "validator_version",
    "mig_manager_version", "nfd_version", "driver_image_version", "gpu_product", "kubernetes", "cluster_uid", "uid", "server", "address",
)


def scalar(value: Any) -> Any:
    """A provenance value as a comparable scalar (JSON text for lists and objects)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _merge(into: dict[str, Any], values: Any) -> None:
    if not isinstance(values, dict):
        return
    for key, value in values.items():
        if into.get(key) is None:
            into[key] = scalar(value)


def scopes(provenance: Any) -> dict[str, dict[str, Any]]:
    """{'' (the cluster) or node name: {key: scalar}} from results.json provenance.

    Accepts `{cluster: {...}, nodes: {name: {...}}}`, with host facts under `hosts` and API facts under
    `cluster.nodes` merged into the node of the same name (the first non-null value of a key wins);
    other top-level scalars (e.g. `error`) belong to the cluster.
    """
    result: dict[str, dict[str, Any]] = {CLUSTER: {}}
    if not isinstance(provenance, dict):
        return result
    cluster = provenance.get("cluster") if isinstance(provenance.get("cluster"), dict) else {}
    _merge(result[CLUSTER], {k: v for k, v in cluster.items() if k != "nodes"})
    _merge(result[CLUSTER], {k: v for k, v in provenance.items()
                             if k not in ("cluster", "nodes", "hosts") and not isinstance(v, (dict, list))})
    for group in (provenance.get("nodes"), provenance.get("hosts"), cluster.get("nodes")):
        if isinstance(group, dict):
            for name, values in group.items():
                _merge(result.setdefault(str(name), {}), values)
    return result


def ordered_items(values: dict[str, Any]) -> list[tuple[str, Any]]:
    """values as (key, value) pairs in display order."""
    keys = [k for k in ORDER if k in values] + sorted(k for k in values if k not in ORDER)
    return [(k, values[k]) for k in keys]
