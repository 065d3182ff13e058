"""End to end on the real control plane: the suites against bundled scenarios whose workload API is kube-apiserver,
etcd, kube-controller-manager, kube-scheduler and kwok (`--testbed-api real`), checked against each expect block.

`make test` runs a quick set here; `make test-realplane` (which .ci/run runs) runs every bundled scenario on the real
plane through tests/test_e2e.py and tests/test_e2e_other_half.py (DGXSPARK_E2E_API=real). Without the binaries (no
Go, or the module proxy refused) these tests skip and the run's summary says so in one line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_e2e import assert_torn_down, bundled_scenarios, result_of, run_selected, selected

NOT_BUILT: str | None
try:
    from pytest_dgxspark.testbed.realplane import RealPlaneError, binaries

    binaries()
    NOT_BUILT = None
except RealPlaneError as exc:
    NOT_BUILT = str(exc)

# slow: the suite against the real control plane (make test only; make test-fast deselects it)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"),
    pytest.mark.skipif(NOT_BUILT is not None, reason=f"real control plane: {NOT_BUILT}"),
]

# what `make test` runs on the real plane (each run brings up its own control plane: ~25-35 s on 2 shared cores): the
# healthy Spark, the real scheduler's Pending, kwok's admission failure, the fault proxy, and the isolation probes'
# GPU leak (kwokrun.py)
QUICK = ["healthy", "cuda-pending", "cuda-failing", "api-flaky", "nvidia-default-runtime"]
ALL = bundled_scenarios()


@pytest.fixture(scope="module")
def real_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    wanted = selected(request, "test_the_scenario_gives_its_declared_statuses_on_the_real_control_plane")
    runs = {name: (lambda _folder, name=name: ("--testbed", name, "--testbed-api", "real")) for name in ALL}
    return run_selected(tmp_path_factory, wanted, runs)


@pytest.mark.parametrize("name", QUICK)
def test_the_scenario_gives_its_declared_statuses_on_the_real_control_plane(real_runs, name):
    from pytest_dgxspark.testbed import scenario

    expect = scenario.load(name).expect
    tmp_path, proc, doc = result_of(real_runs, name)
    got = {r["id"]: r["status"] for r in doc["rules"]}
    messages = {r["id"]: [t["message"] for t in r["tests"] if t["message"]] for r in doc["rules"]}
    wrong = {rid: (want, got.get(rid), messages.get(rid)) for rid, want in expect["rules"].items()
             if got.get(rid) != want}
    assert wrong == {}, f"{name} on the real plane: rule statuses differ (expected, got, messages)\n{proc.stdout[-3000:]}"
    assert sorted(doc["root_causes"]) == sorted(expect["root_causes"])
    assert doc["run"]["simulated"] is True and doc["run"]["testbed"] == name
    assert_torn_down(tmp_path)

