"""The site model: the shipped site is valid, and bad site files are errors naming the file and key."""
from __future__ import annotations

import pytest

from pytest_dgxspark.site.model import SiteError, load_site


def test_the_tirosh_home_site_carries_the_adr_values():
    from tests.conftest import SITE

    site = load_site(SITE)
    assert site.vars["rke2_cluster_name"] == "gpu"
    assert site.vars["rke2_target_name"] == "gpu-01"
    assert site.context == "tirosh-home/rke2/gpu"
    assert site.vars["rke2_node_labels"] == [
        "node.tirosh.ai/role=gpu", "node.tirosh.ai/workload=ai", "node.tirosh.ai/model=dgx-spark",
        "nvidia.com/gpu.present=true",
    ]
    assert site.vars["rke2_node_taints"] == []
    assert site.vars["rke2_cni"] == "cilium" and site.vars["rke2_disable_kube_proxy"] is False
    assert site.vars["rke2_cilium"] == {"hubble_enabled": False, "kube_proxy_replacement": False,
                                        "wireguard_enabled": False}
    assert site.helmchart["spec"]["version"] == "v26.3.2"
    assert site.helm_values == {"driver": {"enabled": True}, "cdi": {"nriPluginEnabled": True}}
    assert [h.name for h in site.hosts] == ["gpu-01"] and site.hosts[0].role == "server"
    assert site.vars["rke2_etcd_s3"] == {"endpoint": "s3.tirosh.home.arpa:9000", "bucket": "tirosh-home-etcd-snapshots",
                                         "folder": "gpu"}  # no credential: those come from the vault


@pytest.mark.parametrize(
    ("file", "old", "new", "message"),
    [
        ("rke2/vars.yml", "  - node.tirosh.ai/role=gpu", "  - node.tirosh.ai/role gpu",
         "rke2/vars.yml: rke2_node_labels.0: 'node.tirosh.ai/role gpu' does not match"),
        ("rke2/vars.yml", "rke2_node_taints: []", "rke2_node_taints: ['gpu=true:Sometimes']",
         "rke2/vars.yml: rke2_node_taints.0: 'gpu=true:Sometimes' does not match"),
        ("rke2/vars.yml", "  wireguard_enabled: false", "  wireguard_enabled: false\n  ipsec: true",
         "rke2/vars.yml: rke2_cilium: Additional properties are not allowed ('ipsec' was unexpected)"),
        ("rke2/vars.yml", "rke2_cni: cilium", "rke2_cni: weave",
         "rke2/vars.yml: rke2_cni: 'weave' is not one of ['cilium', 'canal', 'calico', 'flannel', 'none']"),
        ("rke2/vars.yml", "airgap: false", "airgap: true", "rke2/vars.yml: mirror_registry: required when airgap is true"),
        ("rke2/vars.yml", "  folder: gpu", "  folder: gpu\n  secret_key: Committed-S3-Secret-0003",
         "rke2/vars.yml: rke2_etcd_s3: Additional properties are not allowed ('secret_key' was unexpected)"),
        ("rke2/vars.yml", "  bucket: tirosh-home-etcd-snapshots\n", "",
         "rke2/vars.yml: rke2_etcd_s3: {'endpoint': 's3.tirosh.home.arpa:9000', 'folder': 'gpu'} is not valid under "
         "any of the given schemas"),
        ("rke2/vars.yml", "airgap: false", "airgap: false\netcd_snapshot_offnode_copy: {method: rsync}",
         "rke2/vars.yml: etcd_snapshot_offnode_copy: 'destination' is a required property"),
        ("rke2/gpu-operator.helmchart.yaml", "  targetNamespace: gpu-operator", "  targetNamespaces: gpu-operator",
         "rke2/gpu-operator.helmchart.yaml: spec: Additional properties are not allowed ('targetNamespaces' was unexpected)"),
        ("rke2/gpu-operator.helmchart.yaml", "  createNamespace: true", "  createNamespace: yes please",
         "rke2/gpu-operator.helmchart.yaml: spec.createNamespace: 'yes please' is not of type 'boolean'"),
        ("inventory.yml", "          ansible_user: root", "          ansible_user: root\n          dgxspark_gpu_prodcut: x",
         "inventory.yml: all.children.rke2_servers.hosts.gpu-01: 'dgxspark_gpu_prodcut' does not match any of "
         "the regexes: '^ansible_[a-z_]+$'"),
        ("inventory.yml", "          ansible_user: root", "          ansible_user: root\n          ansible_user: admin",
         "inventory.yml: duplicate key 'ansible_user'"),
    ],
    ids=["label-syntax", "taint-syntax", "unknown-cilium-key", "cni-choice", "airgap-needs-mirror",
         "etcd-s3-credentials-refused", "etcd-s3-needs-a-bucket", "offnode-copy-needs-a-destination",
         "unknown-helmchart-key", "helmchart-type", "unknown-host-var", "duplicate-yaml-key"],
)
def test_site_schema_errors_name_the_file_and_key(site_copy, file, old, new, message):
    path = site_copy / file
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(SiteError) as excinfo:
        load_site(site_copy)
    assert f"{site_copy}/{message}" in str(excinfo.value)


def test_a_missing_site_file_is_named(site_copy):
    (site_copy / "rke2" / "gpu-operator.helmchart.yaml").unlink()
    with pytest.raises(SiteError, match=r"rke2/gpu-operator.helmchart.yaml: missing"):
        load_site(site_copy)


@pytest.mark.slow
def test_an_ini_ansible_inventory_works_too(tmp_path):
    from pytest_dgxspark.site.model import load_inventory

    ini = tmp_path / "hosts.ini"
    ini.write_text("[rke2_servers]\ngpu-01 ansible_host=10.0.0.21 ansible_user=ubuntu dgxspark_model=dgx-spark\n\n"
                   "[rke2_agents]\ncpu-01 ansible_host=10.0.0.22 ansible_port=2222 dgxspark_gpu=false\n")
    _, hosts = load_inventory(ini)
    assert [(h.name, h.address, h.port, h.user, h.role, h.gpu) for h in hosts] == [
        ("gpu-01", "10.0.0.21", 22, "ubuntu", "server", True),
        ("cpu-01", "10.0.0.22", 2222, "root", "agent", False),
    ]
