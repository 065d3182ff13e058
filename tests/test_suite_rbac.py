"""The suite's least-privilege role (make rke2/suite/rbac) is exactly what a run requests: every request of runs
against the stand-in (healthy, a CUDA sample left Pending (watched until its timeout), a crashing device plugin: the diagnostics' reads) is allowed by
the shipped roles, every write lands in a dgxspark-cuda-* namespace, and the roles grant nothing no run used.

The stand-in has no RBAC; the real control plane enforces these roles in tests/test_realplane_rbac.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgxspark.testbed.requestinfo import RequestInfo, request_info
from tests import rbac
from tests.conftest import REPO

# slow: stand-in runs against a testbed, every request audited (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists(),
                                reason="the testbed needs root and /usr/sbin/sshd")]
# scenarios whose runs together take every path of the suite's API code (lists, the sample, its diagnostics)
SCENARIOS = ("healthy", "cuda-pending", "device-plugin-crashloop")
# grants no bundled scenario exercises, each with the code path that needs it
UNEXERCISED = {
    ("get", "coordination.k8s.io", "leases"): "cudarun._alive reads another live run's Lease (concurrent runs only)",
    ("patch", "coordination.k8s.io", "leases"): "the Lease renewal every 10 s (runs longer than the renewal period)",
}


def _run(scenario: str, work: Path) -> list[dict]:
    from pytest_dgxspark.testbed import Testbed

    with Testbed(scenario, work / "tb") as testbed:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "suites", "--site", str(REPO / "sites" / "tirosh-home"),
             "--dgxspark-inventory", str(testbed.inventory), "--dgxspark-kubeconfig", str(testbed.kubeconfig),
             "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(work / "r"), "-q",
             "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "20"],
            cwd=REPO, capture_output=True, text=True, timeout=400, check=False)
        assert (work / "r" / "latest" / "results.json").is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
        return testbed.requests()


@pytest.fixture(scope="module")
def requests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, RequestInfo]]]:
    """cluster -> (scenario, request attributes) of every request the suite made in the runs."""
    seen: dict[str, list[tuple[str, RequestInfo]]] = {}
    for scenario in SCENARIOS:
        for record in _run(scenario, tmp_path_factory.mktemp(scenario)):
            seen.setdefault(record["cluster"], []).append(
                (scenario, request_info(record["method"], record["path"], record["query"])))
    return seen


def test_every_request_a_run_makes_is_granted_to_the_suites_identity(requests) -> None:
    workload = rbac.grants(rbac.rendered("suite-rbac.yaml.j2"))
    management = rbac.grants(rbac.rendered("suite-rbac-management.yaml.j2"))
    # /version: granted to every authenticated user by the default system:public-info-viewer ClusterRole
    public = [rbac.Grant(("get",), paths=("/version", "/healthz", "/livez", "/readyz"))]
    denied = [(cluster, scenario, info.verb, info.group, info.resource_path or info.path, info.namespace)
              for cluster, rules in (("workload", workload), ("management", management + public))
              for scenario, info in requests.get(cluster, []) if not rbac.allowed(rules, info)]
    assert denied == []
    assert len(requests["workload"]) > 20 and len(requests["management"]) >= 2


def test_every_write_a_run_makes_is_in_its_own_cuda_sample_namespace(requests) -> None:
    writes = [(scenario, info) for scenario, info in requests["workload"] if info.verb in rbac.WRITES]
    assert {(i.verb, i.resource_path) for _, i in writes} >= {("create", "namespaces"), ("create", "pods"),
                                                             ("create", "leases"), ("delete", "namespaces")}
    assert [(s, i.verb, i.resource_path, i.namespace) for s, i in writes if not rbac.own_namespace_write(i)] == []
    assert not [i for _, i in requests.get("management", []) if i.verb in rbac.WRITES]


def test_the_roles_grant_nothing_no_run_requests_but_the_named_paths(requests) -> None:
    workload = rbac.grants(rbac.rendered("suite-rbac.yaml.j2"))
    used = {(i.verb, i.group, i.resource_path) for _, i in requests["workload"] if i.resource is not None}
    granted = {(verb, group, resource) for g in workload for verb in g.verbs for group in g.groups for resource in g.resources}
    unused = {g: UNEXERCISED.get(g, "not requested by any run") for g in granted - used}
    assert {g: why for g, why in unused.items() if why == "not requested by any run"} == {}
    assert set(UNEXERCISED) >= set(unused)
