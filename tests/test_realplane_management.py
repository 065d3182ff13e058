"""On a plane of its own the Argo CD management cluster is a real kube-apiserver too: the cluster Secret the scenario
registers is written through it, its netns has no default route, and the GitOps check reads it there: failing on
`argocd-unregistered` with the real server's list of registered servers (`healthy` passing there is
tests/test_realplane_rbac.py's whole-suite run and the differential's management exchanges)."""
from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from tests import realplane_available
from tests.conftest import REPO

# slow: two real kube-apiservers per testbed (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(realplane_available.why_not() is not None, reason=realplane_available.why_not() or "")]
SITE = REPO / "sites" / "tirosh-home"


def _gitops(testbed, work) -> dict:
    subprocess.run([sys.executable, "-m", "pytest", "suites/gitops", "--site", str(SITE),
                    "--dgxspark-kubeconfig", str(testbed.kubeconfig), "--dgxspark-inventory", str(testbed.inventory),
                    "--dgxspark-ssh-config", str(testbed.ssh_config), "--report-dir", str(work), "-q",
                    "-p", "no:cacheprovider"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    results = json.loads((work / "latest" / "results.json").read_text())
    return next(r for r in results["rules"] if r["id"] == "ADR-0001.argocd-registered")


@pytest.mark.parametrize(("scenario", "status"), [("argocd-unregistered", "failed")])
def test_the_management_cluster_is_a_real_api_server_the_gitops_check_reads(scenario, status, tmp_path):
    from pytest_dgxspark.testbed import Testbed, realplane

    with Testbed(scenario, tmp_path / "t", api="real", _without_hosts=True) as testbed:
        state = json.loads((testbed.directory / "state.json").read_text())
        mgmt = next(link for link in state["links"] if link["name"] == "argocd-mgmt")
        routes = subprocess.run(["ip", "netns", "exec", mgmt["netns"], "ip", "-4", "route", "show", "default"],
                                capture_output=True, text=True, check=True).stdout
        assert routes.strip() == ""  # kube-apiserver dials out on its own: nothing beyond the testbed answers
        live = [p for p in state["cp_pids"] if realplane.is_ours(p, testbed.directory / "management")]
        assert len(live) == 2  # its etcd and kube-apiserver
        from kubernetes import client, config

        core = client.CoreV1Api(config.new_client_from_config(str(testbed.kubeconfig),
                                                              context=testbed.contexts["management"]))
        secrets = core.list_namespaced_secret("argocd", label_selector="argocd.argoproj.io/secret-type=cluster").items
        servers = sorted(base64.b64decode(s.data["server"]).decode() for s in secrets)
        plane = next(link for link in state["links"] if link["name"] == "controlplane")
        assert servers == ([f"https://{plane['node_ip']}:6443"] if scenario == "healthy" else ["https://10.20.0.5:6443"])
        audited = [r for r in testbed.requests() if r["cluster"] == "management" and r["method"] == "POST"]
        assert ("POST", "/api/v1/namespaces/argocd/secrets", 201) in [(r["method"], r["path"], r["status"]) for r in audited]
        rule = _gitops(testbed, tmp_path / "r")
    assert rule["status"] == status, rule["tests"]
    if status == "failed":
        assert "registered servers: ['https://10.20.0.5:6443']" in rule["tests"][0]["message"]
