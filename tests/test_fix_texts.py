"""Fix texts follow README and the cause: sudo needs NOPASSWD for every command, a management-API fault points at
the management cluster (not rke2-server), a missing lsmod says to install it."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.targets.causes import SSH_CAUSES
from pytest_dgxspark.targets.cluster import Cluster
from tests.conftest import REPO


def test_the_sudo_fix_says_what_readme_says_every_command_not_a_few():
    fix = SSH_CAUSES["sudo-password"].fix
    assert "NOPASSWD: ALL" in fix and "a rule limited to a few commands does not work" in fix
    assert "read-only check commands" not in fix
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "a sudoers rule limited to a few commands does not work: grant `ALL` to that user" in readme


def _refused() -> ConnectionRefusedError:
    return ConnectionRefusedError(111, "Connection refused")


def test_a_management_api_fault_gets_the_management_clusters_fix_not_rke2_server(tmp_path):
    site = Cluster(None, "tirosh-home/rke2/gpu")
    management = Cluster(None, "tirosh-home/k3s/argocd")
    management.is_management = True
    assert "rke2-server" in site.unreachable(_refused(), "GET /version").cause.fix
    fault = management.unreachable(_refused(), "GET /api/v1/namespaces/argocd/secrets")
    assert fault.cause.kind == "refused"
    assert "rke2-server" not in fault.cause.fix
    assert fault.cause.fix.startswith("This is the Argo CD management cluster (context tirosh-home/k3s/argocd), not the "
                                      "site's RKE2: check k3s on the management host")


def test_a_missing_lsmod_is_unreadable_with_the_install_fix():
    spec = importlib.util.spec_from_file_location("host_driver_checks", REPO / "suites" / "host" / "test_host_driver.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    answer = SimpleNamespace(rc=127, stdout="", stderr="sh: 1: lsmod: not found", command=b"lsmod")
    host = SimpleNamespace(spec=SimpleNamespace(gpu=True), where="gpu-01 (10.0.0.21:22)", name="gpu-01")
    probe = SimpleNamespace(lsmod=answer, loaded_modules=())
    evidence = SimpleNamespace(answer=lambda target, cmd, result: result, record=lambda *a: None)
    with pytest.raises(TargetError) as caught:
        checks.test_nvidia_kernel_module_is_loaded(host, probe, evidence)
    assert str(caught.value).startswith("gpu-01 (10.0.0.21:22): lsmod is not installed (exit 127, command not found)")
    assert caught.value.cause.fix.startswith("Install kmod on the host (apt-get install kmod")
