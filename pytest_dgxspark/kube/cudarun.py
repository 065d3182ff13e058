"""The CUDA sample's namespace of one run: run-id labels, a Lease renewed while the run lives, earlier runs' leftovers."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

import pytest
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.checking import TargetError

MANAGED_BY = {"app.kubernetes.io/managed-by": "pytest-dgxspark"}
RUN_LABEL = "dgxspark.io/run-id"
LEASE_NAME = "dgxspark-run"
LEASE_DURATION_S = 30
RENEW_EVERY_S = 10
WAIT_STEP_S = 2.0
# creationTimestamp has whole seconds: once the server's clock is past our namespace's second, every run that comes
# after our first look is created in a later second and so sorts after us (see wait_for_other_runs)
SETTLE_S = 1.05
REQUEST_TIMEOUT = (10, 30)
# The sample's per-node requests (pod create, log, diagnostics) in flight at once: 16 nodes cost about one round
# trip, not 16. Never more than the client's connection pool holds (5 per CPU), which would open and drop extras.
REQUESTS_AT_ONCE = 16
leftovers_key = pytest.StashKey["list[CudaRun]"]()  # every namespace the run made, in order
T = TypeVar("T")
R = TypeVar("R")


def requests_at_once(cluster: Any) -> int:
    """How many of the sample's requests go out at once: REQUESTS_AT_ONCE, at most the client's pool size."""
    pool = getattr(getattr(cluster.api, "configuration", None), "connection_pool_maxsize", None)
    return max(1, min(REQUESTS_AT_ONCE, int(pool or REQUESTS_AT_ONCE)))


def per_pod(call: Callable[[T], R], items: Iterable[T], at_once: int = REQUESTS_AT_ONCE) -> list[R]:
    """call(item) for every item, `at_once` at a time; the answers in the items' order. Every call finishes before
    the first exception (in the items' order) propagates, so none is left running behind a failure."""
    items = list(items)
    if len(items) <= 1 or at_once <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(at_once, len(items)), thread_name_prefix="cuda-sample") as pool:
        futures = [pool.submit(call, item) for item in items]
    return [future.result() for future in futures]


class GpuBusy(TargetError):
    """Another live pytest-dgxspark run holds the sample's GPUs for longer than this run may wait."""


@dataclass(frozen=True)
class Leftover:
    """A CUDA sample namespace of another run, and what this run did about it."""

    name: str
    run_id: str
    created: str
    state: str  # "removed: <why>", "kept: <why>" or "removal failed: <why>"

    def as_dict(self) -> dict[str, str]:
        return {"namespace": self.name, "run_id": self.run_id, "created": self.created, "state": self.state}


def _micro(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _forbidden(error: BaseException) -> str | None:
    """'HTTP 403 Forbidden' when `error` is a 403 (a raw ApiException, or the cluster's error whose cause is
    `forbidden`), else None."""
    if isinstance(error, ApiException):
        return f"HTTP 403 {error.reason}" if error.status == 403 else None
    return "HTTP 403 Forbidden" if getattr(getattr(error, "cause", None), "kind", None) == "forbidden" else None


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _created(obj: dict[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("creationTimestamp")


def _phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


def _lease_alive(lease: Any, now: float) -> bool:
    """A Lease (its JSON) renewed within its duration (times and durations as the API gives them)."""
    spec = lease.get("spec") if isinstance(lease, dict) else None
    if not isinstance(spec, dict):
        return False
    duration = spec.get("leaseDurationSeconds")
    renewed = _parse_time(spec.get("renewTime"))
    return renewed is not None and now - renewed <= int(duration or LEASE_DURATION_S)


class CudaRun:
    """The run's dgxspark-cuda-<runid> namespace with its Lease; `create()` also deals with earlier runs' leftovers."""

    def __init__(self, cluster: Any, run_id: str, stale_after_s: int, wait_s: int, purpose: str = "") -> None:
        self.cluster = cluster
        self.run_id = run_id.lower()
        # one namespace per check of the run (the CUDA sample's has no purpose; the isolation checks name theirs), so a
        # check never meets the previous check's namespace still terminating
        self.name = (f"dgxspark-cuda-{self.run_id}" + (f"-{purpose}" if purpose else ""))[:63].rstrip("-")
        self.stale_after_s = stale_after_s  # a namespace without a live Lease older than this is provably gone
        self.wait_s = wait_s
        self.labels = {**MANAGED_BY, RUN_LABEL: self.run_id}
        self.leftovers: list[Leftover] = []
        self.created = False
        self.deleted = False
        self.closed = False  # after the first delete attempt: never another API call (also not at exit)
        self.delete_error: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._created_at: float | None = None  # monotonic time of the create's answer

    @property
    def coordination(self) -> Any:
        """The Lease calls (coordination.k8s.io/v1): targets/core.py's, on the cluster's client."""
        return self.cluster.core

    # --- this run's namespace -----------------------------------------------------------------------------------
    def create(self) -> None:
        """Our namespace and Lease first (so concurrent runs see us), then leftovers, then wait for a free GPU slot."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.name, "labels": {
            **self.labels,
            # vectorAdd runs as the image's user; baseline admits it also on CIS (restricted) clusters
            "pod-security.kubernetes.io/enforce": "baseline",
        }}}
        self.created = True  # from the first attempt on: a lost answer may still have created it, so always delete
        try:
            self.cluster.call(self.cluster.core.create_namespace, body, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 409:  # 409: an earlier attempt whose answer was lost created it (the name is ours)
                raise
        self._created_at = time.monotonic()
        if self._create_lease():
            self._renewer = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
            self._renewer.start()
        try:
            self.sweep()
            self.wait_for_other_runs()
        except (ApiException, TargetError) as error:
            if _forbidden(error) is None:
                raise
            # a user that may run the sample but not list namespaces or read Leases: said, not judged
            self.leftovers.append(Leftover("(all)", "", "", f"not checked: {_forbidden(error)} listing "
                                           "namespaces or reading Leases; concurrent runs are not detected"))

    def _lease_body(self, now: float) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": LEASE_NAME, "namespace": self.name, "labels": dict(self.labels)},
                "spec": {"holderIdentity": self.run_id, "leaseDurationSeconds": LEASE_DURATION_S,
                         "acquireTime": _micro(now), "renewTime": _micro(now)}}

    def _create_lease(self) -> bool:
        """The run's Lease; False when the user may not create one (other runs then go by the namespace's age)."""
        try:
            self.cluster.call(self.coordination.create_namespaced_lease, self.name, self._lease_body(time.time()),
                              _request_timeout=REQUEST_TIMEOUT)
        except (ApiException, TargetError) as error:
            if _forbidden(error) is not None:
                self.leftovers.append(Leftover(self.name, self.run_id, "", f"this run's: no Lease ({_forbidden(error)}"
                                               "); other runs remove it only after the CUDA timeout"))
                return False
            if getattr(error, "status", None) != 409:
                raise
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                self.coordination.patch_namespaced_lease(
                    LEASE_NAME, self.name, {"spec": {"renewTime": _micro(time.time())}},
                    _request_timeout=(5, 10))
            except Exception:  # noqa: BLE001 - a missed renewal only lets another run call us gone later
                continue

    def stop_renewing(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=15)

    def delete(self) -> None:
        """Stop renewing, then delete the namespace once; whatever happens, no API call follows."""
        if self.closed:
            return
        self.closed = True
        try:
            self.stop_renewing()
            if not self.created or self.deleted:
                return
            self.cluster.call(self.cluster.core.delete_namespace, self.name, propagation_policy="Background",
                              _request_timeout=REQUEST_TIMEOUT)
        except KeyboardInterrupt:
            # the run's first signal met the delete itself: not closed, so the fixture's teardown (or exit) deletes
            self.closed = False
            raise
        except ApiException as error:
            if error.status != 404:
                self.delete_error = f"HTTP {error.status} {error.reason}"
                raise
        except Exception as error:
            self.delete_error = f"{type(error).__name__}: {str(error)[:300]}"
            raise
        self.deleted = True

    # --- other runs -------------------------------------------------------------------------------------------
    def _others(self) -> list[Any]:
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        listed = self.cluster.call(self.cluster.core.list_namespace, label_selector=selector,
                                   _request_timeout=REQUEST_TIMEOUT)
        # this run's other namespaces (another check's, deleted before this one began) are no other run's
        return [ns for ns in listed.get("items") or [] if _name(ns) != self.name and _name(ns).startswith("dgxspark-cuda-")
                and _labels(ns).get(RUN_LABEL) != self.run_id]

    def _alive(self, namespace: Any, now: float) -> tuple[bool, str]:
        """Whether the run that made `namespace` provably still lives (its Lease renewed), and why."""
        if _phase(namespace) == "Terminating":
            return False, "already terminating"
        try:
            lease = self.cluster.call(self.coordination.read_namespaced_lease, LEASE_NAME, _name(namespace),
                                      _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                raise
            lease = None
        created = _parse_time(_created(namespace)) or now
        if lease is not None and _lease_alive(lease, now):
            return True, f"its run's Lease {LEASE_NAME} was renewed within {LEASE_DURATION_S} s"
        if lease is not None:
            return False, f"its run's Lease {LEASE_NAME} expired (not renewed for over {LEASE_DURATION_S} s)"
        if now - created > self.stale_after_s:
            return False, f"no Lease and older than the CUDA timeout ({self.stale_after_s} s)"
        return True, f"no Lease yet, created {int(now - created)} s ago (less than the CUDA timeout)"

    def sweep(self) -> None:
        """Report every earlier run's namespace; remove those whose run is provably gone."""
        now = time.time()
        for namespace in self._others():
            name = _name(namespace)
            run_id = _labels(namespace).get(RUN_LABEL, name.removeprefix("dgxspark-cuda-"))
            created = _micro(_parse_time(_created(namespace)) or now)
            if _phase(namespace) == "Terminating":
                self.leftovers.append(Leftover(name, run_id, created, "being removed: already terminating"))
                continue
            alive, why = self._alive(namespace, now)
            if alive:
                self.leftovers.append(Leftover(name, run_id, created, f"kept: {why}"))
                continue
            try:
                self.cluster.call(self.cluster.core.delete_namespace, name, propagation_policy="Background",
                                  _request_timeout=REQUEST_TIMEOUT)
                state = f"removed: {why}"
            except ApiException as error:
                state = "removed: already gone" if error.status == 404 else \
                    f"removal failed: HTTP {error.status} {error.reason} ({why})"
            except TargetError as error:  # a 403: this identity may not delete it (said; the run goes on)
                if _forbidden(error) is None:
                    raise
                state = f"removal failed: {_forbidden(error)} ({why})"
            self.leftovers.append(Leftover(name, run_id, created, state))

    def live_others(self) -> list[str]:
        """Live runs that came first (creation time, then name: every run sees the same order, so none deadlock)."""
        now = time.time()
        others = self._others()
        mine = next((_parse_time(_created(ns)) for ns in self._own()), None) or now
        first = [ns for ns in others if ((_parse_time(_created(ns)) or now), _name(ns)) < (mine, self.name)]
        return [_name(ns) for ns in first if self._alive(ns, now)[0]]

    def _own(self) -> list[Any]:
        try:
            return [self.cluster.call(self.cluster.core.read_namespace, self.name, _request_timeout=REQUEST_TIMEOUT)]
        except ApiException:
            return []

    def wait_for_other_runs(self) -> None:
        """One CUDA sample at a time per cluster: a live run's pods hold the GPUs; wait (bounded) until it is done."""
        deadline = time.monotonic() + self.wait_s
        # Runs go in (creationTimestamp, name) order, and creationTimestamp has whole seconds. A run created in our
        # second but after our first look would sort before us by name and go at once while we, not having seen it,
        # go too (two CUDA samples on one GPU). Looking only once the server's clock is past our second (SETTLE_S after
        # the create's answer, whatever the clocks' offset) means every run we do not see sorts after us.
        if self._created_at is not None:
            time.sleep(max(0.0, SETTLE_S - (time.monotonic() - self._created_at)))
        busy = self.live_others()
        while busy:
            if time.monotonic() > deadline:
                raise GpuBusy(f"{self.cluster.where}: other pytest-dgxspark runs still hold the CUDA sample's GPUs after "
                              f"{self.wait_s} s ({', '.join(busy)}); run again when they are done",
                              target=self.cluster.target_id)
            time.sleep(WAIT_STEP_S)
            busy = self.live_others()


def leftover_report(runs: CudaRun | list[CudaRun] | None) -> list[dict[str, str]]:
    """results.json `leftover_namespaces`: earlier runs' namespaces (each once), and ours when a deletion failed."""
    report: list[dict[str, str]] = []
    for run in [runs] if isinstance(runs, CudaRun) else runs or []:
        report += [left.as_dict() for left in run.leftovers if left.as_dict() not in report]
        if run.created and not run.deleted:
            report.append({"namespace": run.name, "run_id": run.run_id, "created": "",
                           "state": f"this run's: not deleted ({run.delete_error or 'the run ended before its teardown'}); "
                                    "the next run removes it once its Lease expires"})
    return report
