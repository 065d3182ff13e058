"""The GPU Operator's operands: what gpuoperator.py deploys and controllers.py reads back through the API (this module
imports nothing, so controllers.py starts light beside kwok)."""

from __future__ import annotations

# short name -> (DaemonSet, deploy label, values key, init containers, main containers, operator state); the image of
# each is the release table's for the chart version that runs, under the HelmChart's values
OPERANDS: dict[str, tuple[str, str, str, list[str], list[str], str]] = {
    "driver": ("nvidia-driver-daemonset", "driver", "driver", ["k8s-driver-manager"], ["nvidia-driver-ctr"], "state-driver"),
    "toolkit": ("nvidia-container-toolkit-daemonset", "container-toolkit", "toolkit", ["driver-validation"],
                ["nvidia-container-toolkit-ctr"], "state-container-toolkit"),
    "validator": ("nvidia-operator-validator", "operator-validator", "validator",
                  ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"],
                  ["nvidia-operator-validator"], "state-operator-validation"),
    "device-plugin": ("nvidia-device-plugin-daemonset", "device-plugin", "devicePlugin", ["toolkit-validation", "config-manager-init"],
                      ["nvidia-device-plugin"], "state-device-plugin"),
    "dcgm-exporter": ("nvidia-dcgm-exporter", "dcgm-exporter", "dcgmExporter", ["toolkit-validation"], ["nvidia-dcgm-exporter"],
                      "state-dcgm-exporter"),
    "gfd": ("gpu-feature-discovery", "gpu-feature-discovery", "gfd", ["toolkit-validation"], ["gpu-feature-discovery"],
            "gpu-feature-discovery"),
    "mig-manager": ("nvidia-mig-manager", "mig-manager", "migManager", ["toolkit-validation"], ["nvidia-mig-manager"],
                    "state-mig-manager"),
}
