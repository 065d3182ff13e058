"""Fixtures of the workload layer: a namespace of its own per run, always deleted (also on failure and Ctrl-C)."""

from __future__ import annotations

import atexit
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_dgxspark.fixtures import cuda_timeout
from pytest_dgxspark.kube.cudarun import CudaRun, leftovers_key


def _run_id(config: pytest.Config) -> str:
    try:
        from pytest_dgxspark.report.results import run_info

        return run_info(config).id.lower()
    except Exception:  # noqa: BLE001 - any id unique to the run will do
        return secrets.token_hex(4)


@pytest.fixture
def cuda_namespace(check_namespace: Callable[[str], CudaRun]) -> CudaRun:
    """The run's namespace for the CUDA sample (run-id label, a Lease renewed while the run lives), deleted once:
    by the test's own finally, else at teardown, else at exit; earlier runs' namespaces are reported in results."""
    return check_namespace("")


@pytest.fixture
def check_namespace(request: pytest.FixtureRequest, cluster: Any) -> Iterator[Callable[[str], CudaRun]]:
    """The CUDA sample's namespace machinery for the other workload checks: `check_namespace("nogpu")` is the check's
    own namespace dgxspark-cuda-<run id>-nogpu (the same labels, Lease and clean-up), so no check meets another's
    namespace still terminating; each is deleted by the test's own finally, else at teardown, else at exit."""
    made: list[CudaRun] = []

    def make(purpose: str) -> CudaRun:
        timeout = cuda_timeout(request.config)
        namespace = CudaRun(cluster, _run_id(request.config), stale_after_s=timeout, wait_s=timeout, purpose=purpose)
        request.config.stash.setdefault(leftovers_key, []).append(namespace)
        atexit.register(namespace.delete)
        made.append(namespace)
        return namespace

    try:
        yield make
    finally:
        errors = []
        for namespace in made:
            atexit.unregister(namespace.delete)  # first: a delete that raises (API gone) must not run again at exit
            try:
                namespace.delete()
            except Exception as error:  # noqa: BLE001 - every namespace gets its delete; the first error is raised
                errors.append(error)
        if errors:
            raise errors[0]


@pytest.fixture
def cuda_timeout_s(request: pytest.FixtureRequest) -> int:
    """Seconds the CUDA sample may take (--dgxspark-cuda-timeout / ini dgxspark_cuda_timeout, default 300)."""
    return cuda_timeout(request.config)
