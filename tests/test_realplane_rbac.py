"""On the real control plane the suite runs as its least-privilege identity (issue 17 point 5): make rke2/suite/rbac
applies the shipped roles and admission policy, the suite runs with the kubeconfig it writes and gives the scenario's
declared results, the audit log shows none of the identity's writes outside its dgxspark-cuda-* namespace and no 403;
the admission policy refuses a write elsewhere; a role without `list pods` makes those checks `error` (cause
`forbidden`) with the real server's own words, the words the stand-in's `cluster.faults.forbidden` answers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import rbac, realplane_available
from tests.conftest import REPO

# slow: a real control plane brought up and the suite run against it (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(realplane_available.why_not() is not None, reason=realplane_available.why_not() or "")]
SCENARIO = "healthy"
SITE = REPO / "sites" / "tirosh-home"


class Plane:
    """A real-plane testbed with the suite's identity applied through the shipped make target."""

    def __init__(self, testbed, work: Path) -> None:
        self.testbed, self.work = testbed, work
        self.suite_kubeconfig = work / "dgxspark-suite.config"
        self.context = testbed.contexts["workload"]

    def make_suite_rbac(self) -> str:
        inventory = self.work / "local-inventory.yml"  # the role talks to the API from the controller only
        inventory.write_text(yaml.safe_dump({"all": {"children": {"rke2_servers": {"hosts": {"gpu-01": {
            "ansible_connection": "local", "ansible_host": "127.0.0.1",
            "ansible_python_interpreter": sys.executable}}}}}}))
        proc = subprocess.run(["make", "--no-print-directory", "rke2/suite/rbac", f"SITE_DIR={SITE}",
                               f"INVENTORY={inventory}", f"KUBECONFIG_OUT={self.testbed.kubeconfig}",
                               f"SUITE_KUBECONFIG={self.suite_kubeconfig}",
                               f"ANSIBLE_PLAYBOOK={Path(sys.executable).parent / 'ansible-playbook'}"],
                              cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                              env={**os.environ, "ANSIBLE_NOCOLOR": "1", "HOME": str(self.work)})
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return proc.stdout

    def suite(self, *args: str, reports: str = "r") -> tuple[subprocess.CompletedProcess, dict]:
        proc = subprocess.run([sys.executable, "-m", "pytest", *args, "--site", str(SITE),
                               "--dgxspark-kubeconfig", str(self.suite_kubeconfig),
                               "--dgxspark-inventory", str(self.testbed.inventory),
                               "--dgxspark-ssh-config", str(self.testbed.ssh_config),
                               "--report-dir", str(self.work / reports), "-q", "-p", "no:cacheprovider"],
                              cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
        results = self.work / reports / "latest" / "results.json"
        assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc, json.loads(results.read_text())

    def audit(self) -> list[dict]:
        path = self.testbed.directory / "audit.log"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def admin(self):
        from kubernetes import config

        return config.new_client_from_config(str(self.testbed.kubeconfig), context=self.context)

    def as_suite(self):
        from kubernetes import config

        return config.new_client_from_config(str(self.suite_kubeconfig), context=self.context)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    from pytest_dgxspark.testbed import Testbed

    work = tmp_path_factory.mktemp("realplane-rbac")
    with Testbed(SCENARIO, work / "tb", api="real") as testbed:  # type: ignore[call-arg]
        plane = Plane(testbed, work)
        output = plane.make_suite_rbac()
        assert f"user to hand the suite: {rbac.USER}" in " ".join(output.split())
        yield plane


def test_the_suite_runs_green_as_its_identity_and_writes_only_in_its_own_namespace(plane: Plane) -> None:
    from pytest_dgxspark.testbed.scenario import load

    before = len(plane.audit())
    proc, doc = plane.suite("suites")  # every suite file, the GPU isolation probes' pods included
    expected = load(SCENARIO).expect["rules"]
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    assert {rid: statuses[rid] for rid in expected} == expected, proc.stdout[-3000:]
    assert doc["root_causes"] == load(SCENARIO).expect.get("root_causes", [])
    events = [e for e in plane.audit()[before:] if e.get("user", {}).get("username") == rbac.USER]
    assert events, "the suite's requests are not in the audit log under its identity"
    writes = [e for e in events if e["verb"] in rbac.WRITES]
    outside = [(e["verb"], e.get("objectRef", {})) for e in writes
               if not (e.get("objectRef", {}).get("namespace", "") or e.get("objectRef", {}).get("name", ""))
               .startswith("dgxspark-cuda-")]
    assert writes and outside == []
    assert {(e["verb"], e["objectRef"]["resource"]) for e in writes} >= {("create", "namespaces"), ("create", "pods"),
                                                                        ("delete", "namespaces")}
    assert [e["requestURI"] for e in events if e.get("responseStatus", {}).get("code") == 403] == []


def test_the_admission_policy_refuses_the_identity_any_write_elsewhere(plane: Plane) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(plane.as_suite())
    refusals = []
    for attempt in (lambda: core.create_namespace({"metadata": {"name": "not-the-suites", "labels": {
                        "app.kubernetes.io/managed-by": "pytest-dgxspark"}}}),
                    lambda: core.create_namespace({"metadata": {"name": "dgxspark-cuda-unlabelled"}}),
                    lambda: core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {
                        "containers": [{"name": "c", "image": "busybox:1.36"}]}}),
                    lambda: core.delete_namespace("default")):
        with pytest.raises(ApiException) as info:
            attempt()
        refusals.append((info.value.status, json.loads(info.value.body)["message"]))
    assert [status for status, _ in refusals] == [403, 403, 403, 403], refusals
    assert all("dgxspark-suite-own-namespaces" in message for _, message in refusals[:3]), refusals
    assert "pytest-dgxspark writes only in its own dgxspark-cuda-* namespaces" in refusals[0][1]


def test_a_role_without_list_pods_is_a_forbidden_error_in_the_real_servers_words(plane: Plane) -> None:
    from kubernetes import client

    admin = plane.admin()
    rbac_api = client.RbacAuthorizationV1Api(admin)
    original = admin.sanitize_for_serialization(rbac_api.read_cluster_role("dgxspark-suite-read"))["rules"]
    narrowed = [{**r, "verbs": [v for v in r["verbs"] if v != "list"]} if r.get("resources") == ["pods"] else r
                for r in original]
    rbac_api.patch_cluster_role("dgxspark-suite-read", {"rules": narrowed})
    try:
        _, doc = plane.suite("suites/network", reports="r403")
    finally:
        rbac_api.patch_cluster_role("dgxspark-suite-read", {"rules": original})
    [test] = [t for r in doc["rules"] if r["id"] == "ADR-0001.cni-cilium" for t in r["tests"] if t["outcome"] == "error"][:1]
    assert test["cause"] == "forbidden"
    words = f'pods is forbidden: User "{rbac.USER}" cannot list resource "pods" in API group "" at the cluster scope'
    assert words in test["message"]  # exactly what the stand-in's cluster.faults.forbidden answers
    assert doc["verdict"] == "INCOMPLETE" and doc["root_causes"] == []
