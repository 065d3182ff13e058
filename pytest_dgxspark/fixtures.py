"""Fixtures the checks use: connections, hosts (one SSH connection each), the cluster and evidence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_dgxspark import identity, plan, probes
from pytest_dgxspark.connections import Cluster, Connections, HostTarget, connections_key
from pytest_dgxspark.probes import containerd, network, nvidia_driver, nvml, rke2
from pytest_dgxspark.evidence import Evidence, for_item
from pytest_dgxspark.plan import DEFAULT_COMMAND_TIMEOUT_S, DEFAULT_CUDA_TIMEOUT_S, DEFAULT_SMI_TIMEOUT_S


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dgxspark")
    group.addoption(
        "--dgxspark-cuda-timeout",
        dest="dgxspark_cuda_timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help=f"how long the CUDA sample pod may take to finish (default {DEFAULT_CUDA_TIMEOUT_S})",
    )
    parser.addini("dgxspark_cuda_timeout", "seconds the CUDA sample pod may take", default=str(DEFAULT_CUDA_TIMEOUT_S))
    group.addoption(
        "--dgxspark-smi-timeout",
        dest="dgxspark_smi_timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help=f"after how long a silent nvidia-smi counts as a hung driver (default {DEFAULT_SMI_TIMEOUT_S})",
    )
    parser.addini("dgxspark_smi_timeout", "seconds after which nvidia-smi counts as hung", default=str(DEFAULT_SMI_TIMEOUT_S))
    group.addoption(
        "--dgxspark-command-timeout",
        dest="dgxspark_command_timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="after how long a host command is killed on the host (exit 124); the gathering round and the wait for "
             f"a frozen host follow it (default {DEFAULT_COMMAND_TIMEOUT_S}; nvidia-smi keeps --dgxspark-smi-timeout)",
    )
    parser.addini("dgxspark_command_timeout", "seconds after which a host command is killed on the host",
                  default=str(DEFAULT_COMMAND_TIMEOUT_S))


def host_names(config: pytest.Config, gpu_only: bool = False) -> list[str]:
    """Inventory host names known at collection time (nothing connects)."""
    try:
        from pytest_dgxspark.targets import targets_key
    except ImportError:  # the plugin core is not installed: no hosts to parametrize
        return []
    targets = config.stash.get(targets_key, None)
    if targets is None:
        return []
    return list(targets.gpu_host_names if gpu_only else targets.host_names)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each check that takes `host_spec` (or `host_target`, which takes it) once per inventory host, with the
    host's name as its id."""
    if "host_spec" in metafunc.fixturenames:
        names = host_names(metafunc.config)
        metafunc.parametrize("host_spec", names, ids=names, indirect=True, scope="function")


def cuda_timeout(config: pytest.Config) -> int:
    """--dgxspark-cuda-timeout, else the ini dgxspark_cuda_timeout, else 300 seconds (validated in the plan)."""
    return plan.of(config).cuda_timeout_s


def smi_timeout(config: pytest.Config) -> int:
    """--dgxspark-smi-timeout, else the ini dgxspark_smi_timeout, else 30 seconds (validated in the plan)."""
    return plan.of(config).smi_timeout_s


@pytest.fixture(scope="session")
def smi_timeout_s(request: pytest.FixtureRequest) -> int:
    """Seconds nvidia-smi may take before the driver counts as hung (--dgxspark-smi-timeout, default 30)."""
    return smi_timeout(request.config)


@pytest.fixture(scope="session")
def connections(request: pytest.FixtureRequest, targets: Any) -> Iterator[Connections]:
    """The run's connections (nothing connects until a check uses a host or the cluster)."""
    conns = request.config.stash.get(connections_key, None)
    if conns is None:
        from pytest_dgxspark.probes import Settings

        run = plan.of(request.config)
        conns = Connections(targets, Settings(smi_timeout_s=run.smi_timeout_s, command_timeout_s=run.command_timeout_s))
        request.config.stash[connections_key] = conns
    yield conns
    try:
        conns.prefetch_provenance()
    finally:
        conns.close()


def probes_read(session: pytest.Session) -> frozenset[str]:
    """The probes the selected tests read (their probe fixtures); gathering runs only these (and `system`)."""
    return probes.read_by(getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture
def host_spec(request: pytest.FixtureRequest, targets: Any) -> Any:
    """One inventory host (parametrized per host), not connected: for checks that read only what the API says of it,
    which an SSH fault of the host neither reaches nor blocks."""
    return targets.host(request.param)


@pytest.fixture
def host_target(request: pytest.FixtureRequest, host_spec: Any, connections: Connections) -> HostTarget:
    """One inventory host (parametrized per host), connected; an unreachable host is an error, not a hang."""
    if not connections.opened:  # the selection's probes, looked up once
        connections.open_all(probes_read(request.session))
    target = connections.host(host_spec).connect()
    identity.observe_host(request.config, target)
    return target


@pytest.fixture(scope="session")
def hosts(request: pytest.FixtureRequest, connections: Connections, targets: Any) -> list[HostTarget]:
    """Every inventory host, connected (one SSH master connection per host per run)."""
    if not connections.opened:  # the selection's probes, looked up once
        connections.open_all(probes_read(request.session))
    connected = [connections.host(spec).connect() for spec in targets.hosts]
    for target in connected:
        identity.observe_host(request.config, target)
    return connected


@pytest.fixture(scope="session")
def gpu_hosts(request: pytest.FixtureRequest, connections: Connections, targets: Any) -> list[HostTarget]:
    """The inventory hosts marked dgxspark_gpu, connected."""
    if not connections.opened:  # the selection's probes, looked up once
        connections.open_all(probes_read(request.session))
    connected = [connections.host(spec).connect() for spec in targets.hosts if spec.gpu]
    for target in connected:
        identity.observe_host(request.config, target)
    return connected


# The probes' fixtures: what a check reads of its host_target, and how a test declares the probes it reads.


@pytest.fixture
def nvidia_driver_probe(host_target: HostTarget, connections: Connections) -> nvidia_driver.Driver:
    """The NVIDIA driver of the current host (probes/nvidia_driver.py): module, version file, nvidia-smi, kernel log."""
    return nvidia_driver.read(host_target, connections.probe_settings)


@pytest.fixture
def nvml_probe(host_target: HostTarget, connections: Connections) -> nvml.Nvml:
    """NVML on the current host (probes/nvml.py): where libnvidia-ml.so.1 resolves, what nvmlInit_v2 answers."""
    return nvml.read(host_target, connections.probe_settings)


@pytest.fixture
def rke2_probe(host_target: HostTarget, connections: Connections) -> rke2.Rke2Host:
    """RKE2 on the current host (probes/rke2.py): config files, units, Pod Security, the apiserver's command line."""
    return rke2.read(host_target, connections.probe_settings)


@pytest.fixture
def containerd_probe(host_target: HostTarget, connections: Connections) -> containerd.Runtime:
    """The container runtime of the current host (probes/containerd.py): kubelet wiring, containerd, CRI, Docker."""
    return containerd.read(host_target, connections.probe_settings)


@pytest.fixture
def network_probe(host_target: HostTarget, connections: Connections) -> network.Network:
    """The network of the current host (probes/network.py): addresses, netplan, NetworkManager."""
    return network.read(host_target, connections.probe_settings)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, connections: Connections) -> Cluster:
    """The RKE2 cluster over the kubernetes client (each kind listed once per run)."""
    connected = connections.cluster.connect()
    identity.observe_cluster(request.config, connected)
    return connected


@pytest.fixture(scope="session")
def management_cluster(connections: Connections) -> Cluster | None:
    """The Argo CD management cluster of the site, or None when it names none (not connected yet)."""
    return connections.management


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Evidence:
    """What this check saw, redacted, kept in the test item's stash for the report."""
    return for_item(request.node)
