"""The CUDA sample's namespace per run: run-id labels, a Lease, earlier runs' leftovers, and concurrent runs."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.kube import cudarun
from pytest_dgxspark.kube.cudarun import CudaRun, GpuBusy, leftover_report
from tests.conftest import REPO


class FakeApi:
    """Records every call; `fail` makes namespace deletion fail like a dead API server."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.namespaces: dict[str, dict] = {}  # the API's JSON, as targets/core.py answers
        self.leases: dict[str, dict] = {}
        self.fail = False

    def create_namespace(self, body, **_):
        self.calls.append(f"create ns {body['metadata']['name']}")
        md = body["metadata"]
        self.namespaces[md["name"]] = {"metadata": {"name": md["name"], "labels": md["labels"],
                                                    "creationTimestamp": time.time()}}

    def read_namespace(self, name, **_):
        return self.namespaces[name]

    def list_namespace(self, label_selector, **_):
        self.calls.append("list ns")
        return {"items": list(self.namespaces.values())}

    def delete_namespace(self, name, **_):
        self.calls.append(f"delete ns {name}")
        if self.fail:
            raise ApiException(status=503, reason="Service Unavailable")
        self.namespaces.pop(name, None)

    def create_namespaced_lease(self, namespace, body, **_):
        self.calls.append(f"create lease {namespace}")
        self.leases[namespace] = {"spec": {"renewTime": body["spec"]["renewTime"],
                                           "leaseDurationSeconds": body["spec"]["leaseDurationSeconds"]}}

    def read_namespaced_lease(self, name, namespace, **_):
        if namespace not in self.leases:
            raise ApiException(status=404, reason="Not Found")
        return self.leases[namespace]

    def patch_namespaced_lease(self, name, namespace, body, **_):
        self.calls.append(f"renew lease {namespace}")


class Run(CudaRun):
    @property
    def coordination(self):
        return self.cluster.core


def _cluster(api: FakeApi) -> SimpleNamespace:
    return SimpleNamespace(core=api, call=lambda fn, *a, **kw: fn(*a, **kw), where="API", target_id="api:x")


def _plant(api: FakeApi, name: str, age_s: float, lease_age_s: float | None) -> None:
    now = time.time()
    api.namespaces[name] = {"metadata": {"name": name, "labels": {cudarun.RUN_LABEL: name.removeprefix("dgxspark-cuda-")},
                                         "creationTimestamp": now - age_s}}
    if lease_age_s is not None:
        api.leases[name] = {"spec": {"renewTime": cudarun._micro(now - lease_age_s), "leaseDurationSeconds": 30}}


def test_the_namespace_and_lease_carry_the_run_id_and_the_renewal_stops_before_the_delete(monkeypatch):
    monkeypatch.setattr(cudarun, "RENEW_EVERY_S", 0.05)
    api = FakeApi()
    run = Run(_cluster(api), "20261201T000000Z-ABC123", stale_after_s=300, wait_s=5)
    run.create()
    time.sleep(0.2)
    run.delete()
    time.sleep(0.2)
    assert api.calls[:2] == ["create ns dgxspark-cuda-20261201t000000z-abc123",
                             "create lease dgxspark-cuda-20261201t000000z-abc123"]
    assert "renew lease dgxspark-cuda-20261201t000000z-abc123" in api.calls
    assert api.calls[-1] == "delete ns dgxspark-cuda-20261201t000000z-abc123"  # nothing after the delete
    assert run.labels == {"app.kubernetes.io/managed-by": "pytest-dgxspark",
                          "dgxspark.io/run-id": "20261201t000000z-abc123"}


def test_a_failed_delete_is_never_retried_after_teardown_and_is_reported():
    api = FakeApi()
    run = Run(_cluster(api), "r1", stale_after_s=300, wait_s=5)
    run.create()
    api.fail = True
    with pytest.raises(ApiException):
        run.delete()
    run.delete()  # the fixture's teardown, then atexit: no API call
    run.delete()
    assert api.calls.count("delete ns dgxspark-cuda-r1") == 1
    assert leftover_report(run) == [{
        "namespace": "dgxspark-cuda-r1", "run_id": "r1", "created": "",
        "state": "this run's: not deleted (HTTP 503 Service Unavailable); the next run removes it once its Lease expires"}]


def test_earlier_runs_namespaces_are_reported_and_removed_only_when_their_run_is_provably_gone():
    api = FakeApi()
    _plant(api, "dgxspark-cuda-expired", age_s=600, lease_age_s=300)
    _plant(api, "dgxspark-cuda-nolease-old", age_s=900, lease_age_s=None)
    _plant(api, "dgxspark-cuda-nolease-young", age_s=10, lease_age_s=None)
    _plant(api, "dgxspark-cuda-later-live", age_s=-5, lease_age_s=1)
    run = Run(_cluster(api), "mine", stale_after_s=300, wait_s=5)
    run.sweep()
    states = {left.name: left.state for left in run.leftovers}
    assert states == {
        "dgxspark-cuda-expired": "removed: its run's Lease dgxspark-run expired (not renewed for over 30 s)",
        "dgxspark-cuda-nolease-old": "removed: no Lease and older than the CUDA timeout (300 s)",
        "dgxspark-cuda-nolease-young": "kept: no Lease yet, created 10 s ago (less than the CUDA timeout)",
        "dgxspark-cuda-later-live": "kept: its run's Lease dgxspark-run was renewed within 30 s",
    }
    assert [c for c in api.calls if c.startswith("delete")] == ["delete ns dgxspark-cuda-expired",
                                                                 "delete ns dgxspark-cuda-nolease-old"]


class SameSecondApi(FakeApi):
    """creationTimestamp in whole seconds, as the API server writes it: every namespace here is made in one second."""

    def create_namespace(self, body, **kw):
        super().create_namespace(body, **kw)
        self.namespaces[body["metadata"]["name"]]["metadata"]["creationTimestamp"] = 1_780_000_000.0


def test_a_run_made_in_our_second_after_our_create_is_seen_so_only_one_of_the_two_goes(monkeypatch):
    """z makes its namespace first, b in the same second (b sorts first by name): z looks only once that second is
    over, so it sees b and waits for it; b sees z and goes. Looking at once, z saw no one and both went."""
    import threading

    monkeypatch.setattr(cudarun, "WAIT_STEP_S", 0.05)
    api = SameSecondApi()
    z, b = (Run(_cluster(api), name, stale_after_s=300, wait_s=20) for name in ("z-run", "b-run"))
    z_went = threading.Event()
    waiter = threading.Thread(target=lambda: (z.create(), z_went.set()), daemon=True)
    waiter.start()
    _wait_for = time.monotonic() + 5
    while "create ns dgxspark-cuda-z-run" not in api.calls and time.monotonic() < _wait_for:
        time.sleep(0.01)
    time.sleep(0.3)  # z looked by now if it looked at once
    b.create()  # made in z's second after z's namespace, before z looks; b goes first
    assert not z_went.is_set(), "z went although b, first in the order, was live"
    b.stop_renewing()
    b.delete()
    assert z_went.wait(5), "z did not go once b was done"
    waiter.join(5)
    z.delete()


def test_a_live_earlier_run_is_waited_for_and_holding_too_long_is_an_error_not_a_failure(monkeypatch):
    monkeypatch.setattr(cudarun, "WAIT_STEP_S", 0.05)
    api = FakeApi()
    _plant(api, "dgxspark-cuda-earlier", age_s=5, lease_age_s=1)
    run = Run(_cluster(api), "mine", stale_after_s=300, wait_s=1)
    with pytest.raises(GpuBusy) as caught:
        run.create()
    assert str(caught.value) == ("API: other pytest-dgxspark runs still hold the CUDA sample's GPUs after 1 s "
                                 "(dgxspark-cuda-earlier); run again when they are done")
    assert caught.value.target == "api:x"
    run.delete()


def _suite(report_dir: Path, testbed, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"), "-m", "workload",
         "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
         "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(report_dir), "-q",
         "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "60", *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _cuda_rule(report_dir: Path) -> dict:
    doc = json.loads((report_dir / "latest" / "results.json").read_text())
    return next(r for r in doc["rules"] if r["id"] == "ADR-0002.cuda-sample") | {"leftovers": doc["leftover_namespaces"]}


def _cuda_status(report_dir: Path) -> tuple[str, list]:
    rule = _cuda_rule(report_dir)
    return rule["status"], rule["leftovers"]


@pytest.mark.slow
def test_two_runs_at_once_against_one_testbed_both_pass_the_cuda_sample_and_a_killed_runs_namespace_goes(tmp_path):
    from kubernetes import client, config

    from pytest_dgxspark.testbed import Testbed

    with Testbed("healthy", tmp_path / "tb") as testbed:
        api_client = config.new_client_from_config(str(testbed.kubeconfig), context="tirosh-home/rke2/gpu")
        core, coordination = client.CoreV1Api(api_client), client.CoordinationV1Api(api_client)
        killed = "dgxspark-cuda-20260101t000000z-dead00"
        core.create_namespace({"metadata": {"name": killed, "labels": {
            "app.kubernetes.io/managed-by": "pytest-dgxspark", "dgxspark.io/run-id": "20260101t000000z-dead00"}}})
        coordination.create_namespaced_lease(killed, {"metadata": {"name": "dgxspark-run"}, "spec": {
            "holderIdentity": "20260101t000000z-dead00", "leaseDurationSeconds": 30,
            "renewTime": cudarun._micro(time.time() - 600)}})
        # the CUDA sample alone (the isolation checks of the workload layer make namespaces and pods of their own)
        first, second = (_suite(tmp_path / run, testbed, "-k", "cuda_sample") for run in ("a", "b"))
        out = [p.communicate(timeout=300)[0] for p in (first, second)]
        remaining = [ns.metadata.name for ns in core.list_namespace().items if ns.metadata.name.startswith("dgxspark-")]
        requests = [json.loads(line) for line in (tmp_path / "tb" / "requests.jsonl").read_text().splitlines()]
    (status_a, left_a), (status_b, left_b) = _cuda_status(tmp_path / "a"), _cuda_status(tmp_path / "b")
    # on a failure, say what each run's CUDA check saw (its own message), not only the terminal's tail
    assert (status_a, status_b) == ("passed", "passed"), [
        [t["message"] for t in _cuda_rule(tmp_path / run)["tests"]] for run in ("a", "b")] + out
    removed = [entry for entry in left_a + left_b if entry["namespace"] == killed]
    # both runs may list the dead run's namespace before either deletes it: each says what it did, and one of them
    # removed it because its Lease expired (the other's delete found it gone or already going)
    states = [entry["state"] for entry in removed]
    assert "removed: its run's Lease dgxspark-run expired (not renewed for over 30 s)" in states, states
    assert all(s.startswith(("removed: ", "being removed: ")) for s in states), states
    assert remaining == []
    pods = sorted((r for r in requests if r["method"] == "POST" and r["path"].endswith("/pods")), key=lambda r: r["time"])
    assert len(pods) == 2 and all(r["status"] == 201 for r in pods)
    # the runs overlapped (both namespaces existed at once) and the later one created its pod only after the earlier
    # one's namespace was deleted: the testbed's scheduler, like a busy GPU, would have kept it Pending
    first_ns = pods[0]["path"].split("/")[4]
    deleted = [r["time"] for r in requests if r["method"] == "DELETE" and r["path"].endswith(f"/namespaces/{first_ns}")]
    created = [r["time"] for r in requests if r["method"] == "POST" and r["path"] == "/api/v1/namespaces"]
    assert len(created) == 3 and deleted and sorted(created)[2] < deleted[0] < pods[1]["time"]


@pytest.mark.slow
def test_when_the_api_dies_after_the_pod_is_created_the_run_is_incomplete_and_names_its_own_leftover(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "-m", "workload", "--testbed",
         str(REPO / "tests" / "scenarios" / "api-dies-mid-cuda"), "--report-dir", str(tmp_path / "r"), "-q",
         "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "20"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    status, leftovers = _cuda_status(tmp_path / "r")
    doc = json.loads((tmp_path / "r" / "latest" / "results.json").read_text())
    assert (status, doc["verdict"]) == ("error", "INCOMPLETE"), proc.stdout[-2000:]
    assert len(leftovers) == 1 and leftovers[0]["namespace"].startswith("dgxspark-cuda-")
    assert leftovers[0]["state"].startswith("this run's: not deleted (") and leftovers[0]["state"].endswith(
        "); the next run removes it once its Lease expires")


def test_a_user_without_lease_or_namespace_list_rights_runs_the_sample_and_says_what_was_not_checked():
    api = FakeApi()

    def forbidden(*args, **kwargs):
        raise ApiException(status=403, reason="Forbidden")

    api.create_namespaced_lease = forbidden
    api.list_namespace = forbidden
    run = Run(_cluster(api), "r2", stale_after_s=300, wait_s=5)
    run.create()
    run.delete()
    assert [left.state for left in run.leftovers] == [
        "this run's: no Lease (HTTP 403 Forbidden); other runs remove it only after the CUDA timeout",
        "not checked: HTTP 403 Forbidden listing namespaces or reading Leases; concurrent runs are not detected"]
    assert api.calls == ["create ns dgxspark-cuda-r2", "delete ns dgxspark-cuda-r2"]


def test_the_samples_requests_go_out_at_once_and_answer_in_pod_order():
    import threading

    in_flight, most = [0], [0]
    lock = threading.Lock()

    def slow(item: int) -> int:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return item * 10

    started = time.monotonic()
    assert cudarun.per_pod(slow, range(16), at_once=16) == [i * 10 for i in range(16)]
    assert most[0] > 1 and time.monotonic() - started < 16 * 0.05
    most[0] = 0
    assert cudarun.per_pod(slow, range(3), at_once=1) == [0, 10, 20] and most[0] == 1


def test_the_first_failing_request_in_pod_order_propagates_after_every_request_has_finished():
    finished: list[int] = []

    def call(item: int) -> int:
        time.sleep(0.02 * (5 - item))
        finished.append(item)
        if item in (1, 3):
            raise ApiException(status=500 + item)
        return item

    with pytest.raises(ApiException) as raised:
        cudarun.per_pod(call, range(5), at_once=5)
    assert raised.value.status == 501 and sorted(finished) == [0, 1, 2, 3, 4]


def test_no_more_requests_at_once_than_the_clients_connection_pool_holds():
    def cluster(pool):
        return SimpleNamespace(api=SimpleNamespace(configuration=SimpleNamespace(connection_pool_maxsize=pool)))

    assert cudarun.requests_at_once(cluster(10)) == 10
    assert cudarun.requests_at_once(cluster(100)) == cudarun.REQUESTS_AT_ONCE == 16
    assert cudarun.requests_at_once(cluster(None)) == 16
