"""End to end: the `healthy` testbed against a changed copy of its site shows the drift a real cluster would.

The testbed builds its live cluster from the scenario alone, so a site that says something else is judged against
what runs. The copy lives in tmp_path; the testbed supplies the inventory addresses and the kubeconfig, so the site's
own 192.168.x address is never contacted (asserted).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.test_e2e import assert_torn_down, run_suite

# slow: the suite against a testbed and a changed site (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"
)]


def site_copy(tmp_path: Path) -> Path:
    """sites/tirosh-home inside a copy of the repo's Makefile and provisioning/ (operator-separate reads them)."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "sites" / "tirosh-home", repo / "sites" / "tirosh-home")
    shutil.copy(REPO / "Makefile", repo / "Makefile")
    shutil.copytree(REPO / "provisioning", repo / "provisioning")
    return repo / "sites" / "tirosh-home"


def edit_vars(site: Path, **changes: object) -> None:
    path = site / "rke2" / "vars.yml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def edit_values(site: Path, old: str, new: str) -> None:
    path = site / "rke2" / "gpu-operator.helmchart.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def run_drift(tmp_path: Path, site: Path) -> tuple[dict[str, str], list[str], dict[str, list[str]]]:
    proc, doc = run_suite(tmp_path, "--testbed", "healthy", "--site", str(site))
    assert_torn_down(tmp_path)
    assert "192.168." not in proc.stdout + proc.stderr
    statuses = {r["id"]: r["status"] for r in doc["rules"]}
    messages = {r["id"]: [t["message"] for t in r["tests"] if t["message"]] for r in doc["rules"]}
    return statuses, sorted(doc["root_causes"]), messages


def test_an_unchanged_site_copy_passes_like_the_bundled_site(tmp_path):
    statuses, roots, _ = run_drift(tmp_path, site_copy(tmp_path))
    assert roots == []
    assert statuses.pop("ADR-0002.image-mirror") == "not-applicable"
    assert statuses.pop("SPARK.gpu-sharing-replicas") == "not-applicable"  # the site configures no time-slicing
    assert statuses.pop("ADR-0001.hardening-baseline") == "recorded"  # informational, as on the bundled site
    assert set(statuses.values()) == {"passed"}


def test_another_node_label_in_the_site_is_node_metadata_and_rke2_config_drift(tmp_path):
    site = site_copy(tmp_path)
    edit_vars(site, rke2_node_labels=["node.tirosh.ai/role=inference", "node.tirosh.ai/workload=ai",
                                      "node.tirosh.ai/model=dgx-spark", "nvidia.com/gpu.present=true"])
    statuses, roots, messages = run_drift(tmp_path, site)
    assert (statuses["ADR-0001.node-metadata"], statuses["ADR-0001.rke2-config"]) == ("failed", "failed")
    assert roots == ["ADR-0001.node-metadata", "ADR-0001.rke2-config"]
    assert any(m.endswith("rke2_node_labels: node.tirosh.ai/role is gpu, wants inference")
               for m in messages["ADR-0001.node-metadata"])
    assert statuses["ADR-0002.helmchart-live"] == statuses["ADR-0001.cilium-settings"] == "passed"


def test_another_driver_value_in_the_site_is_helmchart_live_drift(tmp_path):
    site = site_copy(tmp_path)
    edit_values(site, "driver:\n      enabled: true", "driver:\n      enabled: false")
    statuses, roots, messages = run_drift(tmp_path, site)
    assert statuses["ADR-0002.helmchart-live"] == "failed" and "ADR-0002.helmchart-live" in roots
    assert any("spec.valuesContent differs at driver.enabled (site False, live True)" in m
               for m in messages["ADR-0002.helmchart-live"])
    assert statuses["ADR-0002.operator-running"] == "blocked"
    assert statuses["ADR-0001.node-metadata"] == statuses["ADR-0001.cilium-settings"] == "passed"


def test_cilium_kube_proxy_replacement_in_the_site_is_cilium_settings_drift(tmp_path):
    site = site_copy(tmp_path)
    edit_vars(site, rke2_cilium={"hubble_enabled": False, "kube_proxy_replacement": True, "wireguard_enabled": False},
              rke2_disable_kube_proxy=True)
    statuses, roots, messages = run_drift(tmp_path, site)
    assert statuses["ADR-0001.cilium-settings"] == "failed" and "ADR-0001.cilium-settings" in roots
    assert any("HelmChartConfig rke2-cilium differs" in m and m.endswith("kube_proxy_replacement is False there, True in the vars")
               for m in messages["ADR-0001.cilium-settings"])
    assert any(m.endswith("kube-proxy is disabled but runs on gpu-01") for m in messages["ADR-0001.cilium-settings"])
    assert statuses["ADR-0001.node-metadata"] == statuses["ADR-0002.helmchart-live"] == "passed"
