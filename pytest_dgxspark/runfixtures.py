"""The run's own fixtures: the site and the targets, starting and stopping a testbed when one is asked for."""
from __future__ import annotations

import atexit
import signal
import shutil
import tempfile
from pathlib import Path

import pytest

from pytest_dgxspark.outcome import TargetError
from pytest_dgxspark.runstate import state_key
from pytest_dgxspark.site import Site
from pytest_dgxspark.targets import Targets, attach_testbed


def _state(config: pytest.Config):
    if state_key not in config.stash:
        raise pytest.UsageError("pytest-dgxspark fixtures need a dgxspark run (--site or --testbed, tests under suites/)")
    return config.stash[state_key]


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"terminated by signal {signum}")


def _terminate_like_ctrl_c() -> None:
    """SIGTERM (a CI job cancelled, `timeout`) ends the run like Ctrl-C: finalizers run, the report is written."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


@pytest.fixture(scope="session")
def site(pytestconfig: pytest.Config) -> Site:
    """The validated site: vars, GPU Operator HelmChart and inventory."""
    return _state(pytestconfig).site


@pytest.fixture(scope="session")
def targets(pytestconfig: pytest.Config, request: pytest.FixtureRequest) -> Targets:
    """The hosts and cluster under test; a testbed is started here (not before) and stopped at the end."""
    tgt = _state(pytestconfig).targets
    _terminate_like_ctrl_c()  # the CUDA sample's namespace and a testbed are cleaned up on SIGTERM too
    if tgt.simulated and tgt.testbed is None:
        from pytest_dgxspark.testbed import Testbed

        directory = Path(tempfile.mkdtemp(prefix="dgxspark-testbed-"))
        testbed = Testbed(tgt.testbed_ref, directory, site=tgt.site)

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
        from pytest_dgxspark.bundleguard import remember_file_secrets

        remember_file_secrets(Path(testbed.kubeconfig), "the testbed's kubeconfig")
    return tgt


@pytest.hookimpl(optionalhook=True)
def pytest_dgxspark_results(config: pytest.Config, results: dict) -> None:
    """Earlier runs' CUDA sample namespaces this run found (and what it did), for results.json and the summary."""
    from pytest_dgxspark.cudarun import leftover_report, leftovers_key

    results["leftover_namespaces"] = leftover_report(config.stash.get(leftovers_key, None))


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_summary(prefix: list, summary: list, postfix: list, session: pytest.Session) -> None:
    """report.html says SIMULATED at its top, with why (results.json is written by then: the same facts)."""
    import html

    from pytest_dgxspark.results import results_key

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
    from pytest_dgxspark import identity

    try:
        signs = identity.simulation_signs(request.config, request.config.stash[state_key].targets)
        record_testsuite_property("dgxspark.simulated", str(bool(signs)).lower())
        for index, sign in enumerate(signs):
            record_testsuite_property(f"dgxspark.simulated_by.{index}", sign)
    except Exception:  # noqa: BLE001 - a stamp must never turn into a test error; results.json has the same facts
        return
