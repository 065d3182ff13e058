"""A failed client call is named in plain words (what the run tried on which object), never a client method name;
an API that throttles (429) is said to throttle, not to fail."""
from __future__ import annotations

import pytest

from pytest_dgxspark.targets.cluster import call_words
from pytest_dgxspark.targets.connections import Cluster, ClusterUnreachable
from tests.loopback import free_port, write_kubeconfig


@pytest.mark.parametrize(("name", "args", "words"), [
    ("list_namespaced_pod", ("dgxspark-cuda-1",), ("list", "the pods in namespace dgxspark-cuda-1")),
    ("read_namespaced_pod_log", ("cuda-vectoradd-0", "dgxspark-cuda-1"),
     ("read", "the log of pod cuda-vectoradd-0 in namespace dgxspark-cuda-1")),
    ("create_namespaced_pod", ("dgxspark-cuda-1", {}), ("create", "a pod in namespace dgxspark-cuda-1")),
    ("delete_namespace", ("dgxspark-cuda-1",), ("delete", "namespace dgxspark-cuda-1")),
    ("list_namespace", (), ("list", "the namespaces")),
    ("read_namespaced_lease", ("dgxspark-gpu-lock", "dgxspark-cuda-1"),
     ("read", "lease dgxspark-gpu-lock in namespace dgxspark-cuda-1")),
    ("create_namespace", ({},), ("create", "a namespace")),
])
def test_a_client_call_is_said_in_plain_words(name, args, words):
    assert call_words(name, args) == words


@pytest.mark.slow
def test_a_call_to_a_dead_api_says_what_it_tried_in_plain_words(tmp_path):
    cluster = Cluster(write_kubeconfig(tmp_path / "dead", f"http://127.0.0.1:{free_port()}", "t", context="x"), "x")
    with pytest.raises(ClusterUnreachable) as info:
        cluster.call(cluster.core.list_namespaced_pod, "dgxspark-cuda-1", _request_timeout=(2, 2))
    assert ": cannot list the pods in namespace dgxspark-cuda-1: nothing accepts connections on the API server " \
           "address (" in str(info.value)
    assert "list_namespaced_pod" not in str(info.value)


def test_an_api_that_keeps_answering_429_is_throttling_not_a_server_error():
    from kubernetes.client.exceptions import ApiException

    from pytest_dgxspark.targets.causes import api_cause

    cause = api_cause(ApiException(status=429, reason="Too Many Requests"))
    assert cause.kind == "throttled" and cause.meaning.startswith("the API kept answering 429 Too Many Requests")
    assert "apiserver_flowcontrol_rejected_requests_total" in cause.fix and "etcd" not in cause.fix
    assert api_cause(ApiException(status=503, reason="Service Unavailable")).kind == "server-error"
