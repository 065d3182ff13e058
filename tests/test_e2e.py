"""End to end: the real suites against every bundled testbed scenario, checked against its expect block.

The bundled scenarios' workload API is DGXSPARK_E2E_API's: the real control plane (kube-apiserver, etcd,
kube-controller-manager, kube-scheduler, kwok: `--testbed-api real`) by default, each run attached to a kept plane
(testbed/keptplane.py: one per concurrent run, wiped back to its start by each attach; a scenario with API faults
brings up one of its own behind the fault proxy); where the real plane is not built, the Python stand-in, and the
summary says so in one line. DGXSPARK_E2E_API=standin (`make test-standin`, which .ci/run runs) runs them on the
stand-in. The other runs here (the faulted hosts, the healthy Spark's own tests) stay on the stand-in."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

from tests import realplane_available
from tests.conftest import REPO

# slow: the suite against every bundled scenario's testbed (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"
)]


# The bundled scenarios' API: the real control plane where it can start here (why not, else), unless
# DGXSPARK_E2E_API=standin (make test-standin) asks for the Python stand-in
REAL_WHY_NOT = realplane_available.why_not()
E2E_API = os.environ.get("DGXSPARK_E2E_API") or "real"
if E2E_API == "real" and REAL_WHY_NOT is not None:
    E2E_API = "standin"  # said in the summary (tests/conftest.py)
if E2E_API not in ("real", "standin"):
    raise pytest.UsageError(f"DGXSPARK_E2E_API must be real or standin, got {E2E_API!r}")

# Suite runs at once: each is a subprocess with its own testbed (own address slot, own TMPDIR) that mostly waits on
# SSH and the simulated kubelet, so a 2-core CI machine runs 4 of them in about a third of the serial time.
E2E_WORKERS = int(os.environ.get("DGXSPARK_E2E_WORKERS", "4"))

# The day the suite runs judge support dates on (--dgxspark-run-date), so that what they advise does not move with the
# real date: within Kubernetes 1.34's upstream support (end 2026-10-27, catalog/support-lifecycle.yaml), which every
# bundled scenario's RKE2 v1.34.10+rke2r1 builds on, so the healthy Spark stays silent.
RUN_DATE = "2026-10-01"
# Scenarios whose declared forecast is a support end after RUN_DATE run on the day support-lifecycle.yaml read NVIDIA's
# drivers page (their H100 agent's R565 had ended by then; so had Kubernetes 1.34 upstream).
RUN_DATES = {"heterogeneous": "2026-12-02", "nvidia-default-runtime-multi-gpu": "2026-12-02"}


def run_selected(tmp_path_factory: pytest.TempPathFactory, wanted: list[str],
                 runs: dict[str, Callable[[Path], tuple[str, ...]]], kept: set[str] = frozenset()) -> dict[str, Any]:
    """Run the suite for every wanted key at once (E2E_WORKERS in parallel).

    `runs` maps a key to a function that, given the run's own folder, writes what the run needs there and returns
    the suite arguments. The runs of the keys in `kept` attach to a kept real control plane (Planes: one per concurrent
    run, started once, wiped by each attach) with --testbed-plane. Returns key -> (folder, proc, results) or the
    exception of that run, so that each test reports its own run.
    """
    # short folder names: the run's TMPDIR holds SSH ControlMaster sockets (unix socket paths have 108 bytes)
    folders = {key: tmp_path_factory.mktemp("run") for key in dict.fromkeys(wanted) if key in runs}
    planes = Planes(tmp_path_factory) if kept & set(folders) else None

    def run(key: str) -> tuple[subprocess.CompletedProcess, dict]:
        args = runs[key](folders[key])
        if planes is None or key not in kept:
            return run_suite(folders[key], *args)
        plane = planes.borrow()
        try:
            return run_suite(folders[key], *args, "--testbed-plane", str(plane))
        finally:
            planes.give_back(plane)

    def one(key: str) -> Any:
        try:
            found = folders[key], *run(key)
            if _bring_up_failed(found[2]):  # the testbed did not start (a loaded machine): once more, in a new folder
                folders[key] = tmp_path_factory.mktemp("run")
                found = folders[key], *run(key)
            return found
        except BaseException as error:  # noqa: BLE001 - handed to the test of that run
            return error

    try:
        with ThreadPoolExecutor(max_workers=max(1, E2E_WORKERS)) as pool:
            return dict(zip(folders, pool.map(one, folders)))
    finally:
        if planes is not None:
            planes.stop()


class Planes:
    """Kept real control planes (testbed/keptplane.py) lent to a pool's runs: one per concurrent run, started when
    none is free, handed back after the run (a plane whose processes died is stopped instead, and a new one started
    when needed); each attach wipes it back to its start, so a run finds what a plane of its own would hold."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.root = tmp_path_factory.mktemp("planes")
        self.free: list[Path] = []
        self.started: list[Path] = []
        self.lock = threading.Lock()

    def borrow(self) -> Path:
        from pytest_dgxspark.testbed import keptplane

        with self.lock:
            if self.free:
                return self.free.pop()
            directory = self.root / f"p{len(self.started)}"
            self.started.append(directory)
        keptplane.start(directory)
        return directory

    def give_back(self, directory: Path) -> None:
        from pytest_dgxspark.testbed import keptplane

        try:
            keptplane.load(directory)
        except keptplane.KeptPlaneError:
            keptplane.stop(directory)
            return
        with self.lock:
            self.free.append(directory)

    def stop(self) -> None:
        from pytest_dgxspark.testbed import keptplane

        for directory in self.started:
            keptplane.stop(directory)


def kept_plane_runs(names: list[str]) -> set[str]:
    """The bundled scenarios that attach to a kept plane when E2E_API is real: all but those whose cluster.faults need
    the fault proxy in front of a plane of their own, and those whose API does not answer (no plane at all)."""
    from pytest_dgxspark.testbed import scenario

    if E2E_API != "real":
        return set()
    return {name for name in names if not scenario.load(name).cluster.get("faults")
            and not scenario.load(name).cluster.get("unreachable")}


def _bring_up_failed(doc: dict[str, Any]) -> bool:
    """Whether the run's testbed itself never came up (its tests all say so): no statement about the checks."""
    messages = [t.get("message") or "" for r in doc.get("rules") or [] for t in r.get("tests") or []]
    return any(" did not start: " in m and "bring-up failed" in m for m in messages)


def selected(request: pytest.FixtureRequest, test_name: str | None = None) -> list[str]:
    """The parameter ids of the selected items of `test_name`, or the names of the module's selected tests."""
    items = [i for i in request.session.items if i.module is request.module]
    if test_name is None:
        return [getattr(i, "originalname", i.name) for i in items]
    return [i.callspec.id for i in items if getattr(i, "originalname", None) == test_name and hasattr(i, "callspec")]


def result_of(runs: dict[str, Any], key: str) -> Any:
    found = runs[key]
    if isinstance(found, BaseException):
        raise found
    return found


def bundled_scenarios() -> list[str]:
    from pytest_dgxspark.testbed import scenario

    return [name for name, _ in scenario.bundled()]


def run_suite(tmp_path: Path, *args: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess, dict]:
    report_dir = tmp_path / "reports"
    if "--dgxspark-run-date" not in args:
        args = (*args, "--dgxspark-run-date", RUN_DATE)
    cmd = [sys.executable, "-m", "pytest", "suites", "--report-dir", str(report_dir), "-p", "no:cacheprovider",
           "-q", "--no-header", "--dgxspark-cuda-timeout", "15", "--dgxspark-smi-timeout", "8", *args]
    env = {**os.environ, "TMPDIR": str(_run_tmp(tmp_path))}
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGINT)  # like Ctrl-C: the run tears its testbed down and writes its report
            out, err = child.communicate(timeout=60)
        proc = subprocess.CompletedProcess(cmd, child.returncode, out, err)
    results = report_dir / "latest" / "results.json"
    assert results.is_file(), f"no results.json written\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    return proc, json.loads(results.read_text())


def _run_tmp(tmp_path: Path) -> Path:
    """The TMPDIR of one suite run: its testbed directory is made there."""
    path = tmp_path / "tmp"
    path.mkdir(exist_ok=True)
    return path


def assert_torn_down(tmp_path: Path) -> None:
    """The run's testbed is gone: its directory removed and its address slot released (netns go with it)."""
    run_tmp = _run_tmp(tmp_path)
    assert list(run_tmp.glob("dgxspark-testbed-*")) == [], "the testbed directory was left behind"
    from pytest_dgxspark.testbed import netns

    locks = [lk for lk in netns._slot_dir().glob("*.lock") if str(run_tmp) in lk.read_text()]
    assert locks == [], f"the testbed's address slot was not released: {locks}"


def bundled_half(half: int) -> list[str]:
    """Every other bundled scenario: this file runs half 0, tests/test_e2e_other_half.py half 1, so that the two
    pytest-xdist workers of `make test` (--dist loadfile: a file on one worker) each run a pool of them."""
    return bundled_scenarios()[half::2]


def bundled_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One suite run per selected bundled scenario of the module, E2E_WORKERS at a time; `extra`: test name ->
    (key, run) of more runs in the same pool (longest first), made when that test is selected."""
    wanted = selected(request, "test_the_suites_give_the_scenarios_expected_statuses_and_root_causes")
    runs = {name: (lambda _folder, name=name: ("--testbed", name, "--testbed-api", E2E_API,
                                               "--dgxspark-run-date", RUN_DATES.get(name, RUN_DATE)))
            for name in bundled_scenarios()}
    kept = kept_plane_runs(wanted)
    for test_name, (key, run) in (extra or {}).items():
        if test_name in selected(request):
            wanted, runs[key] = [key, *wanted], run
    return run_selected(tmp_path_factory, wanted, runs, kept)


@pytest.fixture(scope="module")
def scenario_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """This file's half of the bundled scenarios and its faulted runs, in one pool."""
    return bundled_runs(request, tmp_path_factory, FAULT_RUNS)


EXIT_INCOMPLETE = 8


def fault_scenario(folder: Path, extends: str, body: str) -> str:
    """A scenario directory in the run's folder extending `extends` with `body` (YAML), no expectations of its own."""
    scn = folder / "scn"
    scn.mkdir()
    (scn / "scenario.yaml").write_text(f"description: fault run\nextends: {extends}\n{body}"
                                       "expect: {rules: {}, root_causes: []}\n")
    return str(scn)


def frozen_host_run(folder: Path) -> tuple[str, ...]:
    """healthy, whose host freezes after the master's `true`: the gathering round hangs for good (TCP up); a 3 s
    command and nvidia-smi limit make the round's limit 13 s and the wait for the frozen host 43 s, not 100."""
    body = "nodes:\n  gpu-01:\n    host:\n      faults: {freeze_after: 1}\n"
    return ("--testbed", fault_scenario(folder, "healthy", body), "--dgxspark-command-timeout", "3",
            "--dgxspark-smi-timeout", "3")


def cpu_host_dropped_run(folder: Path) -> tuple[str, ...]:
    """two-node, whose CPU-only agent drops its SSH connection at the first gathering round."""
    return "--testbed", fault_scenario(folder, "two-node", "nodes:\n  cpu-01:\n    host:\n      faults: {drop_after: 1}\n")


FROZEN_HOST, CPU_HOST_DROPPED = "frozen-host", "cpu-host-dropped"
FAULT_RUNS = {
    "test_a_host_frozen_mid_run_ends_incomplete_with_the_freeze_named_within_the_command_limit":
        (FROZEN_HOST, frozen_host_run),
    "test_a_cpu_only_host_that_drops_ssh_leaves_the_gpu_chain_judged_and_its_gpu_checks_not_applicable":
        (CPU_HOST_DROPPED, cpu_host_dropped_run),
}


@pytest.mark.parametrize("name", bundled_half(0))
def test_the_suites_give_the_scenarios_expected_statuses_and_root_causes(scenario_runs, name):
    check_bundled(scenario_runs, name)


def check_bundled(scenario_runs: dict[str, Any], name: str) -> None:
    """The scenario's run gave its declared statuses, root causes and forecast, and every derived file agrees."""
    from pytest_dgxspark.testbed import scenario

    expect = scenario.load(name).expect
    tmp_path, proc, doc = result_of(scenario_runs, name)
    got = {r["id"]: r["status"] for r in doc["rules"]}
    messages = {r["id"]: [t["message"] for t in r["tests"] if t["message"]] for r in doc["rules"]}
    wrong = {rid: (want, got.get(rid), messages.get(rid)) for rid, want in expect["rules"].items() if got.get(rid) != want}
    assert wrong == {}, f"{name}: rule statuses differ (expected, got, messages)\n{proc.stdout[-3000:]}"
    assert sorted(doc["root_causes"]) == sorted(expect["root_causes"])
    # each forecast fires in its scenario and stays silent everywhere else (healthy included)
    advised = sorted({e["id"] for e in doc["forecast"] if e["status"] == "advised"})
    assert advised == sorted(expect["forecast"]), f"{name}: forecast {doc['forecast']}"
    assert doc["run"]["simulated"] is True and doc["run"]["testbed"] == name
    args = doc["run"]["pytest_args"]
    assert args[args.index("--testbed-api") + 1] == E2E_API, "the run was not on the API test_e2e.py chose"
    # junit.xml (and the terminal, from the same report) says what results.json says of every test
    junit = junit_statuses(tmp_path / "reports" / "latest" / "junit.xml")
    from pytest_dgxspark.report.rows import rows

    shown = {nodeid: row.status for nodeid, row in rows(doc).items()}  # a recorded or waived rule's status, else own
    differ = {t["nodeid"]: (junit.get(t["nodeid"]), shown[t["nodeid"]]) for r in doc["rules"] for t in r["tests"]
              if junit.get(t["nodeid"]) != (shown[t["nodeid"]], JUNIT_ELEMENT.get(shown[t["nodeid"]]))}
    assert differ == {}, f"{name}: junit dgxspark status or element differs from results.json (junit, results)"
    # every derived file (report.html row by row and its header, junit.xml, summary.html, ctrf.json) agrees with it
    from pytest_dgxspark.report.derived import all_problems

    run_dir = (tmp_path / "reports" / "latest").resolve()
    disagreements = {file: found for file, found in all_problems(run_dir, doc).items() if found}
    assert disagreements == {}, f"{name}: derived files disagree with results.json"
    assert (run_dir / "report.html").is_file() and (run_dir / "junit.xml").is_file()
    assert_torn_down(tmp_path)


# results.json status of a test -> the element of its junit testcase (none for passed and recorded)
JUNIT_ELEMENT = {"error": "error", "failed": "failure", "blocked": "skipped", "not-applicable": "skipped",
                 "skipped": "skipped", "waived": "skipped", "untested": "skipped"}


def junit_statuses(path: Path) -> dict[str, tuple[str | None, str | None]]:
    """nodeid -> (the test outcome its junit testcase's status line names, the tag of its outcome element)."""
    import xml.etree.ElementTree as ET

    from pytest_dgxspark.report.junitagree import STATUS_PREFIX

    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        line = next((o.text for o in case.iter("system-out") if (o.text or "").startswith(STATUS_PREFIX)), "")
        status = line[len(STATUS_PREFIX):].split(";")[0] or None
        element = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), None)
        path_part, _, rest = (case.get("classname") or "").rpartition(".")
        found[f"{path_part.replace('.', '/')}/{rest}.py::{case.get('name')}"] = (status, element)
    return found


def test_every_judged_rule_is_a_root_cause_in_some_bundled_scenario():
    """Each of the 30 rules goes red on its own in some bundled scenario: its expect names it as a root cause, and
    check_bundled (both halves) proves each scenario's run names exactly its expected root causes; an informational
    rule is judged (and so red somewhere) where a scenario's site declares what it checks (judged_when:
    hardening-baseline in hardening-audit-policy-default)."""
    from pytest_dgxspark.catalog.rules import load_catalog
    from pytest_dgxspark.testbed import scenario

    causes = {rid for name in bundled_scenarios() for rid in scenario.load(name).expect["root_causes"]}
    judged = [r.id for r in load_catalog().ordered() if r.kind != "informational" or r.judged_when]
    never = [rid for rid in judged if rid not in causes]
    assert never == [], f"rules that no bundled scenario's run names as a root cause: {', '.join(never)}"


def test_a_host_frozen_mid_run_ends_incomplete_with_the_freeze_named_within_the_command_limit(scenario_runs):
    tmp_path, proc, doc = result_of(scenario_runs, FROZEN_HOST)
    assert doc["verdict"] == "INCOMPLETE" and proc.returncode == EXIT_INCOMPLETE, proc.stdout[-3000:]
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    assert [rid for rid, s in statuses.items() if s == "failed"] == [] and doc["lowest_broken_layer"] is None
    assert statuses["ADR-0002.host-static-ip"] == "error" and statuses["ADR-0002.host-driver"] == "blocked"
    assert [(d["rule"], d["kind"], d["target"], d["cause"]) for d in doc["root_cause_details"]] == [
        ("ADR-0002.host-static-ip", "unreachable", "ssh:gpu-01", "timeout")]
    cause = doc["root_cause_details"][0]
    assert cause["message"].endswith(": cannot read the host over SSH: the host stopped answering during the run (the "
                                     "SSH session did not return in time) (a command did not return within 43 s "
                                     "although the host's own timeout should have ended it)")
    assert cause["fix"] == "Look at the host's console (frozen, out of memory, network lost) and rerun once it answers."
    assert cause["fix_ko"] == "호스트 콘솔에서 멈춤, 메모리 부족, 네트워크 단절을 확인하고 응답하면 다시 실행한다."
    assert "NVML" not in proc.stdout and "Traceback" not in proc.stdout and "pytest_dgxspark/" not in proc.stdout
    assert "dgxspark: INCOMPLETE, scope: full (SIMULATED)" in proc.stdout
    assert_torn_down(tmp_path)


def test_a_cpu_only_host_that_drops_ssh_leaves_the_gpu_chain_judged_and_its_gpu_checks_not_applicable(scenario_runs):
    tmp_path, proc, doc = result_of(scenario_runs, CPU_HOST_DROPPED)
    assert doc["verdict"] == "INCOMPLETE" and proc.returncode == EXIT_INCOMPLETE, proc.stdout[-3000:]
    assert [(d["rule"], d["target"], d["cause"]) for d in doc["root_cause_details"]] == [
        ("ADR-0002.host-static-ip", "ssh:cpu-01", "dropped")]
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    gpu_chain = ("ADR-0002.host-driver", "ADR-0002.host-nvml", "ADR-0002.driver-source", "ADR-0002.gpu-injection",
                 "ADR-0002.allocatable", "ADR-0002.cuda-sample")
    assert {rid: statuses[rid] for rid in gpu_chain} == {rid: "passed" for rid in gpu_chain}  # judged on gpu-01
    cpu = {t["nodeid"].split("::")[-1]: (t["outcome"], t["message"]) for r in doc["rules"] for t in r["tests"]
           if r["id"] in gpu_chain and t["nodeid"].endswith("[cpu-01]")}
    assert cpu and set(cpu.values()) == {("not-applicable", "cpu-01 is not a GPU host (dgxspark_gpu: false)")}
    assert statuses["ADR-0001.rke2-service"] == "blocked"  # cpu-01's own service: unverified, never N/A
    assert_torn_down(tmp_path)


def test_the_healthy_dgx_spark_passes_every_rule_but_the_air_gap_one(tmp_path):
    proc, doc = run_suite(tmp_path, "--testbed", "healthy")
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    assert statuses.pop("ADR-0002.image-mirror") == "not-applicable"
    assert statuses.pop("ADR-0001.hardening-baseline") == "recorded"  # informational: recorded, never passed
    assert statuses.pop("SPARK.gpu-sharing-replicas") == "not-applicable"  # tirosh-home declares no GPU sharing
    assert set(statuses.values()) == {"passed"}, proc.stdout[-3000:]
    assert proc.returncode == 0
    assert doc["verdict"] == "ACCEPTED" and doc["root_causes"] == []
    assert doc["forecast"] == [] and doc["forecast_mode"] == "advise"  # silent on the healthy Spark (on RUN_DATE)
    assert set(doc["forecast_checked"].values()) == {"silent"} and len(doc["forecast_checked"]) == 7
    # the server's etcd-s3 credentials (its config.yaml.d drop-in, read as evidence) reach no bundle file
    from pytest_dgxspark.testbed.hostspec import TESTBED_ETCD_S3_CREDENTIALS

    bundle = (tmp_path / "reports" / "latest").resolve()
    removed = {e["where"].rsplit(".", 1)[-1] for e in doc["redactions"]}
    assert {"etcd-s3-access-key", "etcd-s3-secret-key"} <= removed  # read, and removed by the redaction layer
    assert any(b"tirosh-home-etcd-snapshots" in p.read_bytes() for p in bundle.rglob("*") if p.is_file())
    leaked = [(p.name, v) for p in bundle.rglob("*") if p.is_file() for v in TESTBED_ETCD_S3_CREDENTIALS
              if v.encode() in p.read_bytes()]
    assert leaked == []


def test_past_kubernetes_1_34s_upstream_end_the_healthy_spark_is_advised_to_upgrade_rke2(tmp_path):
    proc, doc = run_suite(tmp_path, "--testbed", "healthy", "--dgxspark-run-date", "2026-12-02",
                          "-k", "within_support or helmchart_pins")
    advised = [(e["id"], e["status"], e["due"]) for e in doc["forecast"]]
    assert advised == [("SPARK.component-support", "advised", "2026-10-27")], proc.stdout[-3000:]
    where, _, message = doc["forecast"][0]["message"].partition("): ")
    assert where.startswith("Kubernetes API of context 'tirosh-home/rke2/gpu' (https://")
    assert message == (
        "RKE2 minor (its Kubernetes minor's upstream support) v1.34.10+rke2r1 is past the end of "
        "its support on 2026-10-27 (run date 2026-12-02; source: kubernetes.io/releases/1.34: Kubernetes 1.34 "
        "Maintenance Mode Start Date 2026-08-27, End Of Life Date 2026-10-27 (upstream Kubernetes, which RKE2 v1.34 "
        "builds on; not SUSE's RKE2 date)): no more bug or CVE fixes")


def test_gpu_marker_reruns_exactly_the_gpu_chain(tmp_path):
    from pytest_dgxspark.catalog.rules import load_catalog

    proc, doc = run_suite(tmp_path, "--testbed", "healthy", "-m", "gpu")
    gpu_rules = {r.id for r in load_catalog().rules.values() if r.gpu}
    tested = {r["id"] for r in doc["rules"] if r["tests"]}
    assert tested == gpu_rules
    # the deselected rules are not-selected, not untested: the selection is judged on its own scope
    assert {r["id"] for r in doc["rules"] if r["status"] == "not-selected"} == {
        r.id for r in load_catalog().rules.values() if not r.gpu}
    assert doc["verdict"] == "ACCEPTED" and doc["scope"]["name"] == "GPU chain" and proc.returncode == 0
    assert doc["scope"]["unverified_prerequisites"] == [
        "ADR-0002.helmchart-manifest", "ADR-0001.rke2-service", "ADR-0001.node-ready",
        "ADR-0001.runtime-rke2-containerd"]
    assert "dgxspark: ACCEPTED, scope: GPU chain (SIMULATED)" in proc.stdout


def test_a_terminated_run_tears_the_testbed_down_and_still_writes_its_report(tmp_path):
    run_tmp = _run_tmp(tmp_path)
    report_dir = tmp_path / "reports"
    cmd = [sys.executable, "-m", "pytest", "suites", "--testbed", "cuda-pending", "--report-dir", str(report_dir),
           "-p", "no:cacheprovider", "-q", "--dgxspark-cuda-timeout", "120"]
    env = {**os.environ, "TMPDIR": str(run_tmp)}
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as child:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _cuda_pod_created(run_tmp):
            time.sleep(0.2)
        child.send_signal(signal.SIGTERM)  # as a cancelled CI job or `timeout` would
        out, _ = child.communicate(timeout=60)
    doc = json.loads((report_dir / "latest" / "results.json").read_text())
    cuda = next(r for r in doc["rules"] if r["id"] == "ADR-0002.cuda-sample")
    assert cuda["status"] == "error", out[-2000:]
    assert doc["verdict"] == "INCOMPLETE"
    assert_torn_down(tmp_path)


def _cuda_pod_created(run_tmp: Path) -> bool:
    """Whether this run's testbed has recorded the CUDA sample's pod create."""
    for directory in run_tmp.glob("dgxspark-testbed-*"):
        try:
            lines = (directory / "requests.jsonl").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                req = json.loads(line)
            except ValueError:
                continue
            if req.get("method") == "POST" and req.get("path", "").endswith("/pods"):
                return True
    return False


def _testbed_secrets(directory: Path) -> list[str]:
    """Every credential a testbed hands out: kubeconfig client keys and certs, the SSH key, Argo CD's bearer token."""
    import base64

    import yaml

    secrets = [(directory / "id_ed25519").read_text().strip()]
    kubeconfig = yaml.safe_load((directory / "kubeconfig").read_text())
    for user in kubeconfig["users"]:
        for key in ("client-key-data", "client-certificate-data", "token"):
            if user["user"].get(key):
                secrets.append(user["user"][key])
                if key != "token":
                    secrets.append(base64.b64decode(user["user"][key]).decode().strip())
    world = json.loads((directory / "management-world.json").read_text())
    for obj in world["objects"]:
        config = ((obj.get("data") or {}).get("config")) if obj.get("kind") == "Secret" else None
        if config:
            secrets.append(config)
            secrets.append(json.loads(base64.b64decode(config))["bearerToken"])
    return [s for s in secrets if len(s) >= 16]


def test_no_credential_reaches_the_bundle(tmp_path):
    from pytest_dgxspark.testbed import Testbed

    with Testbed("healthy", tmp_path / "tb") as testbed:
        secrets = _testbed_secrets(tmp_path / "tb")
        assert len(secrets) >= 6
        report_dir = tmp_path / "reports"
        subprocess.run(
            [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"),
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(report_dir), "-q",
             "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "15"],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        )
    bundle = (report_dir / "latest").resolve()
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"results.json", "report.html", "summary.html", "junit.xml", "MANIFEST.sha256"}
    assert json.loads((bundle / "results.json").read_text())["verdict"] == "ACCEPTED"
    leaks = [(p.name, s[:12]) for p in files for s in secrets if s in p.read_text(errors="replace")]
    assert leaks == []
