"""GPU sharing a site configures: the device plugin's time-slicing configs (GPU Operator `devicePlugin.config`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

GPU = "nvidia.com/gpu"
# The node label that picks a config of the ConfigMap for one node (k8s-device-plugin config-manager)
CONFIG_LABEL = "nvidia.com/device-plugin.config"


@dataclass(frozen=True)
class Sharing:
    """The plugin configs of `devicePlugin.config`: name -> time-slicing replicas of nvidia.com/gpu (1: no sharing)."""

    configmap: str
    default: str
    replicas: dict[str, int]
    problems: tuple[str, ...] = ()

    @property
    def configured(self) -> bool:
        """Whether any config shares a GPU (time-slicing replicas above 1)."""
        return any(r > 1 for r in self.replicas.values())

    def for_node(self, labels: dict[str, str]) -> tuple[str | None, int]:
        """(the config the node runs, its replicas): the node's label, else the default; (None, 1) when neither names
        one (the plugin then runs without a config: each GPU is one nvidia.com/gpu)."""
        name = labels.get(CONFIG_LABEL) or self.default
        if not name or name not in self.replicas:
            return None, 1
        return name, self.replicas[name]


def time_slicing_replicas(text: str) -> int:
    """The replicas of nvidia.com/gpu in one plugin config (`version: v1`, `sharing.timeSlicing.resources`); 1 when
    it shares nothing. ValueError when it is not a plugin config."""
    doc = yaml.safe_load(text) if isinstance(text, str) else text
    if not isinstance(doc, dict):
        raise ValueError(f"not a device plugin config (a mapping with version: v1): {str(text)[:80]!r}")
    sharing = doc.get("sharing") or {}
    resources = ((sharing.get("timeSlicing") or {}).get("resources") or []) if isinstance(sharing, dict) else []
    for resource in resources if isinstance(resources, list) else []:
        if isinstance(resource, dict) and resource.get("name") == GPU:
            return int(resource.get("replicas") or 1)
    return 1


def site_sharing(values: dict[str, Any], configmap_data: dict[str, str] | None = None) -> Sharing | None:
    """The sharing of the site's HelmChart values (`devicePlugin.config`: its inline `data`, else the data of the
    ConfigMap it names, handed in); None when the values name no plugin config at all."""
    config = ((values.get("devicePlugin") or {}).get("config") or {}) if isinstance(values, dict) else {}
    name, default = str(config.get("name") or ""), str(config.get("default") or "")
    data = config.get("data") or configmap_data or {}
    if not name and not data:
        return None
    replicas: dict[str, int] = {}
    problems = []
    for key, text in (data.items() if isinstance(data, dict) else []):
        try:
            replicas[str(key)] = time_slicing_replicas(text)
        except (ValueError, yaml.YAMLError, TypeError) as error:
            problems.append(f"devicePlugin.config.data.{key}: {error}")
    return Sharing(name, default, replicas, tuple(problems))
