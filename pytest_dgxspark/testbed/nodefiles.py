"""The text of a simulated node's files: OS release, netplan, RKE2 and containerd config, unit files, the NVIDIA
driver's /proc files, module table and kernel log, CDI specs."""

from __future__ import annotations

import json
from typing import Any

import yaml

from pytest_dgxspark.testbed.containers import COMMON_NODES

RKE2_SOCKET = "/run/k3s/containerd/containerd.sock"

# Loaded-module table (name, size, holders) of a DGX Spark; sizes are illustrative, names and holders real.
NVIDIA_MODULES = (("nvidia_uvm", 2076672, ()), ("nvidia_drm", 135168, ()), ("nvidia_modeset", 1638400, ("nvidia_drm",)),
                  ("nvidia", 14381056, ("nvidia_uvm", "nvidia_modeset")))
BASE_MODULES = (("br_netfilter", 32768, ()), ("bridge", 421888, ("br_netfilter",)), ("overlay", 212992, ()))
GCC_LINE = "gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04.1)"




def os_release(osd: dict[str, Any]) -> str:
    name = osd["name"]
    ident = osd.get("id") or name.lower()
    codename = osd.get("codename", "noble")
    pretty = osd.get("pretty_name") or f"{name} {osd['version_id']}"
    version = osd.get("version") or f"{pretty.removeprefix(name + ' ')} ({osd.get('codename_pretty', 'Noble Numbat')})"
    return (f'PRETTY_NAME="{pretty}"\nNAME="{name}"\nVERSION_ID="{osd["version_id"]}"\nVERSION="{version}"\n'
            f"VERSION_CODENAME={codename}\nID={ident}\nID_LIKE=debian\nHOME_URL=\"https://www.ubuntu.com/\"\n"
            'SUPPORT_URL="https://help.ubuntu.com/"\nBUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
            'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
            f"UBUNTU_CODENAME={codename}\nLOGO=ubuntu-logo\n")


def dgx_release(osd: dict[str, Any]) -> str:
    # Real DGX Spark form: DGX_SWBUILD_* from the factory image, DGX_OTA_* appended after an OTA.
    text = ('DGX_NAME="DGX Spark"\nDGX_PRETTY_NAME="NVIDIA DGX Spark"\nDGX_SWBUILD_DATE="2025-09-10-13-50-03"\n'
            f'DGX_SWBUILD_VERSION="{osd["dgx_release"]}"\nDGX_COMMIT_ID="833b4a7"\nDGX_PLATFORM="DGX Server for KVM"\n'
            'DGX_SERIAL_NUMBER="XXXXXXXXXXXX"\n')
    if osd.get("dgx_ota_version"):
        text += f'\nDGX_OTA_VERSION="{osd["dgx_ota_version"]}"\nDGX_OTA_DATE="Wed Nov 19 05:05:30 PM UTC 2025"\n'
    return text


def netplan(spec: dict[str, Any], node_ip: str, prefix: int, gateway: str) -> str:
    iface = spec["network"]["interface"]
    if spec["network"].get("dhcp"):
        return f"network:\n  version: 2\n  ethernets:\n    {iface}:\n      dhcp4: true\n"
    return (f"network:\n  version: 2\n  ethernets:\n    {iface}:\n      dhcp4: false\n      addresses:\n"
            f"        - {node_ip}/{prefix}\n      routes:\n        - to: default\n          via: {gateway}\n"
            f"      nameservers:\n        addresses: [{gateway}]\n")


def proc_version(driver: dict[str, Any]) -> str:
    """/proc/driver/nvidia/version: open module `for aarch64` form, or the proprietary form (gpu-stack-facts §1)."""
    arch = driver.get("arch", "aarch64")
    if driver.get("flavour", "open") == "open":
        module = f"NVIDIA UNIX Open Kernel Module for {arch}  {driver['version']}"
    elif arch == "aarch64":  # arm64 builds say `Kernel Module for aarch64`
        module = f"NVIDIA UNIX Kernel Module for {arch}  {driver['version']}"
    else:  # x86_64 proprietary: `NVIDIA UNIX x86_64 Kernel Module  <v>  <date>`, no `Release Build (builder)`
        return (f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {driver['version']}  Tue Sep 23 21:01:56 UTC 2025\n"
                f"GCC version:  {GCC_LINE}\n")
    return (f"NVRM version: {module}  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 21:01:56 UTC 2025\n"
            f"GCC version:  {GCC_LINE}\n")


def gpu_information(gpu: dict[str, Any], minor: int, driver_version: str) -> str:
    rows = [("Model", gpu["name"]), ("IRQ", "0"), ("GPU UUID", gpu["uuid"]), ("Video BIOS", "??.??.??.??.??"),
            ("Bus Type", "PCIe"), ("DMA Size", "52 bits"), ("DMA Mask", "0xfffffffffffff"),
            ("Bus Location", short_bus_id(gpu["bus_id"])), ("Device Minor", str(minor)),
            ("GPU Firmware", driver_version), ("GPU Excluded", "No")]
    return "".join(f"{key + ':':<14}\t {value}\n" for key, value in rows)


def short_bus_id(bus_id: str) -> str:
    """NVML bus id `0000000F:01:00.0` -> sysfs/procfs form `000f:01:00.0`."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest.lower()}"


def modules(spec: dict[str, Any]) -> str:
    mods = list(BASE_MODULES) + ([] if not spec["driver"]["loaded"] else list(NVIDIA_MODULES))
    mods += [(name, 16384, ()) for name in spec.get("modules", [])]
    return "".join(f"{n} {size} {len(h)} {''.join(x + ',' for x in h) or '-'} Live 0x0000000000000000 "
                   f"{'(O)' if n.startswith('nvidia') and spec['driver'].get('flavour') == 'open' else '(POE)' if n.startswith('nvidia') else ''}\n"
                   for n, size, h in mods)


def nvml_conf(spec: dict[str, Any]) -> str:
    driver = spec["driver"]
    major, minor = (spec["cuda_version"].split(".") + ["0"])[:2]
    lines = [f"driver_loaded={1 if driver['loaded'] else 0}", f"driver_version={driver['version']}",
             f"cuda_driver_version={int(major) * 1000 + int(minor) * 10}", f"nvml_version={major}.{driver['version']}",
             f"gpu_count={len(spec['gpus'])}"]
    for i, gpu in enumerate(spec["gpus"]):
        memory = gpu.get("memory", "not-supported")
        lines += [f"gpu{i}.name={gpu['name']}", f"gpu{i}.uuid={gpu['uuid']}", f"gpu{i}.bus_id={gpu['bus_id']}",
                  f"gpu{i}.memory={memory}", f"gpu{i}.compute={gpu.get('compute', '12.1')}",
                  f"gpu{i}.arch={gpu.get('arch', 10)}", f"gpu{i}.pci_device_id={gpu.get('pci_device_id', 0)}"]
    return "\n".join(lines) + "\n"


def defaults_files(spec: dict[str, Any], context: dict[str, str]) -> dict[str, str]:
    runtimes = ""
    default = str(spec.get("containerd_default_runtime") or "runc")
    if default != "runc":  # what a config-v3.toml.tmpl setting the CRI's default runtime makes RKE2 generate
        runtimes += f'\n[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "{default}"\n'

    if spec.get("toolkit"):
        runtimes = ('\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia"]\n'
                    '  runtime_type = "io.containerd.runc.v2"\n'
                    '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia".options]\n'
                    '  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n  SystemdCgroup = true\n')
    return {
        "/etc/rancher/rke2/config.yaml": rke2_config_yaml(spec, context),
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml": (
            "# File generated by rke2. DO NOT EDIT. Use config-v3.toml.tmpl instead.\nversion = 3\n"
            'root = "/var/lib/rancher/rke2/agent/containerd"\nstate = "/run/k3s/containerd"\n\n'
            '[grpc]\n  address = "/run/k3s/containerd/containerd.sock"\n\n'
            '[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]\n\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc"]\n  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."runc".options]\n  SystemdCgroup = true\n' + runtimes
            + ('' if spec.get("nri", True) else '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n')),
        "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf": (
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
            f"containerRuntimeEndpoint: unix://{RKE2_SOCKET}\nclusterDNS:\n- 10.43.0.10\nclusterDomain: cluster.local\n"),
        "/var/lib/rancher/rke2/agent/etc/crictl.yaml": f"runtime-endpoint: unix://{RKE2_SOCKET}\n",
    }


def rke2_config_yaml(spec: dict[str, Any], context: dict[str, str]) -> str:
    """/etc/rancher/rke2/config.yaml from the host's `rke2_config` mapping (its own data), `node_labels` and
    `node_taints` as `node-label`/`node-taint`; `{hostname}`, `{node_ip}` are substituted in string values."""
    config = {k: (v.format(**context) if isinstance(v, str) else v) for k, v in (spec.get("rke2_config") or {}).items()}
    if spec.get("node_labels"):
        config["node-label"] = [str(label) for label in spec["node_labels"]]
    if spec.get("node_taints"):
        config["node-taint"] = [str(taint) for taint in spec["node_taints"]]
    return "".join(yaml_item(key, value) for key, value in config.items())


def yaml_item(key: str, value: Any) -> str:
    """One top-level key as provisioning templates write it (`- item` lists indented two spaces, "0600" quoted)."""
    if isinstance(value, list):
        return f"{key}:\n" + "".join(f"  - {yaml_scalar(item)}\n" for item in value)
    if isinstance(value, dict):
        return f"{key}:\n" + "".join(f"  {k}: {yaml_scalar(v)}\n" for k, v in value.items())
    return f"{key}: {yaml_scalar(value)}\n"


def yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = yaml.safe_load(text) == text if text and text.strip() == text and ": " not in text and "#" not in text else False
    return text if plain else json.dumps(text)


def unit_file(unit: str, service: dict[str, Any]) -> str:
    """A unit file at the service's FragmentPath; RKE2's follows rke2 `bundle/lib/systemd/system/rke2-server.service`."""
    name = unit.removesuffix(".service")
    lines = ["[Unit]", f"Description={service.get('description', name)}"]
    rke2 = name in ("rke2-server", "rke2-agent")
    if rke2:
        other = "rke2-agent" if name == "rke2-server" else "rke2-server"
        lines += ["Documentation=https://github.com/rancher/rke2#readme", "Wants=network-online.target",
                  "After=network-online.target", f"Conflicts={other}.service"]
    lines += ["", "[Install]", "WantedBy=multi-user.target", "", "[Service]", f"Type={service.get('type', 'simple')}"]
    if rke2:
        lines += ["EnvironmentFile=-/etc/default/%N", "EnvironmentFile=-/etc/sysconfig/%N",
                  "EnvironmentFile=-/usr/local/lib/systemd/system/%N.env", "KillMode=process", "Delegate=yes",
                  "LimitNOFILE=1048576", "TimeoutStartSec=0", f"Restart={service.get('restart', 'always')}",
                  "RestartSec=5s", f"ExecCondition=/bin/sh -xc '! /usr/bin/systemctl is-active --quiet {other}'",
                  "ExecStartPre=-/sbin/modprobe br_netfilter", "ExecStartPre=-/sbin/modprobe overlay",
                  f"ExecStart=/usr/local/bin/rke2 {name.split('-')[1]}"]
    elif service.get("exec"):
        lines.append(f"ExecStart={service['exec']}")
    return "\n".join(lines) + "\n"


def cdi_management(spec: dict[str, Any]) -> str:
    """The toolkit's management CDI spec (kind management.nvidia.com/gpu, device `all`)."""
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] + [f"/dev/nvidia{i}" for i in range(len(spec["gpus"]))]
    edits = "".join(f"      - path: {n}\n" for n in nodes)
    return ("---\ncdiVersion: 0.5.0\nkind: management.nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
            f"    deviceNodes:\n{edits}containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n")


def cdi_device_plugin(spec: dict[str, Any]) -> str:
    """The device plugin's CDI spec (kind k8s.device-plugin.nvidia.com/gpu, one device per GPU UUID)."""
    devices = [{"name": g["uuid"], "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}}
               for i, g in enumerate(spec["gpus"])]
    return json.dumps({"cdiVersion": "0.5.0", "kind": "k8s.device-plugin.nvidia.com/gpu", "devices": devices,
                       "containerEdits": {"deviceNodes": [{"path": p} for p in COMMON_NODES]}})


def validation(item: str) -> str:
    if item == "driver":
        return ("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\n"
                "NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n")
    return ""


def kernel_log(spec: dict[str, Any]) -> list[str]:
    driver = spec["driver"]
    if not driver["loaded"]:
        return []
    lines = ["nvidia: loading out-of-tree module taints kernel.",
             f"NVRM: loading {proc_version({**driver, 'arch': spec['arch']}).splitlines()[0].removeprefix('NVRM version: ')}"]
    if driver.get("flavour") != "open":  # Blackwell runs only on the open modules (gpu-stack-facts F1); Hopper on both
        for g in spec["gpus"]:  # as a DGX Spark logs it (captures/gb10-proprietary-dmesg.txt, Start9Labs#3693)
            if g.get("family", "blackwell") == "blackwell":
                pci = short_bus_id(g["bus_id"]).rsplit(".", 1)[0]
                lines += [f"NVRM: GPU at PCI:{pci}: {g['uuid']}", f"NVRM: Xid (PCI:{pci}): 169, fd8cd000 94000000",
                          f"NVRM: GPU {short_bus_id(g['bus_id'])}: RmInitAdapter failed! (0x62:0x1a:2631)"]
    return lines
