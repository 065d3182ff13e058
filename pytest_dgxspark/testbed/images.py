"""The image catalogue of a simulated cluster: which images a pull finds, for which architectures, what they print."""

from __future__ import annotations

from typing import Any

from pytest_dgxspark.testbed.logs import VECTORADD

# Real images and facts (gpu-stack-facts §7): the GPU Operator docs' CUDA sample is multi-arch and runs on aarch64
# (GH200, CSCS docs); cuda-sample:nbody claims multi-arch but its binary fails on arm64 with "exec format error"
# (kubernetes-sigs/dra-driver-nvidia-gpu PR#163); busybox 1.36 is a multi-arch Docker official image.
CUDA_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
DEFAULT_IMAGES: dict[str, dict[str, Any]] = {
    "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04": {
        "arch": ["amd64", "arm64"], "entrypoint": "/cuda-samples/vectorAdd", "log": VECTORADD, "env": CUDA_ENV},
    "nvcr.io/nvidia/k8s/cuda-sample:nbody": {"arch": ["amd64"], "entrypoint": "/cuda-samples/nbody", "log": "",
                                             "env": CUDA_ENV},
    "docker.io/library/busybox:1.36": {"arch": ["amd64", "arm64"], "entrypoint": "/bin/sh", "log": "", "shell": "busybox"},
}
ALL_ARCHES = ["amd64", "arm64"]


def normalize(image: str) -> str:
    """`busybox:1.36` -> `docker.io/library/busybox:1.36`, as containerd resolves a short name; no tag -> `:latest`."""
    name, digest = (image.split("@", 1) + [""])[:2]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    return name + (f"@{digest}" if digest else "")


def catalogue(scenario_images: dict[str, Any] | None, running: list[str]) -> dict[str, dict[str, Any]]:
    """DEFAULT_IMAGES, every image the cluster already runs (pulled, so it exists), then the scenario's own entries
    (`cluster.images`; `null` removes one)."""
    found = {normalize(k): dict(v) for k, v in DEFAULT_IMAGES.items()}
    for image in running:
        found.setdefault(normalize(image), {"arch": list(ALL_ARCHES), "log": ""})
    for image, entry in (scenario_images or {}).items():
        if entry is None:
            found.pop(normalize(image), None)
        else:
            found[normalize(image)] = {"arch": list(ALL_ARCHES), "log": "", **dict(entry)}
    return found


def pull_error(image: str) -> str:
    """containerd's answer for a reference the registry does not have (as kubelet events quote it)."""
    ref = normalize(image)
    return (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve reference '
            f'"{ref}": {ref}: not found')


def exec_format_error(entry: dict[str, Any]) -> str:
    """What runc prints when the image's entrypoint is built for another architecture (F25)."""
    return f"exec {entry.get('entrypoint', '/bin/sh')}: exec format error\n"
