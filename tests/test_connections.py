"""Connections: one SSH master per host, command timeouts, unreachable hosts and APIs, per-run list caches."""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from pytest_dgxspark.checking import TargetError, timed_out
from pytest_dgxspark.site.model import HostSpec
from pytest_dgxspark.targets.connections import Cluster, ClusterUnreachable, HostUnreachable
from tests.loopback import JsonHandler, free_port, host_target, write_kubeconfig

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")


@pytest.mark.slow
def test_one_ssh_connection_serves_every_command(sshd: dict[str, Any], tmp_path: Path) -> None:
    target = host_target(sshd, tmp_path)
    try:
        target.connect()
        assert target.run("echo hello").stdout == "hello\n"
        assert target.host.file("/etc/hostname").exists
        assert target.cached("uname -m") is target.cached("uname -m")
    finally:
        target.close()
    accepted = sshd["log"].read_text().count("Accepted publickey")
    assert accepted == 1


@pytest.mark.slow
def test_hung_command_is_killed_on_the_target_after_its_timeout(sshd: dict[str, Any], tmp_path: Path) -> None:
    target = host_target(sshd, tmp_path)
    try:
        started = time.monotonic()
        result = target.run("sleep 30", timeout=2)
        assert timed_out(result)
        assert time.monotonic() - started < 15
    finally:
        target.close()


def test_unreachable_host_is_a_target_error_naming_host_and_address(sshd: dict[str, Any], tmp_path: Path) -> None:
    target = host_target(sshd, tmp_path, port=free_port())
    with pytest.raises(HostUnreachable, match=r"^gpu-01 \(127\.0\.0\.1:\d+\): cannot read the host over SSH: nothing "
                       r"accepts SSH connections on that address and port \(ssh: connect to host 127\.0\.0\.1 port \d+: "
                       r"Connection refused\)$") as info:
        target.connect()
    assert isinstance(info.value, TargetError)
    assert info.value.cause.kind == "refused"
    assert info.value.target == "ssh:gpu-01"
    started = time.monotonic()
    with pytest.raises(HostUnreachable):
        target.run("true")
    assert time.monotonic() - started < 0.5  # known unreachable: no second attempt


class _Api(JsonHandler):
    requests: list[str] = []
    fail_next: int = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).requests.append(self.path)
        type(self).auth = self.headers.get("Authorization")
        if type(self).fail_next:
            type(self).fail_next -= 1
            self._send(503, {"kind": "Status", "code": 503})
        elif self.path.startswith("/version"):
            self._send(200, {"gitVersion": "v1.34.10+rke2r1"})
        elif self.path.startswith("/api/v1/nodes"):
            self._send(200, {"items": [{"metadata": {"name": "gpu-01"}, "status": {"addresses": [
                {"type": "InternalIP", "address": "192.168.10.21"}]}}], "metadata": {}})
        elif self.path.startswith("/api/v1/pods"):
            self._send(200, {"items": [{"metadata": {"name": "a", "namespace": "gpu-operator", "labels": {"app": "x"}}},
                                       {"metadata": {"name": "b", "namespace": "kube-system"}}], "metadata": {}})
        else:
            self._send(404, {"kind": "Status", "code": 404})


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Path, type[_Api]]]:
    handler = type("Api", (_Api,), {"requests": [], "fail_next": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{server.server_port}", "t0ken")
    try:
        yield kubeconfig, handler
    finally:
        server.shutdown()
        server.server_close()


def test_each_kind_is_listed_once_per_run(api: tuple[Path, type[_Api]]) -> None:
    kubeconfig, handler = api
    cluster = Cluster(kubeconfig, "site/rke2/gpu")
    assert cluster.connect().version()["gitVersion"] == "v1.34.10+rke2r1"
    assert [p["metadata"]["name"] for p in cluster.list("pods", namespace="gpu-operator")] == ["a"]
    assert len(cluster.list("pods")) == 2
    assert len(cluster.list("pods", label_selector="app=x")) == 1
    assert cluster.node_for(HostSpec(name="other", address="192.168.10.21"))["metadata"]["name"] == "gpu-01"
    assert [p for p in handler.requests if p.startswith("/api/v1/pods")] == ["/api/v1/pods?limit=500"]
    assert handler.auth == "Bearer t0ken"


@pytest.mark.slow
def test_transient_server_errors_are_retried(api: tuple[Path, type[_Api]]) -> None:
    kubeconfig, handler = api
    handler.fail_next = 2
    assert Cluster(kubeconfig, "site/rke2/gpu").list("nodes")[0]["metadata"]["name"] == "gpu-01"


def test_a_crd_that_is_not_served_says_so_never_lists_as_empty(api: tuple[Path, type[_Api]]) -> None:
    from pytest_dgxspark.targets.cluster import CrdNotServed

    kubeconfig, _ = api
    with pytest.raises(CrdNotServed, match=r"GET /apis/nvidia\.com/v1/clusterpolicies answered 404 Not Found: "
                       r"nvidia\.com/v1 ClusterPolicy is not served \(the GPU Operator's CRD is not installed\)"):
        Cluster(kubeconfig, "site/rke2/gpu").list("clusterpolicies")


def test_unreachable_api_is_a_target_error(tmp_path: Path) -> None:
    cluster = Cluster(write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{free_port()}", "t", context="x"), "x")
    with pytest.raises(ClusterUnreachable, match=r"^Kubernetes API of context 'x' \(http://127\.0\.0\.1:\d+\): cannot "
                       r"read GET /version: nothing accepts connections on the API server address \(NewConnectionError") as info:
        cluster.connect()
    assert isinstance(info.value, TargetError)
    assert info.value.cause.kind == "refused"
    assert info.value.target == "api:x"


def test_unknown_context_is_a_clear_error(api: tuple[Path, type[_Api]]) -> None:
    kubeconfig, _ = api
    with pytest.raises(ClusterUnreachable, match="cannot use context 'nope'") as info:
        Cluster(kubeconfig, "nope").connect()
    assert info.value.target == "api:nope"


@pytest.mark.slow
def test_client_calls_retry_transient_errors_and_pass_others_through(api: tuple[Path, type[_Api]]) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    kubeconfig, handler = api
    cluster = Cluster(kubeconfig, "site/rke2/gpu")
    handler.fail_next = 2
    response = cluster.call(client.VersionApi(cluster.api).get_code, _preload_content=False)
    assert json.loads(response.data)["gitVersion"] == "v1.34.10+rke2r1"
    assert len([p for p in handler.requests if p.startswith("/version")]) == 3
    before = len(handler.requests)
    with pytest.raises(ApiException) as info:
        cluster.call(cluster.core.read_namespace, "missing")
    assert info.value.status == 404 and len(handler.requests) == before + 1  # 404 is an answer: no retry
