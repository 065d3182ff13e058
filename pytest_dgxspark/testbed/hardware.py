"""What a simulated node is made of (architecture, CPUs, memory, GPUs), from `nodes.<name>.host`, for hosts and Nodes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

# uname -m -> Go's GOARCH, which kubelet reports as kubernetes.io/arch and nodeInfo.architecture.
KUBE_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}
# NFD's cpu-model.vendor_id per architecture (NFD `source/cpu`: ARM on arm64; GenuineIntel/AuthenticAMD are x86's).
CPU_VENDOR = {"aarch64": "ARM", "x86_64": "Intel"}

# Per-product facts a GPU answers with (nvml.h arch enum: 9 Hopper, 10 Blackwell; GFD `internal/lm/resource.go`
# family from the compute major). memory_mib `not-supported`: NVML_ERROR_NOT_SUPPORTED (GB10's unified memory,
# gpu-stack-facts §1); H100 80GB HBM3: 81559 MiB total as nvidia-smi reports it (captures/h100-8gpu-nvidia-smi.txt).
# Products not listed here need their facts in the scenario (memory, compute, arch, family).
PRODUCTS: dict[str, dict[str, Any]] = {
    "NVIDIA GB10": {"memory": "not-supported", "compute": "12.1", "arch": 10, "family": "blackwell",
                    "brand": "NVIDIA RTX", "architecture": "Blackwell", "mig_capable": False},
    "NVIDIA H100 80GB HBM3": {"memory": 81559, "compute": "9.0", "arch": 9, "family": "hopper",
                              "brand": "NVIDIA", "architecture": "Hopper", "pci_device_id": 0x233010DE, "mig_capable": True,
                              "memory_reserved": 454, "memory_free": 81106, "power_cap": "700W"},
    # Blackwell data-centre GPU: open kernel modules only, like GB10; 183359 MiB, 1000W (captures/b200-nvidia-smi.txt)
    "NVIDIA B200": {"memory": 183359, "compute": "10.0", "arch": 10, "family": "blackwell", "brand": "NVIDIA",
                    "architecture": "Blackwell", "mig_capable": True, "power_cap": "1000W"},
}
DEFAULT_PRODUCT = "NVIDIA GB10"
# The GB10's one GPU as DGX Spark enumerates it (gpu-stack-facts §1: NVML bus id 0000000F:01:00.0).
GB10_BUS_ID = "0000000F:01:00.0"
# PCI bus ids of the eight SXM H100s of a DGX H100 / HGX H100 (captures/h100-8gpu-nvidia-smi.txt).
HGX_BUS_IDS = ("00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
               "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0")


@dataclass(frozen=True)
class NodeFacts:
    """One node's hardware as the kubelet and NFD/GFD would report it."""

    arch: str
    kube_arch: str
    cpu_vendor: str
    cpus: int
    memory_kib: int
    gpus: tuple[dict[str, Any], ...]

    @property
    def product(self) -> str | None:
        return self.gpus[0]["name"] if self.gpus else None

    @property
    def gfd_product(self) -> str | None:
        """`nvidia.com/gpu.product` as GFD writes it (spaces become dashes)."""
        return self.product.replace(" ", "-") if self.product else None

    @property
    def family(self) -> str | None:
        return self.gpus[0].get("family") if self.gpus else None

    @property
    def compute(self) -> tuple[str, str] | None:
        if not self.gpus:
            return None
        major, minor = str(self.gpus[0].get("compute", "0.0")).split(".")[:2]
        return major, minor

    @property
    def mig_capable(self) -> bool:
        return bool(self.gpus and self.gpus[0].get("mig_capable"))


def normalize_gpus(gpus: Any, *, seed: str) -> list[dict[str, Any]]:
    """`gpus` as a list of full GPU mappings: a list of partial ones, or `{product, count}`; facts from PRODUCTS."""
    if isinstance(gpus, dict):
        unknown = sorted(set(gpus) - {"product", "count", "mig"})
        if unknown:
            raise ValueError(f"gpus: unknown keys {unknown}; the short form takes product, count, mig")
        count = gpus.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise ValueError(f"gpus.count must be a whole number >= 0, got {count!r}")
        item = {"name": gpus.get("product", DEFAULT_PRODUCT), **({"mig": gpus["mig"]} if "mig" in gpus else {})}
        gpus = [dict(item) for _ in range(count)]
    if not isinstance(gpus, list):
        raise ValueError(f"gpus must be a list of GPUs or a mapping {{product, count}}, got {type(gpus).__name__}")
    out = []
    for index, gpu in enumerate(gpus):
        if not isinstance(gpu, dict) or not gpu.get("name"):
            raise ValueError(f"gpus[{index}] must be a mapping with at least a name, got {gpu!r}")
        product = PRODUCTS.get(gpu["name"], {})
        full = {**product, **gpu}
        full.setdefault("memory", "not-supported")
        full.setdefault("compute", "12.1")
        full.setdefault("arch", 10)
        full.setdefault("pci_device_id", 0)
        full.setdefault("bus_id", _bus_id(gpu["name"], index))
        full.setdefault("uuid", "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_OID, f"{seed}/gpu{index}")))
        full.setdefault("mig", [])
        if not isinstance(full["mig"], list) or not all(
                isinstance(m, str) or (isinstance(m, dict) and set(m) <= {"profile", "uuid"} and "profile" in m)
                for m in full["mig"]):
            raise ValueError(f"gpus[{index}].mig must be a list of MIG profiles (e.g. [1g.10gb, 1g.10gb]) or of "
                             f"{{profile, uuid}}, got {full['mig']!r}")
        out.append(full)
    return out


def _bus_id(name: str, index: int) -> str:
    if name == "NVIDIA GB10" and index == 0:
        return GB10_BUS_ID
    if index < len(HGX_BUS_IDS):
        return HGX_BUS_IDS[index]
    return f"00000000:{0x10 + index:02X}:00.0"


def facts(host: dict[str, Any], *, name: str) -> NodeFacts:
    """The facts of one node from its (merged or partial) host spec; GB10 DGX Spark values where it says nothing."""
    arch = str(host.get("arch", "aarch64"))
    gpus = normalize_gpus(host["gpus"], seed=name) if "gpus" in host else normalize_gpus([{"name": DEFAULT_PRODUCT}], seed=name)
    return NodeFacts(arch=arch, kube_arch=KUBE_ARCH.get(arch, arch), cpu_vendor=str(host.get("cpu_vendor", CPU_VENDOR.get(arch, ""))),
                     cpus=int(host.get("cpus", 20)), memory_kib=int(host.get("memory_kib", 125506464)), gpus=tuple(gpus))
