"""Fixtures of the workload layer: a namespace of its own per run, always deleted (also on failure and Ctrl-C)."""

from __future__ import annotations

import atexit
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from pytest_dgxspark.fixtures import cuda_timeout


class CudaNamespace:
    """The run's dgxspark-cuda-<runid> namespace; `delete()` is idempotent."""

    def __init__(self, cluster: Any, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.created = False
        self.deleted = False

    def create(self) -> None:
        body = {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": self.name, "labels": {
                "app.kubernetes.io/managed-by": "pytest-dgxspark",
                # vectorAdd runs as the image's user; baseline admits it also on CIS (restricted) clusters
                "pod-security.kubernetes.io/enforce": "baseline",
            }},
        }
        self.created = True  # from the first attempt on: a lost answer may still have created it, so always delete
        try:
            self.cluster.call(self.cluster.core.create_namespace, body, _request_timeout=(10, 30))
        except ApiException as error:
            # 409: an earlier attempt whose answer was lost created it (the name is unique to this run)
            if error.status != 409:
                raise

    def delete(self) -> None:
        if not self.created or self.deleted:
            return
        try:
            self.cluster.call(self.cluster.core.delete_namespace, self.name, propagation_policy="Background",
                              _request_timeout=(10, 30))
        except ApiException as error:
            if error.status != 404:
                raise
        self.deleted = True


def _run_id(config: pytest.Config) -> str:
    try:
        from pytest_dgxspark.results import run_info

        return run_info(config).id.lower()
    except Exception:  # noqa: BLE001 - any id unique to the run will do
        return secrets.token_hex(4)


@pytest.fixture
def cuda_namespace(request: pytest.FixtureRequest, cluster: Any) -> Iterator[CudaNamespace]:
    """A namespace for the CUDA sample, deleted at teardown, at exit and by the test's own finally."""
    name = f"dgxspark-cuda-{_run_id(request.config)}"[:63].rstrip("-")
    namespace = CudaNamespace(cluster, name)
    atexit.register(namespace.delete)
    try:
        yield namespace
    finally:
        namespace.delete()
        atexit.unregister(namespace.delete)


@pytest.fixture
def cuda_timeout_s(request: pytest.FixtureRequest) -> int:
    """Seconds the CUDA sample may take (--dgxspark-cuda-timeout / ini dgxspark_cuda_timeout, default 300)."""
    return cuda_timeout(request.config)
