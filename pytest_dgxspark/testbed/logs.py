"""Container log texts of the simulated components, built from the verbatim strings in shared/reference/."""

from __future__ import annotations

from typing import Any

VECTORADD = (
    "[Vector addition of 50000 elements]\n"
    "Copy input data from the host memory to the CUDA device\n"
    "CUDA kernel launch with 196 blocks of 256 threads\n"
    "Copy output data from the CUDA device to the host memory\n"
    "Test PASSED\n"
    "Done\n"
)

CLUSTERPOLICY_MESSAGES = {
    "Reconciled": "ClusterPolicy is ready as all resources have been successfully reconciled",
    "NoGPUNodes": "No GPU node found, watching for new nodes to join the cluster.",
    "NFDLabelsMissing": "No NFD labels found",
    "OperandNotReady": "ClusterPolicy is not ready, states not ready: [state-device-plugin state-operator-validation]",
}

HELM_INSTALL = (
    "if [[ ${KUBERNETES_SERVICE_HOST} =~ .*:.* ]]; then\n"
    "Installing helm chart\n"
    "NAME: gpu-operator\n"
    "NAMESPACE: gpu-operator\n"
    "STATUS: deployed\n"
    "REVISION: 1\n"
    "TEST SUITE: None\n"
)

# Workload failures of gpu-stack-facts §8: (pod phase, reason, message, log)
FAILURES: dict[str, dict[str, Any]] = {
    "F24": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
            "message": "Pod was rejected: Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
                       "rpc error: code = Unknown desc = error calling nvml.Init: Unknown Error, which is unexpected"},
    "F25": {"phase": "Failed", "exit_code": 255, "reason": "Error",
            "log": "exec /cuda-samples/vectorAdd: exec format error\n"},
    "F13": {"phase": "Pending", "waiting": "CreateContainerError",
            "message": "failed to inject CDI devices: unresolvable CDI devices management.nvidia.com/gpu="
                       "GPU-8a1c3a64-2f0e-5b43-b6a0-5a1d4f0c2e17"},
    "F12": {"phase": "Pending", "waiting": "ContainerCreating", "event": "FailedCreatePodSandBox",
            "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
                       "no runtime for \"nvidia\" is configured"},
}


def operator(op: dict[str, Any]) -> str:
    """The operator's reconcile log, ending in the ClusterPolicy's state."""
    cp = op.get("clusterpolicy") or {}
    reason = cp.get("reason", "Reconciled")
    message = cp.get("message", CLUSTERPOLICY_MESSAGES.get(reason, ""))
    level = "info" if cp.get("state", "ready") == "ready" else "error"
    return (
        '{"level":"info","ts":1741165850.1,"logger":"controllers.ClusterPolicy","msg":"ClusterPolicy step completed",'
        '"state:":"state-container-toolkit","status":"ready"}\n'
        '{"level":"info","ts":1741165859.0092173,"logger":"controllers.ClusterPolicy","msg":"ClusterPolicy step completed",'
        '"state:":"state-cc-manager","status":"disabled"}\n'
        f'{{"level":"{level}","ts":1741165859.009253,"logger":"controllers.ClusterPolicy","msg":"{message}"}}\n'
    )


_COMPONENT_LOGS: dict[str, dict[str, str]] = {
    "device-plugin": {
        "toolkit-validation": "",
        "nvidia-device-plugin": (
            'I0605 17:28:30.101234       1 main.go:235] "Starting NVIDIA Device Plugin" version="v0.19.2"\n'
            "I0605 17:28:30.101301       1 main.go:238] Starting FS watcher for /var/lib/kubelet/device-plugins\n"
            "I0605 17:28:30.101412       1 main.go:245] Starting OS watcher.\n"
            "I0605 17:28:30.101650       1 main.go:260] Starting Plugins.\n"
            "I0605 17:28:30.101671       1 main.go:317] Loading configuration.\n"
            "I0605 17:28:30.102544       1 main.go:364] Retrieving plugins.\n"
            "W0605 17:28:30.143901       1 devices.go:97] Ignoring error getting device memory: Not Supported\n"
            "I0605 17:28:30.152107       1 server.go:197] Starting GRPC server for 'nvidia.com/gpu'\n"
            "I0605 17:28:30.153322       1 server.go:141] Starting to serve 'nvidia.com/gpu' on "
            "/var/lib/kubelet/device-plugins/nvidia-gpu.sock\n"
            "I0605 17:28:30.155490       1 server.go:148] Registered device plugin for 'nvidia.com/gpu' with Kubelet\n"
        ),
    },
    "gfd": {
        "gpu-feature-discovery": (
            'I0605 17:28:31.200110       1 main.go:163] "Starting NVIDIA GPU Feature Discovery" version="v0.19.2"\n'
            "I0605 17:28:31.245871       1 resource.go:112] Ignoring error getting memory info for device: Not Supported\n"
            "I0605 17:28:31.246002       1 main.go:310] Writing labels to output file /etc/kubernetes/node-feature-discovery/"
            "features.d/gfd\n"
        ),
    },
    "validator": {
        "driver-validation": "running command chroot with args [/host nvidia-smi]\n",
        "toolkit-validation": "",
        "cuda-validation": "",
        "plugin-validation": "",
        "nvidia-operator-validator": "all validations are successful\n",
    },
    "toolkit": {
        "nvidia-container-toolkit-ctr": (
            'time="2026-06-05T17:28:20Z" level=info msg="Starting nvidia-toolkit"\n'
            'time="2026-06-05T17:28:22Z" level=info msg="Starting NRI plugin"\n'
        ),
    },
    "dcgm-exporter": {"nvidia-dcgm-exporter": 'time="2026-06-05T17:28:40Z" level=info msg="Starting webserver"\n'},
}


def component(short: str) -> dict[str, str]:
    """Default logs of a GPU Operator component's containers, by container name."""
    return dict(_COMPONENT_LOGS.get(short, {}))
