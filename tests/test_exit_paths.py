"""Every way a run ends writes a coherent bundle: SIGINT once or twice, SIGTERM, SIGHUP, the deadline, a PDF cut
short by a full disk; the CUDA namespace is deleted even when the first signal meets its delete."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.pytester_args import SITE_ARGS

# slow: runs signalled, cut by deadlines and full disks, Chromium interrupted (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

# A check that says it started (a file), then waits long enough to be interrupted.
SLOW = ("import pathlib, time\n"
        "@pytest.mark.rule('ADR-0001.site-layout')\ndef test_a_first(site):\n    assert site.name\n\n"
        "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_b_slow():\n"
        "    pathlib.Path('started').write_text('x')\n    time.sleep(60)\n\n"
        "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_c_never():\n    assert True\n")


def _start(pytester: pytest.Pytester, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pytest", "suites", *SITE_ARGS, *extra],
                            cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def _wait_for(path: Path, proc: subprocess.Popen[str], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _bundle(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "out" / "latest").resolve()


def _assert_sealed_incomplete(pytester: pytest.Pytester, output: str, cause: str, by: str) -> dict:
    bundle = _bundle(pytester)
    results = json.loads((bundle / "results.json").read_text())
    assert results["verdict"] == "INCOMPLETE", output
    assert results["run"]["interrupted"]["cause"] == cause
    assert results["run"]["interrupted"]["by"] == by
    assert any(by in r or cause in r for r in results["verdict_reasons"]), results["verdict_reasons"]
    statuses = {t["nodeid"].rsplit("::", 1)[1]: t["outcome"] for r in results["rules"] for t in r["tests"]}
    assert statuses["test_a_first"] == "passed"
    assert statuses["test_c_never"] == "error"
    manifest = (bundle / "MANIFEST.sha256").read_text()
    assert "results.json" in manifest and "summary.html" in manifest
    assert "Traceback" not in output, output[-3000:]
    # the tests not run are in junit.xml and report.html too: the bundle agrees with itself, as verify reads it
    from pytest_dgxspark.report import derived

    assert {name: found for name, found in derived.all_problems(bundle, results).items() if found} == {}
    return results


@pytest.mark.parametrize(("signals", "gap"), [(["SIGINT"], 0), (["SIGINT", "SIGINT"], 0.3), (["SIGTERM"], 0),
                                              (["SIGHUP"], 0), (["SIGTERM", "SIGINT", "SIGHUP"], 0.2)],
                         ids=["sigint", "sigint-twice", "sigterm", "sighup", "three-signals"])
def test_a_signal_ends_the_run_with_a_sealed_incomplete_bundle(pytester, suite, signals, gap):
    suite("host", SLOW)
    # A plugin taking part in the finish (pytest_dgxspark_results) takes 3 s: every later signal comes while the
    # run is ending, before results.json is written, whatever the machine's speed (a fast one had sealed it by 0.4 s).
    pytester.makeconftest("import time\n\ndef pytest_dgxspark_results(config, results):\n    time.sleep(3)\n")
    proc = _start(pytester)
    _wait_for(pytester.path / "started", proc)
    for name in signals:
        proc.send_signal(getattr(signal, name))
        time.sleep(gap)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    results = _assert_sealed_incomplete(pytester, output, "interrupted", signals[0])
    assert results["run"]["interrupted"]["signals"] == signals
    if "SIGHUP" not in signals:  # after SIGHUP the terminal is gone: nothing is written to it
        assert "dgxspark: INCOMPLETE" in output, output[-3000:]


# A check during which the run's SIGTERM comes while Python runs a finalizer: the handler's KeyboardInterrupt is raised
# there and Python only prints it ('Exception ignored in'), so the check itself passes.
LOST = ("import os, pathlib, signal\n"
        "class _Finalized:\n    def __del__(self):\n        os.kill(os.getpid(), signal.SIGTERM)\n\n"
        "@pytest.mark.rule('ADR-0001.site-layout')\ndef test_a_first(site):\n    _Finalized()\n    assert site.name\n\n"
        "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_c_never():\n    pathlib.Path('ran').write_text('x')\n")


def test_a_signal_whose_interrupt_python_dropped_still_stops_the_run_before_the_next_check_and_exits_2(pytester, suite):
    suite("host", LOST)
    proc = _start(pytester)
    output, _ = proc.communicate(timeout=120)
    assert "Exception ignored" in output, output[-3000:]  # the interrupt was lost where the signal met the run
    assert not (pytester.path / "ran").exists(), "the next check ran after the run was asked to end"
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]  # README's exit table: interrupted is 2
    # Python's own report of the dropped interrupt is the one traceback allowed
    rest = re.sub(r"Exception ignored in:.*?KeyboardInterrupt: interrupted by SIGTERM", "", output, count=1, flags=re.S)
    results = _assert_sealed_incomplete(pytester, rest, "interrupted", "SIGTERM")
    assert results["run"]["interrupted"]["signals"] == ["SIGTERM"]


def test_a_signal_dropped_in_the_last_check_still_exits_2_as_its_interrupted_results_say(pytester, suite):
    suite("host", LOST.split("\n\n@pytest.mark.rule('ADR-0002.host-nvml')")[0] + "\n")  # no check after it
    proc = _start(pytester)
    output, _ = proc.communicate(timeout=120)
    results = json.loads((_bundle(pytester) / "results.json").read_text())
    assert (results["verdict"], results["run"]["interrupted"]["by"]) == ("INCOMPLETE", "SIGTERM"), output[-3000:]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]  # not 8: the results say interrupted


def test_the_deadline_stops_the_whole_run_incomplete(pytester, suite):
    suite("host", SLOW)
    started = time.monotonic()
    proc = _start(pytester, "--dgxspark-deadline", "10")
    output, _ = proc.communicate(timeout=120)
    assert time.monotonic() - started < 45, output[-2000:]
    assert proc.returncode == 8, output[-3000:]
    results = _assert_sealed_incomplete(pytester, output, "deadline", "deadline")
    assert results["run"]["interrupted"]["deadline_s"] == 10
    assert "stopped at the run's deadline (--dgxspark-deadline 10 s)" in output, output[-3000:]


def _fake_chromium(folder: Path, body: str) -> dict[str, str]:
    folder.mkdir()
    script = folder / "chromium"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "DGXSPARK_PDF": "on"}


PRINT_TO = 'for a in "$@"; do case "$a" in --print-to-pdf=*) out="${a#--print-to-pdf=}";; esac; done\n'


def test_a_pdf_cut_short_by_a_full_disk_is_never_kept_and_the_run_says_so(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0001.site-layout')\ndef test_a_first(site):\n    assert site.name\n")
    env = _fake_chromium(pytester.path / "bin", PRINT_TO + 'printf "%%PDF-1.7\\n1 0 obj <<" > "$out"; exit 0\n')
    proc = _start(pytester, "-k", "test_a_first", env=env)
    output, _ = proc.communicate(timeout=120)
    bundle = _bundle(pytester)
    assert not (bundle / "summary.pdf").exists()
    assert not list(bundle.glob(".summary.pdf*")), "the temporary PDF is removed"
    assert "summary.pdf not written" in output and "INCOMPLETE ON DISK" in output, output[-3000:]
    assert "no %%EOF trailer" in output
    assert proc.returncode == 8, output[-3000:]
    assert "summary.pdf" not in (bundle / "MANIFEST.sha256").read_text()


def test_a_signal_while_chromium_prints_ends_it_and_seals_the_bundle(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0001.site-layout')\ndef test_a_first(site):\n    assert site.name\n")
    marker = pytester.path / "printing"
    env = _fake_chromium(pytester.path / "bin", f"echo $$ > {marker}\nexec sleep 60\n")
    proc = _start(pytester, "-k", "test_a_first", env=env)
    _wait_for(marker, proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20
    bundle = _bundle(pytester)
    assert "Traceback" not in output, output[-3000:]
    assert not (bundle / "summary.pdf").exists()
    assert "interrupted while" in output, output[-3000:]
    assert "results.json" in (bundle / "MANIFEST.sha256").read_text()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    pid = int(marker.read_text())
    assert not Path(f"/proc/{pid}").exists(), "Chromium was ended"


class _Api:
    """A stand-in cluster whose first namespace delete is interrupted by the run's first signal."""

    def __init__(self) -> None:
        self.deletes = 0
        self.core = self
        self.api = None

    def call(self, method, *args, **kwargs):
        return method(*args, **kwargs)

    def delete_namespace(self, name, **kwargs):
        self.deletes += 1
        if self.deletes == 1:
            raise KeyboardInterrupt("interrupted by SIGINT")


def test_a_signal_that_meets_the_namespace_delete_leaves_it_for_the_teardown_to_delete():
    from pytest_dgxspark.kube.cudarun import CudaRun

    cluster = _Api()
    run = CudaRun(cluster, "run-1", stale_after_s=30, wait_s=30)
    run.created = True
    with pytest.raises(KeyboardInterrupt):
        run.delete()  # the test's own finally
    run.delete()  # the fixture's teardown, at session finish
    assert (cluster.deletes, run.deleted, run.closed) == (2, True, True)
    run.delete()
    assert cluster.deletes == 2  # once deleted, no further call


def test_a_testbed_left_by_a_sigkilled_run_is_found_stopped_and_reported_by_the_next(tmp_path, request):
    from pytest_dgxspark.testbed import DIR_PREFIX, leftovers
    from tests.conftest import REPO

    run = [sys.executable, "-m", "pytest", "suites", "--testbed", "healthy", "-q", "-p", "no:cacheprovider",
           "--report-dir", str(tmp_path / "reports"), "-k", "node_ready"]
    # The first run's API answers after 60 s: it is surely still running (its testbed up) when it is killed, on a
    # machine of any speed (a fast one had finished a healthy run within the second this test used to wait).
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    (stuck / "scenario.yaml").write_text("format: 2\ndescription: an API answering each request after 60 s\n"
                                         "extends: healthy\ncluster:\n  faults: {latency_ms: 60000}\n"
                                         "expect: {rules: {}, root_causes: []}\n")
    first = [*run[:5], str(stuck), *run[6:]]
    # Both runs keep their testbeds in a temporary folder of their own: a suite run on another worker sweeps the
    # leftovers it finds in the shared one, and had stopped (and reported) this one before the second run looked
    # (seen in CI). The folder's path is short: the testbed's sockets live under it.
    temp = Path(tempfile.mkdtemp(prefix="k", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(temp, ignore_errors=True))
    env = {**os.environ, "TMPDIR": str(temp)}
    before = set(temp.glob(f"{DIR_PREFIX}*"))
    proc = subprocess.Popen(first, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    started = None
    while started is None:
        assert proc.poll() is None and time.monotonic() < deadline, "the first run ended before its testbed was up"
        for directory in set(temp.glob(f"{DIR_PREFIX}*")) - before:
            state, owner = directory / "state.json", directory / leftovers.OWNER
            # this run's testbed (its owner record names its pid), not one a test on another worker brought up
            mine = owner.is_file() and json.loads(owner.read_text() or "{}").get("pid") == proc.pid
            if mine and state.is_file() and json.loads(state.read_text() or "{}").get("hosts"):
                started = directory
        time.sleep(0.2)
    time.sleep(1)
    assert proc.poll() is None, "the first run ended before it was killed"
    proc.send_signal(signal.SIGKILL)  # no finalizer runs: the testbed stays up
    proc.wait(timeout=30)
    pids = json.loads((started / "state.json").read_text())["pids"]
    assert any(Path(f"/proc/{pid}").exists() for pid in pids), "the killed run's testbed is still running"
    second = subprocess.run(run, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = second.stdout + second.stderr
    assert "a testbed left running by a killed run" in out and str(started) in out, out[-3000:]
    assert not started.exists()
    assert not any(Path(f"/proc/{pid}").exists() and b"dgxspark" in Path(f"/proc/{pid}/cmdline").read_bytes()
                   for pid in pids)
    results = json.loads(((tmp_path / "reports" / "latest").resolve() / "results.json").read_text())
    assert [(t["directory"], t["state"]) for t in results["leftover_testbeds"]] == [(str(started), "stopped")]


def test_the_deadline_bounds_a_run_whose_api_answers_each_request_after_60_s(tmp_path):
    from tests.conftest import REPO

    scenario = tmp_path / "slow"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text("description: an API answering each request after 60 s\nextends: healthy\n"
                                            "cluster:\n  faults: {latency_ms: 60000}\n"
                                            "expect: {rules: {}, root_causes: []}\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites", "--testbed", str(scenario), "-q",
                           "-p", "no:cacheprovider", "--report-dir", str(tmp_path / "reports"),
                           "--dgxspark-deadline", "30", "-k", "node_ready or allocatable"],
                          cwd=REPO, capture_output=True, text=True, timeout=400)
    took = time.monotonic() - started
    results = json.loads(((tmp_path / "reports" / "latest").resolve() / "results.json").read_text())
    assert took < 150, (took, proc.stdout[-2000:])
    assert results["verdict"] == "INCOMPLETE" and results["run"]["interrupted"]["cause"] == "deadline"
    assert proc.returncode == 8, proc.stdout[-2000:]


@pytest.mark.parametrize("signals", [["SIGINT", "SIGINT"], ["SIGTERM"], ["SIGHUP"]], ids=["sigint-twice", "sigterm",
                                                                                        "sighup"])
def test_a_signal_during_the_cuda_sample_leaves_a_sealed_bundle_and_no_namespace(tmp_path, signals):
    from kubernetes import client
    from kubernetes import config as kube_config

    from pytest_dgxspark.testbed import Testbed
    from tests.conftest import REPO

    with Testbed("healthy", tmp_path / "tb") as testbed:
        core = client.CoreV1Api(kube_config.new_client_from_config(str(testbed.kubeconfig),
                                                                   context="tirosh-home/rke2/gpu"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"), "-q",
             "-p", "no:cacheprovider", "--report-dir", str(tmp_path / "reports"), "-k", "cuda_sample",
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180
        while not [n for n in core.list_namespace().items if n.metadata.name.startswith("dgxspark-cuda-")]:
            assert proc.poll() is None and time.monotonic() < deadline, "the CUDA namespace never appeared"
            time.sleep(0.05)
        for name in signals:
            proc.send_signal(getattr(signal, name))
            time.sleep(0.3)
        output, _ = proc.communicate(timeout=120)
        left = [n.metadata.name for n in core.list_namespace().items
                if n.metadata.name.startswith("dgxspark-cuda-") and not n.metadata.deletion_timestamp]
    assert left == [], output[-3000:]
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output[-3000:]
    bundle = (tmp_path / "reports" / "latest").resolve()
    results = json.loads((bundle / "results.json").read_text())
    assert results["verdict"] == "INCOMPLETE" and results["run"]["interrupted"]["by"] == signals[0]
    assert "results.json" in (bundle / "MANIFEST.sha256").read_text()
    assert "Traceback" not in output
