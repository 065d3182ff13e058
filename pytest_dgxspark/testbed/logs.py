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

HELM_INSTALL = (
    "if [[ ${KUBERNETES_SERVICE_HOST} =~ .*:.* ]]; then\n"
    "Installing helm chart\n"
    "NAME: gpu-operator\n"
    "NAMESPACE: gpu-operator\n"
    "STATUS: deployed\n"
    "REVISION: 1\n"
    "TEST SUITE: None\n"
)



def helm_upgrade_failed(name: str) -> str:
    """klipper-helm's log of an upgrade over a deployed release that failed (k3s-io/klipper-helm `entry`: "Upgrading
    <name>"; the error as helm prints it when a pre-upgrade hook Job fails, helm/helm#10809)."""
    return f"Upgrading {name}\nError: UPGRADE FAILED: pre-upgrade hooks failed: job failed: BackoffLimitExceeded\n"


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


def operator(message: str, failing: bool) -> str:
    """The operator's reconcile log, ending in the ClusterPolicy's state (gpu-operator#1310, clusterpolicy-status.txt)."""
    return (
        '{"level":"info","ts":1741165850.1,"logger":"controllers.ClusterPolicy","msg":"ClusterPolicy step completed",'
        '"state:":"state-container-toolkit","status":"ready"}\n'
        '{"level":"info","ts":1741165859.0092173,"logger":"controllers.ClusterPolicy","msg":"ClusterPolicy step completed",'
        '"state:":"state-cc-manager","status":"disabled"}\n'
        f'{{"level":"{"error" if failing else "info"}","ts":1741165859.009253,"logger":"controllers.ClusterPolicy","msg":"{message}"}}\n'
    )


# controllers/clusterpolicy_controller.go v26.3.2 (clusterpolicy-status.txt)
CLUSTERPOLICY_MESSAGES = {
    "Reconciled": "ClusterPolicy is ready as all resources have been successfully reconciled",
    "NoGPUNodes": "No GPU node found, watching for new nodes to join the cluster.",
    "NFDLabelsMissing": "No NFD labels found",
}


def clusterpolicy_message(reason: str, not_ready: list[str]) -> str:
    if reason == "OperandNotReady":
        return f"ClusterPolicy is not ready, states not ready: [{' '.join(not_ready)}]"
    return CLUSTERPOLICY_MESSAGES[reason]


# What nvidia-smi on the host prints when it fails (the host simulator's nvidia-smi shim says the same)
SMI_NO_NVML = ("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver "
               "is properly installed and present in your system.\nPlease also try adding directory that contains "
               "libnvidia-ml.so to your system PATH.\n")
SMI_NO_DRIVER = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA "
                 "driver is installed and running.\n\n")
HANG = "hang"


def smi_failure(host: dict[str, Any]) -> str | None:
    """How `nvidia-smi` fails on this host (its output, or HANG), None when it works."""
    driver = host.get("driver") or {}
    if driver.get("smi") == "hang":
        return HANG
    if host.get("nvml", "present") != "present":
        return SMI_NO_NVML
    if not driver.get("loaded", True):
        return SMI_NO_DRIVER
    if driver.get("smi") == "error":
        return ("Failed to initialize NVML: Driver/library version mismatch\n"
                f"NVML library version: {'.'.join(str(driver.get('version', '580.95.05')).split('.')[:2])}\n")
    return None


CHROOT_SMI = "running command chroot with args [/host nvidia-smi]\n"
RETRY_DRIVER = "failed to validate the driver, retrying after 5 seconds\n"


def driver_validation(host: dict[str, Any], smi: str | None, container_driver: bool) -> str:
    """The `driver-validation` init container's log (validator WITH_WAIT: it retries every 5 s, F6)."""
    if container_driver:  # no pre-installed driver: it waits for the driver container (cozystack PR#863)
        return "Attempting to validate a driver container installation\n" + RETRY_DRIVER * 3
    if smi is None:
        return CHROOT_SMI
    if smi == HANG:  # nvidia-smi never returns (RmInitAdapter failed, F1)
        return CHROOT_SMI
    return (CHROOT_SMI + smi + RETRY_DRIVER) * 3


WAITING_FOR_TOOLKIT = "waiting for nvidia container stack to be setup\n" * 3  # toolkit-validation of the v26.3.2 templates
TOOLKIT_NOT_READY = "toolkit is not ready\n" * 3                              # validator-strings.txt:1148
DRIVER_BUILD_FAILED = "Could not resolve Linux kernel version\n"              # gpu-stack-facts F3 (driver container)
# the driver container on a node whose pre-installed driver is loaded (gpu-operator#126)
DRIVER_IN_USE = ("========== NVIDIA Software Installer ==========\n\n"
                 "Starting installation of NVIDIA driver version 580.126.20 for Linux kernel version 6.17.0-1014-nvidia\n\n"
                 + "Stopping NVIDIA persistence daemon...\nUnloading NVIDIA driver kernel modules...\n"
                   "Could not unload NVIDIA driver kernel modules, driver is in use\n" * 2)
# the toolkit's NRI plugin when containerd serves no NRI socket (gpu-stack-facts F14, containerd/nri#62)
NRI_UNREACHABLE = ('level=error msg="failed to connect to NRI service: dial unix /var/run/nri/nri.sock: connect: '
                   'no such file or directory"\n')


def _plugin_retry(n: int) -> str:
    # logrus text format as in gpu-operator#486; validator-strings.txt:1451
    return (f'time="2026-06-05T17:{30 + n * 5 // 60:02d}:{n * 5 % 60:02d}Z" level=info '
            f'msg="GPU resources are not yet discovered by the node, retry: {n}"\n')


def plugin_retries(upto: int) -> str:
    """`plugin-validation` while it waits for nvidia.com/gpu capacity (30 retries, 5 s apart)."""
    return "".join(_plugin_retry(n) for n in range(1, upto + 1))


def plugin_gave_up() -> str:
    """The previous `plugin-validation` run: 30 retries, then the error (validator-strings.txt:1454, 586)."""
    return plugin_retries(30) + ('time="2026-06-05T17:32:35Z" level=fatal msg="error validating plugin installation: '
                                 'GPU resources are not discovered by the node"\n')


def plugin_memory_crash(image: str) -> str:
    """A device plugin older than v0.17.4 on GB10 (F19, gpu-operator#1794)."""
    version = image.rsplit(":", 1)[-1]
    return (f'I0605 17:28:30.101234       1 main.go:235] "Starting NVIDIA Device Plugin" version="{version}"\n'
            "I0605 17:28:30.102544       1 main.go:364] Retrieving plugins.\n"
            "E0605 17:28:30.143901       1 main.go:177] error starting plugins: error creating plugin manager: "
            "error getting device memory: Not Supported\n")


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


def component(short: str, image: str | None = None) -> dict[str, str]:
    """Default logs of a GPU Operator component's containers, by container name; the version the device plugin and
    GFD print at start is that of `image` (the one the DaemonSet runs)."""
    found = dict(_COMPONENT_LOGS.get(short, {}))
    if image and ":" in image.rsplit("/", 1)[-1]:
        tag = image.rsplit(":", 1)[-1]
        found = {name: text.replace('version="v0.19.2"', f'version="{tag}"') for name, text in found.items()}
    return found
