"""The testbed's simulated DGX Spark hosts, checked over real SSH and through testinfra."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

from pytest_dgxspark.testbed import captures, hostfiles, hosts, leftovers, native, netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not os.path.exists("/usr/sbin/sshd"),
    reason="simulated hosts need root, util-linux unshare and OpenSSH sshd",
)
TESTBED_ID = f"pytest-hosts-{os.getpid()}"
NVML_PROBE = r"""
import ctypes, json
out = {}
l = ctypes.CDLL("libnvidia-ml.so.1")
l.nvmlErrorString.restype = ctypes.c_char_p
out["init"] = l.nvmlInit_v2()
if out["init"] == 0:
    n = ctypes.c_uint(); out["count_rc"] = l.nvmlDeviceGetCount_v2(ctypes.byref(n)); out["count"] = n.value
    h = ctypes.c_void_p(); l.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    buf = ctypes.create_string_buffer(96); l.nvmlDeviceGetName(h, buf, 96); out["name"] = buf.value.decode()
    l.nvmlSystemGetDriverVersion(buf, 96); out["driver"] = buf.value.decode()
    mem = (ctypes.c_ulonglong * 3)(); out["memory_rc"] = l.nvmlDeviceGetMemoryInfo(h, mem)
    ma, mi = ctypes.c_int(), ctypes.c_int(); l.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi))
    out["compute"] = f"{ma.value}.{mi.value}"
    cuda = ctypes.c_int(); l.nvmlSystemGetCudaDriverVersion(ctypes.byref(cuda)); out["cuda"] = cuda.value
    pci = ctypes.create_string_buffer(68); l.nvmlDeviceGetPciInfo_v3(h, pci); out["bus_id"] = pci.raw[36:68].split(b"\0")[0].decode()
    out["shutdown"] = l.nvmlShutdown()
out["error"] = l.nvmlErrorString(out["init"]).decode()
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Node:
    handle: hosts.HostHandle
    link: netns.Link
    ssh_config: Path
    started_s: float

    def ssh(self, command: str, timeout: float = 20, *options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.ssh_config), *options, self.handle.address, command],
                              capture_output=True, text=True, timeout=timeout)

    def testinfra(self) -> Any:
        return testinfra.get_host(f"ssh://root@{self.handle.address}", ssh_config=str(self.ssh_config), controlpersist=0)


@pytest.fixture(scope="module")
def keypair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("client") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture(scope="module")
def slot() -> Iterator[int]:
    yield netns.allocate_subnet(TESTBED_ID)
    netns.release_subnet(TESTBED_ID)


_INDEX = iter(range(1, netns.MAX_NODES + 1))


@contextlib.contextmanager
def running(spec: dict[str, Any], base: Path, keypair: Path, slot: int, name: str = "gpu-01") -> Iterator[Node]:
    index = next(_INDEX)
    host_ip, node_ip, prefix = netns.node_addresses(slot, index)
    ns_name, ifname = netns.names_for(slot, index)
    link = netns.create(ns_name, ifname, host_ip, node_ip, prefix)
    handle = None
    control_dir = Path(tempfile.mkdtemp(prefix="dgxs-cm-"))  # short: unix socket paths are limited to 108 bytes
    config = base / "ssh_config"
    try:
        config.write_text(f"Host *\n  User root\n  IdentityFile {keypair}\n  IdentitiesOnly yes\n"
                          f"  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
                          f"  ConnectTimeout 5\n  BatchMode yes\n  ControlMaster auto\n"
                          f"  ControlPath {control_dir}/%C\n  ControlPersist 30\n")
        start = time.monotonic()
        handle = hosts.start_host(name, spec, node_dir=base / "node", link=link, scenario="hosts-test",
                                  authorized_key=keypair.with_suffix(".pub").read_text(), host_key_dir=base / "keys")
        yield Node(handle, link, config, time.monotonic() - start)
    finally:
        subprocess.run(["ssh", "-F", str(config), "-O", "exit", node_ip], capture_output=True, timeout=10)
        if handle is not None:
            hosts.stop_host(handle)
        netns.destroy(link)
        shutil.rmtree(control_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory, keypair: Path, slot: int) -> Iterator[Node]:
    with running({}, tmp_path_factory.mktemp("healthy"), keypair, slot) as node:
        yield node


@pytest.mark.slow
def test_a_healthy_host_starts_within_seconds_and_counts_ssh_logins(healthy: Node) -> None:
    assert healthy.started_s < 10, f"one-node start took {healthy.started_s:.1f}s"
    before = hosts.ssh_connection_count(healthy.handle.node_dir)
    result = healthy.ssh("hostname", 20, "-S", "none")
    assert (result.returncode, result.stdout) == (0, "gpu-01\n"), result.stderr
    assert hosts.ssh_connection_count(healthy.handle.node_dir) == before + 1


@pytest.mark.slow
def test_every_host_names_its_scenario_and_sshd_names_the_testbed(healthy: Node) -> None:
    assert healthy.ssh("cat /etc/dgxspark-testbed").stdout == "hosts-test\n"
    with socket.create_connection((healthy.handle.address, 22), timeout=5) as sock:
        banner = sock.recv(256)
    assert banner.startswith(b"SSH-2.0-OpenSSH_") and banner.endswith(b" dgxspark-testbed\r\n"), banner


def test_config_yaml_is_written_from_the_hosts_own_data() -> None:
    context = {"hostname": "gpu-01", "node_ip": "10.0.0.2", "name": "gpu-01"}
    assert hostfiles.rke2_config_yaml(hosts.host_spec({}), context) == (
        'write-kubeconfig-mode: "0600"\nnode-name: gpu-01\ncni: cilium\ndisable-kube-proxy: false\n'
        "etcd-s3: true\netcd-s3-endpoint: s3.tirosh.home.arpa:9000\netcd-s3-bucket: tirosh-home-etcd-snapshots\n"
        "etcd-s3-folder: gpu\n"
        "kubelet-arg:\n  - system-reserved=memory=4Gi\n  - kube-reserved=memory=2Gi\n"
        "  - eviction-hard=memory.available<2Gi\nnode-label:\n"
        "  - node.tirosh.ai/role=gpu\n  - node.tirosh.ai/workload=ai\n  - node.tirosh.ai/model=dgx-spark\n"
        "  - nvidia.com/gpu.present=true\n")
    # the site's etcd-s3 upload is a server's, its credentials in the role's config.yaml.d drop-in
    assert list(hosts.host_spec({})["files"]) == ["/etc/rancher/rke2/config.yaml.d/50-etcd-s3-credentials.yaml"]
    agent = hosts.host_spec({}, name="cpu-01", role="agent")
    assert not any(key.startswith("etcd-s3") for key in agent["rke2_config"]) and agent["files"] == {}
    own = hosts.host_spec({"rke2_config": {"cni": "canal", "disable-kube-proxy": True}, "node_labels": ["a.b/c=d"],
                           "node_taints": ["nvidia.com/gpu=present:NoSchedule"]})
    assert hostfiles.rke2_config_yaml(own, context) == (
        'write-kubeconfig-mode: "0600"\nnode-name: gpu-01\ncni: canal\ndisable-kube-proxy: true\n'
        "etcd-s3: true\netcd-s3-endpoint: s3.tirosh.home.arpa:9000\netcd-s3-bucket: tirosh-home-etcd-snapshots\n"
        "etcd-s3-folder: gpu\n"
        "kubelet-arg:\n  - system-reserved=memory=4Gi\n  - kube-reserved=memory=2Gi\n"
        "  - eviction-hard=memory.available<2Gi\nnode-label:\n  - a.b/c=d\nnode-taint:\n  - nvidia.com/gpu=present:NoSchedule\n")


@pytest.mark.slow
def test_testinfra_sees_ubuntu_on_aarch64_with_rke2_state(healthy: Node) -> None:
    host = healthy.testinfra()
    assert (host.system_info.distribution, host.system_info.release, host.system_info.arch) == ("ubuntu", "24.04", "aarch64")
    assert host.check_output("uname -r") == "6.17.0-1014-nvidia"
    assert host.file("/etc/dgx-release").contains('DGX_NAME="DGX Spark"')
    assert host.file("/etc/rancher/rke2/config.yaml").contains("cni: cilium")
    assert host.file("/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf").contains(
        "containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock")
    service = host.service("rke2-server")
    assert type(service).__name__ == "SystemdService"
    assert service.is_running and service.is_enabled
    assert not host.service("rke2-agent").is_running and not host.service("rke2-agent").is_enabled
    assert service.systemd_properties["FragmentPath"] == "/usr/local/lib/systemd/system/rke2-server.service"
    assert host.file("/usr/local/lib/systemd/system/rke2-server.service").contains("^ExecStart=/usr/local/bin/rke2 server$")
    assert int(service.systemd_properties["MainPID"]) == host.process.get(comm="rke2").pid
    containerd = sorted(p.args for p in host.process.filter(comm="containerd"))
    assert len(containerd) == 2 and "-a /run/k3s/containerd/containerd.sock" in containerd[1]
    assert containerd[0] == "/usr/bin/containerd"  # DGX OS's system containerd under Docker, beside RKE2's
    assert "--config-dir=/var/lib/rancher/rke2/agent/etc/kubelet.conf.d" in host.process.get(comm="kubelet").args
    assert host.process.get(comm="dockerd").args == "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"
    assert host.service("docker").is_running and host.service("containerd").is_enabled
    assert host.socket("unix:///run/k3s/containerd/containerd.sock").is_listening
    assert host.socket("unix:///run/docker.sock").is_listening and host.socket("unix:///run/containerd/containerd.sock").is_listening


@pytest.mark.slow
def test_systemctl_answers_like_systemd(healthy: Node) -> None:
    assert healthy.ssh("systemctl --version").stdout.startswith("systemd 255 (")
    unknown = healthy.ssh("systemctl is-active cri-docker")
    assert (unknown.returncode, unknown.stdout) == (3, "inactive\n")
    status = healthy.ssh("systemctl status cri-docker")
    assert (status.returncode, status.stderr) == (4, "Unit cri-docker.service could not be found.\n")
    assert healthy.ssh("systemctl is-enabled rke2-agent").returncode == 1
    assert "rke2-server.service" in healthy.ssh("systemctl list-units --type=service --no-legend").stdout


@pytest.mark.slow
def test_nvidia_smi_prints_the_gb10_formats(healthy: Node) -> None:
    table = healthy.ssh("nvidia-smi")
    assert table.returncode == 0
    assert "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |" in table.stdout
    assert "|   0  NVIDIA GB10                    On  |   0000000F:01:00.0 Off |                  N/A |" in table.stdout
    assert "| N/A   40C    P8              4W /  N/A  | Not Supported          |      0%      Default |" in table.stdout
    # header and GPU rows byte for byte as the captured DGX Spark table (k8s-device-plugin#1482)
    assert table.stdout.splitlines()[1:12] == captures.body("gb10-nvidia-smi.txt").splitlines()[:11]
    listing = healthy.ssh("nvidia-smi -L").stdout
    assert listing == "GPU 0: NVIDIA GB10 (UUID: GPU-5e4c3a8e-8f0b-6d2a-91c7-3b1f0e2d4a67)\n"
    csv = healthy.ssh("nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv")
    assert csv.stdout == "index, name, memory.total [MiB], memory.used [MiB]\n0, NVIDIA GB10, [N/A], [N/A]\n"
    bare = healthy.ssh("nvidia-smi --query-gpu=driver_version,compute_cap,pci.bus_id --format=csv,noheader,nounits")
    assert bare.stdout == "580.95.05, 12.1, 0000000F:01:00.0\n"
    bad = healthy.ssh("nvidia-smi --query-gpu=bogus --format=csv")
    assert bad.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad.stdout
    assert "Addressing Mode                       : ATS" in healthy.ssh("nvidia-smi -q").stdout


@pytest.mark.slow
def test_docker_answers_like_dgx_os_docker_with_the_nvidia_runtime(healthy: Node) -> None:
    version = healthy.ssh("docker version")
    assert version.returncode == 0
    assert version.stdout.startswith(captures.body("dgx-spark-docker-version.txt"))  # as captured on a DGX Spark
    info = healthy.ssh("docker info").stdout
    assert " Runtimes: io.containerd.runc.v2 nvidia runc\n Default Runtime: runc\n" in info
    assert " Architecture: aarch64\n" in info and " Server Version: 28.5.1\n" in info
    assert json.loads(healthy.ssh("cat /etc/docker/daemon.json").stdout) == {
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}


@pytest.mark.slow
def test_a_stopped_docker_answers_like_the_real_cli(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"docker": {"running": False}}, tmp_path, keypair, slot) as node:
        result = node.ssh("docker info")
        assert result.returncode == 1
        assert result.stderr == "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n"
        assert node.ssh("systemctl is-active docker").stdout == "inactive\n"
        assert node.ssh("pgrep -x dockerd").returncode == 1


@pytest.mark.slow
def test_nvml_answers_through_ctypes_with_not_supported_memory(healthy: Node) -> None:
    result = healthy.ssh(f"python3 -c '{NVML_PROBE}'")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "init": 0, "count_rc": 0, "count": 1, "name": "NVIDIA GB10", "driver": "580.95.05", "memory_rc": 3,
        "compute": "12.1", "cuda": 13000, "bus_id": "0000000F:01:00.0", "shutdown": 0, "error": "Success"}


@pytest.mark.slow
def test_host_layer_files_devices_and_network(healthy: Node) -> None:
    ldconfig = healthy.ssh("ldconfig -p | grep libnvidia-ml.so.1").stdout
    assert "libnvidia-ml.so.1 (libc6,AArch64) => " in ldconfig and "/aarch64-linux-gnu/libnvidia-ml.so.1" in ldconfig
    version = healthy.ssh("cat /proc/driver/nvidia/version").stdout
    assert version.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build")
    assert "Bus Location: \t 000f:01:00.0" in healthy.ssh("cat /proc/driver/nvidia/gpus/000f:01:00.0/information").stdout
    assert healthy.ssh("test -c /dev/nvidia0 && test -c /dev/nvidiactl && test -c /dev/nvidia-uvm").returncode == 0
    assert "nvidia_uvm" in healthy.ssh("lsmod | grep nvidia").stdout
    addrs = json.loads(healthy.ssh("ip -j addr show enP7s7").stdout)
    assert [(a["local"], a["prefixlen"]) for a in addrs[0]["addr_info"] if a["family"] == "inet"] == [(healthy.handle.address, 30)]
    netplan = healthy.ssh("cat /etc/netplan/50-cloud-init.yaml").stdout
    assert "dhcp4: false" in netplan and f"- {healthy.handle.address}/30" in netplan
    assert healthy.ssh("test -f /run/nvidia/validations/driver-ready && test -x /usr/local/nvidia/toolkit/nvidia-container-runtime").returncode == 0
    crictl = healthy.ssh("/var/lib/rancher/rke2/bin/crictl version")
    assert "RuntimeName:  containerd\nRuntimeVersion:  v2.1.5-k3s1" in crictl.stdout, crictl.stderr


@pytest.mark.slow
def test_rke2_containerd_2_serves_nri_and_config_yaml_carries_the_node_labels(healthy: Node) -> None:
    assert healthy.ssh("test -S /var/run/nri/nri.sock").returncode == 0
    assert "node-label:\n  - node.tirosh.ai/role=gpu\n" in healthy.ssh("cat /etc/rancher/rke2/config.yaml").stdout


@pytest.mark.parametrize(("over", "serves"), [({}, True), ({"nri": False}, False),
                                               ({"containerd_version": "1.7.27-k3s1"}, False)])
def test_nri_socket_is_served_only_by_rke2_containerd_2_with_nri(over: dict[str, Any], serves: bool) -> None:
    spec = hosts.host_spec(over)
    plans = hostfiles._process_plans(spec, {"hostname": "gpu-01", "node_ip": "10.0.0.2", "name": "gpu-01"})
    listening = {p.exe: p.listen for p in plans}
    rke2 = listening["/var/lib/rancher/rke2/data/v1.34.10-rke2r1/bin/containerd"]
    assert ("/run/nri/nri.sock" in rke2) is serves
    assert "/run/k3s/containerd/containerd.sock" in rke2
    assert listening["/usr/bin/containerd"] == ("/run/containerd/containerd.sock",)  # Docker's, never NRI


@pytest.mark.slow
def test_the_node_cannot_write_the_real_root(healthy: Node) -> None:
    assert healthy.ssh("touch /etc/dgxspark-written /usr/dgxspark-written && ls /etc/dgxspark-written").returncode == 0
    assert not Path("/etc/dgxspark-written").exists() and not Path("/usr/dgxspark-written").exists()
    assert not Path("/etc/rancher").exists() and not Path("/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1").exists()


H100_UUIDS = [line.split(": ")[1] for line in captures.body("h100-8gpu-nvidia-smi-q.txt").splitlines() if "GPU UUID" in line]
H100_BUSES = [line.split()[1] for line in captures.body("h100-8gpu-nvidia-smi-q.txt").splitlines() if line.startswith("GPU 0000")]


@pytest.mark.slow
def test_an_eight_gpu_x86_64_h100_host_answers_like_the_captured_one(tmp_path: Path, keypair: Path, slot: int) -> None:
    spec = {"arch": "x86_64", "kernel": "6.8.0-49-generic", "os": {"dgx_release": None}, "network": {"interface": "eno1"},
            "driver": {"version": "565.57.01"}, "cuda_version": "12.7",
            "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": u, "bus_id": b} for u, b in zip(H100_UUIDS, H100_BUSES)],
            "files": {"/proc/driver/nvidia/version": {"capture": "proc-driver-nvidia-version-open-x86_64.txt"}},
            "outputs": {"nvidia-smi -q": {"capture": "h100-8gpu-nvidia-smi-q.txt"},
                        "systemctl is-active fabricmanager": {"stdout": "failed\n", "rc": 3}},
            "journals": {"rke2-server.service": "Nov 29 18:00:01 dc-01 rke2[1201]: first\nNov 29 18:00:02 dc-01 rke2[1201]: second\n"}}
    with running(spec, tmp_path, keypair, slot, name="dc-01") as node:
        assert node.ssh("uname -m").stdout == "x86_64\n"
        ldconfig = node.ssh("ldconfig -p | grep libnvidia-ml.so.1").stdout
        assert "libnvidia-ml.so.1 (libc6,x86-64) => " in ldconfig and "/x86_64-linux-gnu/libnvidia-ml.so.1" in ldconfig
        assert node.ssh("cat /proc/driver/nvidia/version").stdout == captures.body("proc-driver-nvidia-version-open-x86_64.txt")
        assert node.ssh("nvidia-smi -q").stdout == captures.body("h100-8gpu-nvidia-smi-q.txt")
        assert node.ssh("nvidia-smi -L").stdout == "".join(
            f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: {u})\n" for i, u in enumerate(H100_UUIDS))
        csv = node.ssh("nvidia-smi --query-gpu=index,memory.total,memory.free,compute_cap,pci.device_id --format=csv,noheader")
        assert csv.stdout.splitlines()[7] == "7, 81559 MiB, 81106 MiB, 9.0, 0x233010DE"
        rows = node.ssh("nvidia-smi").stdout.splitlines()
        captured = captures.body("h100-8gpu-nvidia-smi.txt").splitlines()
        assert rows[2] == captured[1]  # the NVIDIA-SMI header line, as captured
        assert [r[:42] + r[66:] for r in rows[8:40:4]] == [c[:42] + c[66:] for c in captured[7:39:4]]  # name, bus, ECC
        assert [len(r) for r in rows[8:40]] == [len(c) for c in captured[7:39]]
        probe = json.loads(node.ssh(f"python3 -c '{NVML_PROBE}'").stdout)
        assert (probe["count"], probe["name"], probe["memory_rc"], probe["compute"]) == (8, "NVIDIA H100 80GB HBM3", 0, "9.0")
        assert node.ssh("journalctl -u rke2-server --no-pager -n 1").stdout == "Nov 29 18:00:02 dc-01 rke2[1201]: second\n"
        assert node.ssh("journalctl -u rke2-agent").stdout == "-- No entries --\n"
        fabric = node.ssh("systemctl is-active fabricmanager")  # a verbatim result of any shimmed command
        assert (fabric.returncode, fabric.stdout) == (3, "failed\n")


@pytest.mark.slow
def test_a_b200_node_is_shaped_like_the_captured_one(tmp_path: Path, keypair: Path, slot: int) -> None:
    gpus = [{"name": "NVIDIA B200", "bus_id": "00000000:63:00.0", "temperature": 26, "power_draw": "139W", "memory_used": 0},
            {"name": "NVIDIA B200", "bus_id": "00000000:68:00.0", "temperature": 30, "power_draw": "142W", "memory_used": 0}]
    spec = {"arch": "x86_64", "gpus": gpus, "driver": {"version": "610.43.02"}, "cuda_version": "13.3"}
    with running(spec, tmp_path, keypair, slot) as node:
        rows = node.ssh("nvidia-smi").stdout.splitlines()
        captured = captures.body("b200-nvidia-smi.txt").splitlines()
        assert rows[1:15] == captured[1:15]  # R610's KMD/CUDA UMD header, both GPUs' rows, byte for byte
        csv = node.ssh("nvidia-smi --query-gpu=memory.total,compute_cap,power.limit --format=csv,noheader").stdout
        assert csv == "183359 MiB, 10.0, 1000.00 W\n183359 MiB, 10.0, 1000.00 W\n"


@pytest.mark.slow
def test_an_h100_with_mig_lists_its_devices_like_the_captured_one(tmp_path: Path, keypair: Path, slot: int) -> None:
    captured = captures.body("h100-mig-nvidia-smi-L.txt").replace("\r\n", "\n")  # the docs file has CRLF endings
    lines = captured.splitlines()
    gpu = {"name": "NVIDIA H100 80GB HBM3", "uuid": lines[0].split("UUID: ")[1].rstrip(")"),
           "mig": [{"profile": "1g.10gb", "uuid": line.split("UUID: ")[1].rstrip(")")} for line in lines[1:]]}
    with running({"arch": "x86_64", "gpus": [gpu]}, tmp_path, keypair, slot) as node:
        assert node.ssh("nvidia-smi -L").stdout == captured
        assert node.ssh("nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader").stdout == "Enabled\n"


@pytest.mark.slow
def test_driver_not_loaded_fails_like_the_real_driver(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"driver": {"loaded": False}}, tmp_path, keypair, slot) as node:
        smi = node.ssh("nvidia-smi")
        assert smi.returncode == 9
        assert smi.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                     "Make sure that the latest NVIDIA driver is installed and running.")
        probe = json.loads(node.ssh(f"python3 -c '{NVML_PROBE}'").stdout)
        assert (probe["init"], probe["error"]) == (9, "Driver Not Loaded")
        assert node.ssh("lsmod | grep -c nvidia").stdout.strip() == "0"
        assert node.ssh("test -e /proc/driver/nvidia || test -e /dev/nvidia0").returncode == 1


@pytest.mark.slow
def test_faults_hang_proprietary_missing_nvml_and_docker_cri(tmp_path: Path, keypair: Path, slot: int) -> None:
    spec = {
        "driver": {"flavour": "proprietary", "smi": "hang"}, "nvml": "missing", "network": {"dhcp": True},
        "containerd_socket": False,
        "services": {"docker": {"active": "active", "enabled": "enabled", "main": "dockerd"}},
        "processes": ["/usr/local/bin/rke2 server", "dockerd -H fd:// --containerd=/run/containerd/containerd.sock",
                      "/usr/bin/cri-dockerd --container-runtime-endpoint fd://", "/usr/bin/containerd"],
    }
    with running(spec, tmp_path, keypair, slot) as node:
        assert node.ssh("timeout 3 nvidia-smi").returncode == 124
        version = node.ssh("cat /proc/driver/nvidia/version").stdout
        assert version.startswith("NVRM version: NVIDIA UNIX Kernel Module for aarch64  580.95.05  Release Build")
        dmesg = node.ssh("dmesg").stdout
        # the GPU's lines as a DGX Spark with the proprietary module logs them (Start9Labs#3693), UUID aside
        captured = captures.body("gb10-proprietary-dmesg.txt").replace("GPU-0f059bf0-a212-94c1-44a7-1068a6c6be66",
                                                                       "GPU-5e4c3a8e-8f0b-6d2a-91c7-3b1f0e2d4a67")
        assert [line.split("] ", 1)[1] for line in dmesg.splitlines() if "000f:01:00" in line] == captured.splitlines()
        missing = node.ssh("python3 -c 'import ctypes; ctypes.CDLL(\"libnvidia-ml.so.1\")'")
        assert missing.returncode == 1 and "libnvidia-ml.so.1: cannot open shared object file" in missing.stderr
        assert node.ssh("ldconfig -p | grep -c libnvidia-ml").stdout.strip() == "0"
        assert "dhcp4: true" in node.ssh("cat /etc/netplan/50-cloud-init.yaml").stdout
        host = node.testinfra()
        assert host.service("docker").is_running
        assert [p.comm for p in host.process.filter(comm="dockerd")] == ["dockerd"]
        assert host.process.get(comm="cri-dockerd").args.startswith("/usr/bin/cri-dockerd")
        assert host.process.get(comm="containerd").args == "/usr/bin/containerd"
        assert host.socket("unix:///run/containerd/containerd.sock").is_listening
        assert node.ssh("test -e /var/run/nri/nri.sock").returncode == 1  # no RKE2 containerd, no NRI
        crictl = node.ssh("/var/lib/rancher/rke2/bin/crictl version")
        assert crictl.returncode == 1
        assert "dial unix /run/k3s/containerd/containerd.sock: connect: no such file or directory" in crictl.stderr


@pytest.mark.slow
def test_a_dropped_host_kills_the_session_and_refuses_later_connections(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"faults": {"drop_after": 2}}, tmp_path, keypair, slot) as node:
        assert [node.ssh("hostname", 10, "-S", "none").returncode for _ in range(2)] == [0, 0]
        dropped = node.ssh("hostname", 10, "-S", "none")
        assert dropped.returncode == 255 and dropped.stdout == ""
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((node.handle.address, 22), timeout=3).close()


@pytest.mark.slow
def test_a_frozen_host_keeps_tcp_up_while_its_commands_hang(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"faults": {"freeze_after": 1}}, tmp_path, keypair, slot) as node:
        assert node.ssh("hostname", 10, "-S", "none").stdout == "gpu-01\n"
        with pytest.raises(subprocess.TimeoutExpired):
            node.ssh("hostname", 3, "-S", "none")
        with socket.create_connection((node.handle.address, 22), timeout=3) as sock:
            assert sock.recv(64).startswith(b"SSH-2.0-")


@pytest.mark.slow
def test_the_suites_ssh_backend_gives_up_on_a_frozen_host_instead_of_hanging(tmp_path: Path, keypair: Path, slot: int) -> None:
    from pytest_dgxspark.site.model import HostSpec
    from pytest_dgxspark.targets.ssh import HostTarget, HostUnreachable

    with running({"faults": {"freeze_after": 1}}, tmp_path, keypair, slot) as node:
        control = Path(tempfile.mkdtemp(prefix="dgxs-fz-"))
        spec = HostSpec("gpu-01", node.handle.address, identity_file=str(keypair), ssh_config=str(node.ssh_config))
        target = HostTarget(spec, str(control), 0).connect()  # command 1: the master connection's `true`
        backend = target.host.backend
        backend._local_limit = 2  # the run's limit is the command timeout + 30 s; the frozen host never answers
        start = time.monotonic()
        with pytest.raises(HostUnreachable) as info:  # a session that never returns is a fault, never output
            backend.run_ssh("hostname")
        assert info.value.cause.kind == "timeout" and "a command did not return within 2 s" in str(info.value)
        assert time.monotonic() - start < 15
        with pytest.raises(HostUnreachable, match=r"gpu-01 \(.*\): cannot read the host over SSH: the host stopped "
                                                  r"answering during the run .*a command did not return within 2 s"):
            target.run("true")  # at once: a host that stopped answering is not waited for again
        target.close()
        shutil.rmtree(control, ignore_errors=True)


@pytest.mark.slow
def test_latency_delays_every_ssh_command(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"faults": {"latency_ms": 300}}, tmp_path, keypair, slot) as node:
        node.ssh("true")  # opens the shared master connection
        start = time.monotonic()
        assert node.ssh("echo ok").stdout == "ok\n"
        assert time.monotonic() - start >= 0.3


def test_an_unknown_host_key_is_named_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match=r"^nodes.<name>.host: faluts: unknown key \(did you mean 'faults'\?\); the keys are "
                                         r"listed in docs/scenarios-hosts.md$"):
        hosts.host_spec({"faluts": {"drop_after": 3}})


def test_fault_keys_are_checked() -> None:
    with pytest.raises(ValueError, match=r"faults.freeze: unknown; expected one of \['drop_after', 'freeze_after', 'latency_ms'\]"):
        hosts.host_spec({"faults": {"freeze": 1}})
    with pytest.raises(ValueError, match=r"faults.latency_ms must be a whole number >= 0"):
        hosts.host_spec({"faults": {"latency_ms": "20ms"}})


@pytest.mark.slow
def test_unreachable_host_refuses_connections(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({"unreachable": True}, tmp_path, keypair, slot) as node:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((node.handle.address, 22), timeout=3).close()
        assert node.ssh("true", 10).returncode == 255


@pytest.mark.slow
def test_stop_leaves_no_process_mount_or_namespace(tmp_path: Path, keypair: Path, slot: int) -> None:
    with running({}, tmp_path, keypair, slot) as node:
        info = json.loads((node.handle.node_dir / "host.json").read_text())
        assert node.ssh("true").returncode == 0
    pidns = info["pidns"]
    survivors = [p for p in os.listdir("/proc") if p.isdigit() and _ns(p) == pidns]
    assert survivors == []
    assert node.link.netns not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
    hosts.stop_host(node.handle)  # idempotent


def _ns(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def test_spec_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match=r"nodes.<name>.host: driver.smi must be ok\|hang\|error, got 'slow'"):
        hosts.host_spec({"driver": {"smi": "slow"}})
    assert hosts.host_spec({"driver": {"loaded": False}})["driver"]["version"] == "580.95.05"
    assert "toolkit" not in hosts.host_spec({"toolkit": None})
    assert hosts.host_spec({}, name="gpu-02")["hostname"] == "gpu-02"
    agent = hosts.host_spec({"hostname": "edge"}, name="gpu-02", role="agent")
    assert (agent["hostname"], agent["processes"][0]) == ("edge", "/usr/local/bin/rke2 agent")
    assert agent["services"]["rke2-agent"]["active"] == "active" and agent["services"]["rke2-server"]["enabled"] == "disabled"


def test_node_files_outside_the_overlaid_roots_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be under one of"):
        hostfiles.render("n", hosts.host_spec({"files": {"/srv/x": "y"}}), tmp_path / "root",
                         node_ip="172.29.1.2", prefix=30, gateway="172.29.1.1")


@pytest.mark.slow
def test_native_artefacts_are_built_once_per_source(tmp_path: Path) -> None:
    first = native.build_nvml_mock(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert native.build_nvml_mock(tmp_path) == first and first.stat().st_mtime_ns == mtime
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(first)], capture_output=True, text=True).stdout
    for name in ("nvmlInit_v2", "nvmlInitWithFlags", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetPciInfo_v3",
                 "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetArchitecture", "nvmlErrorString"):
        assert f" T {name}\n" in symbols


def test_subnet_slots_are_exclusive_and_released() -> None:
    a, b = netns.allocate_subnet("pytest-a"), netns.allocate_subnet("pytest-b")
    try:
        assert a != b and netns.allocate_subnet("pytest-a") == a
    finally:
        netns.release_subnet("pytest-a")
        netns.release_subnet("pytest-b")
    netns.release_subnet("pytest-a")
    assert netns.node_addresses(7, 2) == ("172.29.7.5", "172.29.7.6", 30)
    assert all(len(n) <= 15 for n in netns.names_for(250, 63))
    with pytest.raises(ValueError, match="at most 15 characters"):
        netns.create("a-netns-name-too-long", "x", "172.29.1.1", "172.29.1.2")
    netns.destroy("dgxs-never-created")


@pytest.mark.slow
def test_a_changed_site_never_reaches_the_hosts_the_inventory_copies_its_claims_and_crictl_agrees_with_the_api(tmp_path: Path) -> None:
    from pytest_dgxspark.testbed import Testbed

    site = tmp_path / "site"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sites" / "tirosh-home", site)
    vars_file = site / "rke2" / "vars.yml"
    vars_file.write_text(vars_file.read_text().replace("node.tirosh.ai/workload=ai", "node.tirosh.ai/workload=batch"))
    inventory = site / "inventory.yml"
    inventory.write_text(inventory.read_text().replace("dgxspark_gpu_product: NVIDIA GB10", "dgxspark_gpu_product: NVIDIA GB20"))
    with Testbed("heterogeneous", tmp_path / "tb", site=site) as testbed:
        written = yaml.safe_load(testbed.inventory.read_text())["all"]["children"]
        gpu01 = written["rke2_servers"]["hosts"]["gpu-01"]
        assert {k: v for k, v in gpu01.items() if not k.startswith("ansible_")} == {  # the site's claims, as written
            "dgxspark_gpu": True, "dgxspark_model": "dgx-spark", "dgxspark_gpu_product": "NVIDIA GB20"}
        assert gpu01["ansible_host"].startswith("172.29.")  # the testbed's address, never the site's 192.168.x
        agents = written["rke2_agents"]["hosts"]
        assert {k: v for k, v in agents["dc-01"].items() if not k.startswith("ansible_")} == {
            "dgxspark_gpu": True, "dgxspark_model": "hgx-h100", "dgxspark_gpu_product": "NVIDIA H100 80GB HBM3",
            "rke2_node_labels": ["node.tirosh.ai/role=gpu", "node.tirosh.ai/workload=ai", "node.tirosh.ai/model=hgx-h100"]}
        assert "dgxspark_gpu_product" not in agents["cpu-01"]
        config = subprocess.run(["ssh", "-F", str(testbed.ssh_config), "gpu-01", "cat /etc/rancher/rke2/config.yaml"],
                                capture_output=True, text=True, timeout=20).stdout
        assert "  - node.tirosh.ai/workload=ai\n" in config and "batch" not in config
        world = json.loads((testbed.directory / "workload-world.json").read_text())["objects"]
        for node in ("gpu-01", "dc-01"):
            running_pods = sorted(o["metadata"]["name"] for o in world if o["kind"] == "Pod"
                                  and o["spec"].get("nodeName") == node and o["status"].get("phase") == "Running")
            crictl = subprocess.run(["ssh", "-F", str(testbed.ssh_config), node, "/var/lib/rancher/rke2/bin/crictl pods"],
                                    capture_output=True, text=True, timeout=20).stdout.splitlines()
            assert crictl[0].split() == ["POD", "ID", "CREATED", "STATE", "NAME", "NAMESPACE", "ATTEMPT", "RUNTIME"]
            assert running_pods and sorted(line.split()[6] for line in crictl[1:]) == running_pods, node
        # the H100 node's GFD/NFD labels agree with a real H100 node's (captures/h100-mig-node-labels.txt)
        real = json.loads(captures.body("h100-mig-node-labels.txt"))
        dc01 = next(o for o in world if o["kind"] == "Node" and o["metadata"]["name"] == "dc-01")
        keys = ("kubernetes.io/arch", "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/gpu.family",
                "nvidia.com/gpu.memory", "nvidia.com/gpu.product", "nvidia.com/mig.capable")
        assert {k: dc01["metadata"]["labels"].get(k) for k in keys} == {k: real[k] for k in keys}
        assert dc01["status"]["nodeInfo"]["architecture"] == "amd64" and dc01["status"]["capacity"]["nvidia.com/gpu"] == "8"


# The fake tools through the node's shim server (native/shimserver.py) and, with the server's socket hidden (a mount
# namespace with an empty /run/dgxspark-testbed), through `python3 -IS <shim>` as before the server: same bytes.
WITHOUT_SERVER = "unshare -m /bin/bash -c 'mount -t tmpfs none /run/dgxspark-testbed && exec -a bash /bin/bash -c \"$0\"' {}"
SHIM_CALLS = (
    "uname -a", "uname -r; uname -m", "uname --bogus", "lsmod", "modinfo -F version nvidia", "modinfo nosuch",
    "dmesg | tail -n 3", "journalctl -k --no-pager | head -n 2", "journalctl -u rke2-server --no-pager -n 3",
    "nvidia-smi", "nvidia-smi -L", "nvidia-smi -q | head -n 20", "nvidia-smi --query-gpu=uuid --format=csv,noheader",
    "systemctl status rke2-server --no-pager", "systemctl is-active docker rke2-server", "systemctl frobnicate",
    "systemctl list-unit-files --no-pager", "ldconfig -p | grep -c nvidia-ml", "/var/lib/rancher/rke2/bin/ctr version",
    "cd /tmp && CRI_CONFIG_FILE=/nonexistent /var/lib/rancher/rke2/bin/crictl ps -a", "/var/lib/rancher/rke2/bin/crictl info | head -n 5", "umask 077; nvidia-smi -L",
    "exec 0</etc/hostname; nvidia-smi -L", "nvidia-smi -L 2>&1 >/dev/null | cat", "env -i /usr/bin/uname -n",
    "{ nvidia-smi; echo \"rc=$?\" >&2; } | true",
    "systemctl stop rke2-server; systemctl is-active rke2-server; systemctl start rke2-server; "
    "cat /usr/lib/dgxspark-testbed/units-changed.json; tail -n 2 /usr/lib/dgxspark-testbed/units-actions.jsonl",
)


# Runs each NUL-separated call of /tmp/shim-calls as the session would (`bash -c`), outputs and status in files of $1.
CALL_RUNNER = ("mkdir -p \"$1\"; i=0; while IFS= read -r -d '' c; do i=$((i+1)); "
               "bash -c \"$c\" <&- >\"$1/$i.out\" 2>\"$1/$i.err\" </dev/null; echo $? >\"$1/$i.rc\"; done </tmp/shim-calls")


def answers(node: Node, calls: list[str], *options: str) -> list[tuple[int, str, str]]:
    """Each call's exit status and outputs, nvidia-smi's clock (its first line, `-q`'s Timestamp) aside; through
    the shim server, then without it."""
    clock = re.compile(rb"\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\b")
    runner = f"bash -c {shlex.quote(CALL_RUNNER)}"
    script = (f"printf '%s\\0' {' '.join(shlex.quote(c) for c in calls)} >/tmp/shim-calls; rm -rf /tmp/shim-out; "
              f"{runner} run /tmp/shim-out/served && {WITHOUT_SERVER.format(shlex.quote(runner + ' run /tmp/shim-out/direct'))}"
              " && tar -C /tmp/shim-out -cf - . | base64 -w0")
    proc = subprocess.run(["ssh", "-F", str(node.ssh_config), *options, node.handle.address, script],
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    files = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(proc.stdout))) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[member.name.removeprefix("./")] = clock.sub(b"<clock>", tar.extractfile(member).read())
    return [tuple((int(files[f"{way}/{i}.rc"]), files[f"{way}/{i}.out"], files[f"{way}/{i}.err"]) for way in ("served", "direct"))
            for i in range(1, len(calls) + 1)]


@pytest.mark.slow
def test_the_fake_tools_answer_the_same_bytes_through_the_shim_server_as_without_it(healthy: Node) -> None:
    from pytest_dgxspark import probes

    spec = type("Spec", (), {"gpu": True, "role": "server", "address": healthy.handle.address})()
    tools = re.compile(rf"\b({'|'.join(map(re.escape, os.listdir(hostfiles.SHIMS_DIR)))})\b")
    calls = [c.text for c in probes.commands_for(spec, probes.Settings()) if tools.search(c.text)] + list(SHIM_CALLS)
    assert len(calls) > len(SHIM_CALLS) + 8, calls  # the probes' own calls of the fake tools
    for options in ((), ("-S", "none", "-o", "SetEnv=LANG=C.UTF-8")):  # a locale: its own worker
        for call, (served, direct) in zip(calls, answers(healthy, calls, *options)):
            assert served == direct, (options, call)
    for call in ("nvidia-smi -L", "uname --bogus", "systemctl status docker --no-pager"):  # a pty
        served = healthy.ssh(call, 20, "-tt")
        direct = healthy.ssh(WITHOUT_SERVER.format(shlex.quote(call)), 20, "-tt")
        assert (served.returncode, served.stdout, served.stderr) == (direct.returncode, direct.stdout, direct.stderr), call
    workers = healthy.ssh("ps -eo args= | grep '^/usr/bin/python3 -IS /usr/lib/dgxspark-testbed/shim-server worker'").stdout
    assert sorted(line.split(" worker ")[1].rsplit(" ", 1)[0] for line in workers.splitlines()) == [
        '[null, null, "C.UTF-8"]', "[null, null, null]"], workers  # one worker per locale (LC_ALL, LC_CTYPE, LANG)


@pytest.mark.slow
def test_a_hanging_tool_runs_under_the_shim_server_and_ends_with_its_caller(tmp_path: Path, keypair: Path, slot: int) -> None:
    spec = {"driver": {"smi": "hang"}}
    with running(spec, tmp_path, keypair, slot) as node:
        children = "ps --no-headers -o pid= --ppid $(pgrep -o -f 'shim-server worker') | wc -l"
        assert node.ssh(f"nvidia-smi >/dev/null 2>&1 & sleep 1; {children}").stdout == "1\n", "nvidia-smi: the worker's child"
        calls = ("timeout 1 nvidia-smi", "timeout -s KILL 1 nvidia-smi", "timeout -s INT 1 nvidia-smi 2>/dev/null")
        both = [how for call in calls for how in (call, WITHOUT_SERVER.format(shlex.quote(call)))]
        # all at once, each with its own output file: TERM and INT passed on (the child dies of them: 124), the client
        # killed (so is the child: 137), as without the server
        script = "".join(f"{{ {how}; echo rc=$?; }} >/tmp/hang-{i} & " for i, how in enumerate(both))
        ended = node.ssh(f"{script} wait; cat {' '.join(f'/tmp/hang-{i}' for i in range(len(both)))}", 20)
        assert ended.stdout == "rc=124\nrc=124\nrc=137\nrc=137\nrc=124\nrc=124\n", ended.stderr
        assert node.ssh(f"pkill -KILL -x nvidia-smi; sleep 0.5; {children}").stdout == "0\n", "no child outlives its client"


@pytest.mark.slow
def test_sysctl_answers_the_scenarios_kernel_parameters_and_users_adds_system_accounts(tmp_path: Path, keypair: Path,
                                                                                        slot: int) -> None:
    from pytest_dgxspark.probes import hardening as probe

    spec = {"sysctl": {"vm.overcommit_memory": "1", "kernel.panic": "10"}, "users": ["etcd"]}
    with running(spec, tmp_path, keypair, slot) as node:
        assert node.ssh("sysctl -n vm.overcommit_memory kernel.panic").stdout == "1\n10\n"
        machine = Path("/proc/sys/vm/panic_on_oom").read_text().strip()  # not listed: the machine's own value
        assert node.ssh("sysctl vm.panic_on_oom").stdout == f"vm.panic_on_oom = {machine}\n"
        missing = node.ssh("sysctl no.such_key")
        assert (missing.returncode, missing.stderr) == (255, "sysctl: cannot stat /proc/sys/no/such_key: No such file or "
                                                             "directory\n")
        assert node.ssh("sysctl -w kernel.panic=0").returncode == 1  # reads only
        assert node.ssh(probe.ETCD_ACCOUNT).stdout == ("/etc/passwd:etcd:x:990:990:etcd user:/nonexistent:/sbin/nologin\n"
                                                       "/etc/group:etcd:x:990:\n")
        assert node.ssh("grep -c '^root:' /etc/passwd").stdout == "1\n"  # the machine's accounts are kept


@contextlib.contextmanager
def _other_pidns() -> Iterator[tuple[int, int]]:
    """Another host's pid namespace, as `unshare --pid --fork --kill-child` makes one: (its PID 1, its inode)."""
    launcher = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while (init := hosts._child_of(launcher.pid)) is None or _ns(str(init)) == _ns("self"):
            assert time.monotonic() < deadline, "unshare's child never appeared in a pid namespace of its own"
            time.sleep(0.01)
        yield init, _ns(str(init))
    finally:
        launcher.kill()
        launcher.wait(timeout=10)


def test_stopping_a_gone_host_spares_the_namespace_that_got_its_inode_number(tmp_path: Path) -> None:
    # The kernel gives a freed pid namespace's inode number to the next one made: a host stopped twice (start_host's
    # own stop, then the testbed's teardown), or a leftover stopped later, must not sweep whoever holds it now.
    gone = subprocess.Popen(["true"])
    gone.wait()
    with _other_pidns() as (init, inode):
        (tmp_path / "host.json").write_text(json.dumps({"launcher_pid": None, "init_pid": gone.pid, "pidns": inode,
                                                        "init_start": "1", "netns": "none"}))
        hosts.stop_host(hosts.HostHandle("gone", "127.0.0.1", 22, "none", gone.pid, tmp_path))
        assert Path(f"/proc/{init}").exists() and _ns(str(init)) == inode, "another host's PID 1 was killed"
        # the pid of PID 1 itself, reused: its start time is not the one host.json keeps
        (tmp_path / "host.json").write_text(json.dumps({"launcher_pid": None, "init_pid": init, "pidns": inode,
                                                        "init_start": "1", "netns": "none"}))
        hosts.stop_host(hosts.HostHandle("reused", "127.0.0.1", 22, "none", init, tmp_path))
        assert Path(f"/proc/{init}").exists(), "a process that only reuses the host's PID 1 number was killed"
        # and the host's own namespace still goes, PID 1 and all
        (tmp_path / "host.json").write_text(json.dumps({"launcher_pid": None, "init_pid": init, "pidns": inode,
                                                        "init_start": leftovers.start_time(init), "netns": "none"}))
        hosts.stop_host(hosts.HostHandle("own", "127.0.0.1", 22, "none", init, tmp_path))
        assert not [p for p in os.listdir("/proc") if p.isdigit() and _ns(p) == inode]


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["while PID 1 sets up", "while sshd comes up"])
def test_a_signal_while_a_host_starts_stops_what_was_started(tmp_path: Path, keypair: Path, slot: int,
                                                            monkeypatch: pytest.MonkeyPatch, moment: str) -> None:
    # nothing records the host before start_host returns, so a Ctrl-C during its waits left it running (its sshd
    # answering on the node's address) after the testbed's teardown
    if moment == "while PID 1 sets up":
        class Clock:  # the wait's first breath is where the signal lands
            monotonic = staticmethod(time.monotonic)

            @staticmethod
            def sleep(_: float) -> None:
                raise KeyboardInterrupt

        monkeypatch.setattr(hosts, "time", Clock)
    else:
        def wait_ssh(*_: Any) -> str | None:
            raise KeyboardInterrupt

        monkeypatch.setattr(hosts, "_wait_ssh", wait_ssh)
    index = next(_INDEX)
    host_ip, node_ip, prefix = netns.node_addresses(slot, index)
    ns_name, ifname = netns.names_for(slot, index)
    link = netns.create(ns_name, ifname, host_ip, node_ip, prefix)
    node_dir = tmp_path / "node"
    try:
        with pytest.raises(KeyboardInterrupt):
            hosts.start_host("gpu-01", {}, node_dir=node_dir, link=link, scenario="hosts-test",
                             authorized_key=keypair.with_suffix(".pub").read_text(), host_key_dir=tmp_path / "keys")
        assert (node_dir / "host.json").is_file()
        deadline = time.monotonic() + 5
        while (left := _processes_naming(node_dir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [], f"the host's processes outlived the signal: {left}"
    finally:
        netns.destroy(link)


def _processes_naming(path: Path) -> list[str]:
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(path) in cmdline and state != "Z":
            found.append(f"{pid} {cmdline[:120]}")
    return found
