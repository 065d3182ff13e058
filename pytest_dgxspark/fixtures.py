"""Fixtures of a run: the site and its targets (a testbed started and stopped here when one is asked for), the
connections (one SSH master per host, the gathering step as each opens), the probes' values, the cluster, evidence."""

from __future__ import annotations

import atexit
import datetime
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark import plan, probes
from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.judge import identity
from pytest_dgxspark.judge.evidence import Evidence, for_item
from pytest_dgxspark.judge.forecast import Forecast, forecast_key
from pytest_dgxspark.judge.runstate import state_key
from pytest_dgxspark.plan import (
    DEFAULT_COMMAND_TIMEOUT_S,
    DEFAULT_CUDA_TIMEOUT_S,
    DEFAULT_DEADLINE_S,
    DEFAULT_SMI_TIMEOUT_S,
)
from pytest_dgxspark.probes import containerd, hardening, network, nvidia_driver, nvml, provenance, rke2, upkeep
from pytest_dgxspark.probes.gather import gather_host
from pytest_dgxspark.site.model import Site
from pytest_dgxspark.targets.connections import Cluster, Connections, HostTarget, connections_key
from pytest_dgxspark.targets.selection import Targets, attach_testbed


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
    group.addoption(
        "--dgxspark-deadline",
        dest="dgxspark_deadline",
        type=int,
        default=None,
        metavar="SECONDS",
        help=f"the whole run's limit: past it the run stops as on Ctrl-C and writes an INCOMPLETE bundle "
             f"(cause deadline; default {DEFAULT_DEADLINE_S}, from 10 to 86400)",
    )
    parser.addini("dgxspark_deadline", "seconds the whole run may take", default=str(DEFAULT_DEADLINE_S))


def host_names(config: pytest.Config, gpu_only: bool = False) -> list[str]:
    """Inventory host names known at collection time (nothing connects)."""
    try:
        from pytest_dgxspark.targets.selection import targets_key
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
        run = plan.of(request.config)
        conns = Connections(targets, probes.Settings(smi_timeout_s=run.smi_timeout_s, command_timeout_s=run.command_timeout_s))
        request.config.stash[connections_key] = conns
    yield conns
    from pytest_dgxspark.judge import exitpath

    try:  # the facts provenance needs, over connections already open (never opens new ones); not once the run is
        # ending on a signal or its deadline: results.json is written by then, and a slow API would hold the exit
        if not exitpath.pending():
            provenance.prefetch(list(conns.hosts.values()), conns.cluster_if_open())
    finally:
        conns.close()


def run_provenance(conns: Connections) -> dict[str, Any]:
    """Provenance of the run (what software was checked), from data already fetched (probes/provenance.py)."""
    return provenance.collect(list(conns.hosts.values()), conns.cluster_if_open())


def open_hosts(session: pytest.Session, connections: Connections) -> None:
    """Open every host at once and run the gathering step of the probes the selected tests read on each as soon as
    it is open; once per run."""
    if not connections.opened:
        wanted = probes_read(session)
        connections.open_all(lambda target: gather_host(target, connections.probe_settings, wanted))


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
    open_hosts(request.session, connections)
    target = connections.host(host_spec).connect()
    identity.observe_host(request.config, target)
    return target


@pytest.fixture(scope="session")
def hosts(request: pytest.FixtureRequest, connections: Connections, targets: Any) -> list[HostTarget]:
    """Every inventory host, connected (one SSH master connection per host per run)."""
    open_hosts(request.session, connections)
    connected = [connections.host(spec).connect() for spec in targets.hosts]
    for target in connected:
        identity.observe_host(request.config, target)
    return connected


@pytest.fixture(scope="session")
def gpu_hosts(request: pytest.FixtureRequest, connections: Connections, targets: Any) -> list[HostTarget]:
    """The inventory hosts marked dgxspark_gpu, connected."""
    open_hosts(request.session, connections)
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
def hardening_probe(host_target: HostTarget, connections: Connections) -> hardening.Hardening:
    """The current host's hardening (probes/hardening.py): CIS kernel parameters, etcd account, policy files."""
    return hardening.read(host_target, connections.probe_settings)


@pytest.fixture
def upkeep_probe(host_target: HostTarget, connections: Connections) -> upkeep.Upkeep:
    """What will change on the current host (probes/upkeep.py): packages and holds, pending reboot, APT's config."""
    return upkeep.read(host_target, connections.probe_settings)


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


@pytest.fixture(scope="session")
def run_date(request: pytest.FixtureRequest) -> datetime.date:
    """The day the forecast judges dates against: --dgxspark-run-date, else the day the run started (UTC)."""
    given = request.config.getoption("dgxspark_run_date", None)
    if given:
        try:
            return datetime.date.fromisoformat(str(given))
        except ValueError:
            raise pytest.UsageError(f"--dgxspark-run-date {given!r}: expected YYYY-MM-DD") from None
    return datetime.datetime.now(datetime.timezone.utc).date()


@pytest.fixture
def forecast(request: pytest.FixtureRequest) -> Forecast:
    """Where a forecast check (marked forecast(<id>)) says what will break next; it never fails the test."""
    return Forecast(request.node.stash.setdefault(forecast_key, []))


# The run's own fixtures: the site and the targets.


left_testbeds_key = pytest.StashKey[list]()


def stop_left_testbeds(config: pytest.Config) -> list:
    """Testbeds earlier runs left running when they were killed (SIGKILL: no finalizer ran): stopped and said."""
    from pytest_dgxspark.testbed import stop_left

    try:
        left = stop_left()
    except Exception as exc:  # noqa: BLE001 - looking for leftovers must never cost the run
        left = []
        _say_left(config, f"dgxspark: could not look for testbeds left by killed runs: {type(exc).__name__}: {exc}")
    for found in left:
        _say_left(config, f"dgxspark: a testbed left running by a killed run ({found.run_id or 'unknown run'}, pid "
                          f"{found.owner_pid}, scenario {found.scenario}) was found in {found.directory}: {found.state}")
    config.stash[left_testbeds_key] = left
    return left


def _say_left(config: pytest.Config, line: str) -> None:
    import sys

    try:
        config.get_terminal_writer().line(line, yellow=True)
    except (AssertionError, AttributeError, ValueError):
        print(line, file=sys.stderr)


def _state(config: pytest.Config):
    if state_key not in config.stash:
        raise pytest.UsageError("pytest-dgxspark fixtures need a dgxspark run (--site or --testbed, tests under suites/)")
    return config.stash[state_key]


@pytest.fixture(scope="session")
def site(pytestconfig: pytest.Config) -> Site:
    """The validated site: vars, GPU Operator HelmChart and inventory."""
    return _state(pytestconfig).site


@pytest.fixture(scope="session")
def targets(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Targets:
    """The hosts and cluster under test; a testbed is started here (not before) and stopped at the end."""
    tgt = _state(pytestconfig).targets
    if tgt.simulated and tgt.testbed is None:
        from pytest_dgxspark.report.results import run_info
        from pytest_dgxspark.testbed import DIR_PREFIX, Testbed, claim

        directory = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
        claim(directory, run_info(pytestconfig).id, str(tgt.testbed_ref))  # a later run stops it if this one is killed
        plan = _state(pytestconfig).plan
        testbed = Testbed(tgt.testbed_ref, directory, site=tgt.site, api=plan.testbed_api if plan else "standin",
                          plane=plan.testbed_plane if plan else None)

        def stop() -> None:
            try:
                testbed.down()
            finally:
                shutil.rmtree(directory, ignore_errors=True)

        atexit.register(stop)
        request.addfinalizer(stop)
        try:
            testbed.up()
        except Exception as exc:  # the testbed's own message says what failed
            raise TargetError(f"testbed {tgt.testbed_ref!r} did not start: {exc}") from exc
        attach_testbed(tgt, testbed)
        from pytest_dgxspark.report.bundleguard import remember_file_secrets

        remember_file_secrets(Path(testbed.kubeconfig), "the testbed's kubeconfig")
    return tgt


@pytest.hookimpl(optionalhook=True)
def pytest_dgxspark_results(config: pytest.Config, results: dict) -> None:
    """Earlier runs' CUDA sample namespaces this run found (and what it did), for results.json and the summary."""
    from pytest_dgxspark.kube.cudarun import leftover_report, leftovers_key

    results["leftover_namespaces"] = leftover_report(config.stash.get(leftovers_key, None))
    left = config.stash.get(left_testbeds_key, [])
    if left:
        results["leftover_testbeds"] = [found.as_dict() for found in left]


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list, summary: list, postfix: list, session: pytest.Session) -> None:
    """report.html says SIMULATED at its top, with why (results.json is written by then: the same facts)."""
    import html

    from pytest_dgxspark.report.results import results_key

    results = session.config.stash.get(results_key, None)
    if results is None:
        return
    run = results.get("run") or {}
    line = f"dgxspark verdict: {html.escape(str(results.get('verdict')))}"
    if run.get("simulated"):
        signs = "; ".join(html.escape(str(s)) for s in run.get("simulated_by") or [])
        line += f" (SIMULATED: the targets are a testbed: {signs}; never a handover acceptance)"
    prefix.insert(0, f'<p class="dgxspark-verdict"><strong>{line}</strong></p>')


@pytest.fixture(scope="session", autouse=True)
def _dgxspark_junit_stamp(request: pytest.FixtureRequest, record_testsuite_property):
    """junit.xml carries the SIMULATED stamp as testsuite properties (known once the targets were used)."""
    yield
    if state_key not in request.config.stash:
        return
    from pytest_dgxspark.judge import identity

    try:
        signs = identity.simulation_signs(request.config, request.config.stash[state_key].targets)
        record_testsuite_property("dgxspark.simulated", str(bool(signs)).lower())
        for index, sign in enumerate(signs):
            record_testsuite_property(f"dgxspark.simulated_by.{index}", sign)
    except Exception:  # noqa: BLE001 - a stamp must never turn into a test error; results.json has the same facts
        return
