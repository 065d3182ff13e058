"""Tests of the RKE2 provisioning: syntax, rendered files, a fake host over real SSH, idempotence and check mode."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.loopback import free_port

# Every test here that runs Ansible or make against fake hosts (its `slow` ones) is `make test-provisioning`'s:
# `make test` leaves them out (a first install alone took 99 s here at load 10); .ci/run runs both.
pytestmark = pytest.mark.provisioning

REPO = Path(__file__).resolve().parents[1]
PROVISIONING = REPO / "provisioning"
PLAYBOOKS = PROVISIONING / "playbooks"
SITE = REPO / "sites" / "tirosh-home"
FAKEHOST = Path(__file__).resolve().parent / "provisioning_fakehost"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
INSTALL_PLAYBOOKS = [PLAYBOOKS / "rke2-server-install.yml", PLAYBOOKS / "rke2-agent-install.yml"]
# The fake install.sh, pinned by its digest as a site pins the real one.
SCRIPT_SHA256 = hashlib.sha256((FAKEHOST / "install.sh").read_bytes()).hexdigest()
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
                   r"\s+failed=(?P<failed>\d+)", re.M)


@dataclass(frozen=True)
class Run:
    """One ansible-playbook run: exit status, output and the recap counters per host."""

    rc: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self, host: str = "gpu-01") -> int:
        assert host in self.recap, f"no recap for {host} (rc={self.rc}):\n{self.output[-4000:]}"
        return self.recap[host]["changed"]

    def assert_ok(self) -> None:
        failed = {h: c for h, c in self.recap.items() if c["failed"] or c["unreachable"]}
        assert self.rc == 0 and not failed, f"ansible-playbook rc={self.rc} {failed}:\n{self.output[-6000:]}"


def run_playbook(playbook: Path, inventory: Path, *args: str, env: dict[str, str] | None = None, site: Path = SITE) -> Run:
    """Run one playbook with the project's ansible.cfg and the site's vars; return its recap."""
    environ = {**os.environ, "ANSIBLE_CONFIG": str(PROVISIONING / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_FORCE_COLOR": "0", **(env or {})}
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "-e", f"rke2_site_dir={site}", *args, str(playbook)],
        capture_output=True, text=True, env=environ, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    recap = {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")} for m in RECAP.finditer(output)}
    return Run(proc.returncode, output, recap)


def load_filters(role: str, module: str) -> Any:
    spec = importlib.util.spec_from_file_location(module, PROVISIONING / "roles" / role / "filter_plugins" / f"{module}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_every_playbook_passes_syntax_check(tmp_path: Path) -> None:
    playbooks = sorted(PLAYBOOKS.glob("*.yml"))
    assert {p.name for p in playbooks} >= {"rke2-server-install.yml", "rke2-agent-install.yml", "rke2-status.yml",
                                            "rke2-kubeconfig.yml", "rke2-gpu-operator-apply.yml", "rke2-argocd-register.yml"}
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), "--syntax-check", "-i", str(SITE / "inventory.yml"),
                           "-e", f"rke2_site_dir={SITE}", *map(str, playbooks)],
                          capture_output=True, text=True, env={**os.environ, "ANSIBLE_CONFIG": str(PROVISIONING / "ansible.cfg")},
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_ansible_lint_passes_the_production_profile_offline() -> None:
    config = (REPO / ".ansible-lint").read_text()
    assert "profile: production" in config and "offline: true" in config
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK.parent / "ansible-lint"), "--nocolor"], cwd=REPO, capture_output=True,
                          text=True, timeout=180, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(PROVISIONING / "ansible.cfg"), "NO_COLOR": "1"})
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "Profile 'production' was required, and it passed." in proc.stdout + proc.stderr


@pytest.mark.slow
def test_yamllint_passes_on_the_whole_repository() -> None:
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK.parent / "yamllint"), "--strict", "-f", "parsable", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stdout[-6000:] + proc.stderr


@pytest.mark.slow
def test_make_help_lists_every_target_with_one_line() -> None:
    from pytest_dgxspark.site.repo import parse_make_rules

    targets = set()
    for makefile in (REPO / "Makefile", PROVISIONING / "rke2.mk"):
        targets |= {t for t in parse_make_rules(makefile.read_text()) if "$" not in t and not t.startswith(".")}
    proc = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True, timeout=30,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    listed = {}
    for line in proc.stdout.splitlines():
        match = re.match(r"^make (\S+)\s{2,}(\S.*)$", line)
        assert match, f"make help line not 'make <target>  <what it does>': {line!r}"
        listed[match.group(1)] = match.group(2)
    assert set(listed) == targets, f"missing from make help: {sorted(targets - set(listed))}; extra: {sorted(set(listed) - targets)}"
    assert {"rke2/server/install", "rke2/agent/install", "rke2/status", "rke2/kubeconfig", "rke2/gpu/operator/apply",
            "rke2/argocd/register", "rke2/check"} <= set(listed)
    assert len(proc.stdout.splitlines()) == len(listed), "one line per target"


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    for item in node if isinstance(node, list) else []:
        if isinstance(item, dict):
            yield item
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from _tasks(item.get(key))


@pytest.mark.slow
def test_every_command_the_roles_and_playbooks_run_is_under_timeout() -> None:
    commands = []
    for path in sorted([*PROVISIONING.glob("roles/*/tasks/*.yml"), *PLAYBOOKS.glob("*.yml")]):
        for task in _tasks(yaml.safe_load(path.read_text())):
            module = task.get("ansible.builtin.command") or task.get("ansible.builtin.shell") or task.get("command")
            if module is None:
                continue
            argv = module.get("argv") if isinstance(module, dict) else module
            text = argv if isinstance(argv, str) else " ".join(map(str, argv or []))
            commands.append((f"{path.relative_to(PROVISIONING)}: {task['name']}", text))
    assert len(commands) >= 10
    untimed = [name for name, text in commands
               if not (text.startswith("timeout ") or re.match(r"^\{\{ ?(\[ ?'timeout'|rke2_timeout_argv|rke2_status_timeout_argv)", text))]
    assert untimed == [], f"commands without a timeout of their own: {untimed}"


@pytest.mark.slow
def test_install_playbooks_and_their_role_never_reference_the_gpu_operator() -> None:
    sources = [*INSTALL_PLAYBOOKS, *sorted(p for p in (PROVISIONING / "roles" / "rke2").rglob("*")
                                           if "__pycache__" not in p.parts)]  # what Ansible's import of a plugin compiles
    # the nvidia.com label domain may be named (labels set at registration only); nothing NVIDIA is deployed
    pattern = re.compile(r"gpu[-_ ]?operator|nvidia(?!\.com\b)|helm\.ngc|kind:\s*HelmChart\s*$", re.I | re.M)
    hits = [f"{p.relative_to(REPO)}: {m.group(0)!r}" for p in sources if p.is_file()
            for m in pattern.finditer(p.read_text(encoding="utf-8"))]
    assert hits == [], f"ADR 0002 §5-1: RKE2 install must not deploy the GPU Operator; found {hits}"
    make = subprocess.run(["make", "-n", "-f", str(PROVISIONING / "rke2.mk"), "rke2/server/install", "rke2/agent/install"],
                          cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert make.returncode == 0, make.stderr
    assert "rke2-server-install.yml" in make.stdout and "gpu-operator" not in make.stdout.lower(), make.stdout


def test_install_role_never_installs_packages_or_another_runtime() -> None:
    forbidden = {"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf", "ansible.builtin.yum",
                 "ansible.builtin.pip", "ansible.builtin.apt_repository", "ansible.builtin.deb822_repository"}
    used: set[str] = set()
    for path in (PROVISIONING / "roles" / "rke2").rglob("*.yml"):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for task in doc if isinstance(doc, list) else []:
                used |= set(task).union(*(t.keys() for t in task.get("block", [])))
    assert used & forbidden == set(), f"ADR 0001 §5-1: the RKE2 role must not install packages (Docker, containerd): {used & forbidden}"
    text = "\n".join(p.read_text() for p in (PROVISIONING / "roles" / "rke2" / "tasks").glob("*.yml"))
    assert not re.search(r"docker|containerd", text, re.I), "RKE2 tasks must not touch Docker or a separate containerd"


# --- rendered files (connection local, everything under rke2_root in tmp_path) ---

def local_inventory(tmp_path: Path) -> Path:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"rke2_servers": {"hosts": {"gpu-01": {
        "ansible_host": "192.168.10.21", "ansible_connection": "local", "ansible_become": False,
        "ansible_python_interpreter": sys.executable}}}}}}))
    return inventory


def render(tmp_path: Path, *extra: str) -> tuple[Run, Path]:
    root = tmp_path / "root"
    result = run_playbook(INSTALL_PLAYBOOKS[0], local_inventory(tmp_path), "--tags", "rke2_config",
                          "-e", f"rke2_root={root}", "-e", "rke2_manage_service=false",
                          "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}", *extra)
    return result, root


@pytest.mark.slow
def test_rendered_config_and_cilium_values_follow_the_tirosh_home_vars(tmp_path: Path) -> None:
    result, root = render(tmp_path)
    result.assert_ok()
    config_path = root / "etc/rancher/rke2/config.yaml"
    config = yaml.safe_load(config_path.read_text())
    assert config == {
        "write-kubeconfig-mode": "0600", "node-name": "gpu-01", "tls-san": ["192.168.10.21"], "cni": "cilium",
        "disable-kube-proxy": False,
        "etcd-s3": True, "etcd-s3-endpoint": "s3.tirosh.home.arpa:9000", "etcd-s3-bucket": "tirosh-home-etcd-snapshots",
        "etcd-s3-folder": "gpu",
        "kubelet-arg": ["system-reserved=memory=4Gi", "kube-reserved=memory=2Gi", "eviction-hard=memory.available<2Gi"],
        "node-label": ["node.tirosh.ai/role=gpu", "node.tirosh.ai/workload=ai", "node.tirosh.ai/model=dgx-spark",
                       "nvidia.com/gpu.present=true"],
    }
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    # no vault variable given: no credentials anywhere (RKE2 then takes them from its environment or an instance role)
    assert not (root / "etc/rancher/rke2/config.yaml.d/50-etcd-s3-credentials.yaml").exists()
    chart = yaml.safe_load((root / "var/lib/rancher/rke2/server/manifests/rke2-cilium-config.yaml").read_text())
    assert (chart["apiVersion"], chart["kind"], chart["metadata"]) == (
        "helm.cattle.io/v1", "HelmChartConfig", {"name": "rke2-cilium", "namespace": "kube-system"})
    assert yaml.safe_load(chart["spec"]["valuesContent"]) == {
        "kubeProxyReplacement": False, "encryption": {"enabled": False},
        "hubble": {"enabled": False, "relay": {"enabled": False}, "ui": {"enabled": False}}}


@pytest.mark.slow
def test_etcd_s3_credentials_come_from_the_vault_variable_into_their_own_drop_in_and_are_never_logged(
        tmp_path: Path) -> None:
    vault = tmp_path / "vault.yml"  # what `-e @vault.yml` (ansible-vault decrypted) gives the play
    vault.write_text(yaml.safe_dump({"rke2_etcd_s3_credentials": {"access_key": "Vault-S3-Access-0101",
                                                                  "secret_key": "Vault-S3-Secret-0102"}}))
    result, root = render(tmp_path, "-e", f"@{vault}", "--diff")
    result.assert_ok()
    drop_in = root / "etc/rancher/rke2/config.yaml.d/50-etcd-s3-credentials.yaml"
    assert yaml.safe_load(drop_in.read_text()) == {"etcd-s3-access-key": "Vault-S3-Access-0101",
                                                   "etcd-s3-secret-key": "Vault-S3-Secret-0102"}
    assert stat.S_IMODE(drop_in.stat().st_mode) == 0o600
    assert "Vault-S3" not in (root / "etc/rancher/rke2/config.yaml").read_text()
    assert "Vault-S3" not in result.output  # no_log and no diff: neither the run nor --diff shows them
    again, _ = render(tmp_path)  # a run without the vault variable leaves them in place
    again.assert_ok()
    assert drop_in.is_file()
    dropped, _ = render(tmp_path, "-e", json.dumps({"rke2_etcd_s3": {}}))  # the site declares no S3 upload any more
    dropped.assert_ok()
    assert not drop_in.exists() and "etcd-s3" not in (root / "etc/rancher/rke2/config.yaml").read_text()
    half = tmp_path / "half.yml"
    half.write_text(yaml.safe_dump({"rke2_etcd_s3_credentials": {"access_key": "Vault-S3-Access-0101"}}))
    (tmp_path / "half").mkdir()
    refused, _ = render(tmp_path / "half", "-e", f"@{half}")
    assert refused.rc != 0 and "must hold exactly access_key and secret_key" in refused.output
    assert "Vault-S3" not in refused.output


@pytest.mark.slow
def test_rendered_taints_and_kube_proxy_replacement_when_enabled(tmp_path: Path) -> None:
    result, root = render(tmp_path, "-e", json.dumps({
        "rke2_node_taints": ["nvidia.com/gpu=true:NoSchedule"], "rke2_disable_kube_proxy": True,
        "rke2_cilium": {"hubble_enabled": True, "kube_proxy_replacement": True, "wireguard_enabled": True}}))
    result.assert_ok()
    config = yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())
    assert config["node-taint"] == ["nvidia.com/gpu=true:NoSchedule"] and config["disable-kube-proxy"] is True
    chart = yaml.safe_load((root / "var/lib/rancher/rke2/server/manifests/rke2-cilium-config.yaml").read_text())
    assert yaml.safe_load(chart["spec"]["valuesContent"]) == {
        "kubeProxyReplacement": True, "k8sServiceHost": "localhost", "k8sServicePort": "6443",
        "hubble": {"enabled": True, "relay": {"enabled": True}, "ui": {"enabled": True}},
        "encryption": {"enabled": True, "type": "wireguard"}}


@pytest.mark.slow
def test_kube_proxy_replacement_without_disable_kube_proxy_is_refused_before_writing(tmp_path: Path) -> None:
    result, root = render(tmp_path, "-e", json.dumps({
        "rke2_cilium": {"hubble_enabled": False, "kube_proxy_replacement": True, "wireguard_enabled": False}}))
    assert result.rc != 0 and "rke2_disable_kube_proxy == rke2_cilium.kube_proxy_replacement" in result.output
    assert not root.exists()


@pytest.mark.slow
def test_rendered_agent_config_joins_the_first_server_without_the_token_in_config_or_output(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "rke2_servers": {"hosts": {"gpu-01": {"ansible_host": "192.168.10.21", **local}}},
        "rke2_agents": {"hosts": {"gpu-02": {"ansible_host": "192.168.10.22", **local}}}}}}))
    root = tmp_path / "root"
    result = run_playbook(INSTALL_PLAYBOOKS[1], inventory, "--tags", "rke2_config", "-e", f"rke2_root={root}",
                          "-e", "rke2_manage_service=false", "-e", "rke2_token=K10secret::server:joinme",
                          "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}")
    result.assert_ok()
    config = yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())
    assert config["server"] == "https://192.168.10.21:9345" and config["node-name"] == "gpu-02"
    assert config["token-file"] == f"{root}/etc/rancher/rke2/join-token" and "cni" not in config
    token = root / "etc/rancher/rke2/join-token"
    assert token.read_text() == "K10secret::server:joinme\n" and stat.S_IMODE(token.stat().st_mode) == 0o600
    assert "joinme" not in result.output
    assert not (root / "var/lib/rancher/rke2/server/manifests").exists()


# --- guards and the air gap (connection local, every node path under a per-host rke2_root) ---

AIRGAP_SITE = REPO / "pytest_dgxspark" / "testbed" / "scenarios" / "airgap" / "site"
LOCAL = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}


def node_root(tmp_path: Path, host: str = "gpu-01", *, version: str | None = None, config: dict[str, Any] | None = None,
              cluster: bool = False) -> Path:
    """A node's tree: optionally an installed rke2 answering `--version`, a config.yaml and a cluster's datastore."""
    root = tmp_path / host
    if version:
        binary = root / "usr/local/bin/rke2"
        binary.parent.mkdir(parents=True)
        binary.write_text(f'#!/bin/sh\necho "rke2 version {version} (6ce1a80e4d9c3b0f2a7e5d8c1b4a9f3e2d7c6b5a)"\n'
                          'echo "go version go1.24.11 X:boringcrypto"\n')
        binary.chmod(0o755)
    if config is not None:
        (root / "etc/rancher/rke2").mkdir(parents=True)
        (root / "etc/rancher/rke2/config.yaml").write_text(yaml.safe_dump(config))
    if cluster:
        (root / "var/lib/rancher/rke2/server/db/etcd").mkdir(parents=True)
    root.mkdir(exist_ok=True)
    return root


def local_run(tmp_path: Path, roots: dict[str, Path], *extra: str, site: Path = SITE, env: dict[str, str] | None = None,
              playbook: Path = INSTALL_PLAYBOOKS[0]) -> Run:
    inventory = tmp_path / "inventory.yml"
    hosts = {name: {"ansible_host": f"10.99.0.{i}", "rke2_root": str(root), **LOCAL}
             for i, (name, root) in enumerate(roots.items(), start=1)}
    inventory.write_text(yaml.safe_dump({"all": {"children": {"rke2_servers": {"hosts": hosts}}}}))
    return run_playbook(playbook, inventory, "-e", "rke2_manage_service=false", *extra, env=env, site=site)


@pytest.mark.slow
@pytest.mark.parametrize("playbook", ["rke2-server-install.yml", "rke2-status.yml"])
def test_an_rke2_that_never_answers_version_ends_the_run_with_its_reason(tmp_path: Path, playbook: str) -> None:
    root = node_root(tmp_path)
    binary = root / "usr/local/bin/rke2"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexec sleep 600\n")  # the old testbed stand-in: a daemon that ignores --version
    binary.chmod(0o755)
    started = time.monotonic()
    result = local_run(tmp_path, {"gpu-01": root}, "-e", "rke2_probe_timeout=2", playbook=PLAYBOOKS / playbook)
    assert result.rc != 0 and time.monotonic() - started < 60
    text = " ".join(result.output.split())
    assert (f"gpu-01: `{binary} --version` did not answer within 2 s" in text
            or "version \"none\" (rc 124, timed out after 2 s)" in text), text[-3000:]


@pytest.mark.slow
def test_a_downgrade_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    root = node_root(tmp_path, version="v1.35.7+rke2r1")
    result = local_run(tmp_path, {"gpu-01": root}, "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}")
    assert result.rc != 0
    assert ("gpu-01 runs RKE2 v1.35.7+rke2r1, newer than the pinned v1.34.10+rke2r1: RKE2 does not support downgrades"
            in " ".join(result.output.split())), result.output[-3000:]
    assert not (root / "etc/rancher/rke2/config.yaml").exists()


@pytest.mark.slow
def test_an_older_release_is_upgraded_and_the_same_release_is_left_alone(tmp_path: Path) -> None:
    older = local_run(tmp_path, {"gpu-01": node_root(tmp_path, version="v1.33.13+rke2r2")}, "--tags", "rke2_config",
                      "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}")
    older.assert_ok()
    same = local_run(tmp_path, {"gpu-01": node_root(tmp_path, "gpu-02", version="v1.34.10+rke2r1")}, "--tags", "rke2_config")
    same.assert_ok()  # nothing to install: the script's digest is not even asked for


@pytest.mark.slow
def test_a_cni_change_on_a_running_cluster_needs_the_explicit_variable(tmp_path: Path) -> None:
    root = node_root(tmp_path, version="v1.34.10+rke2r1", config={"cni": "canal", "node-name": "gpu-01"}, cluster=True)
    refused = local_run(tmp_path, {"gpu-01": root}, "--tags", "rke2_config")
    assert refused.rc != 0
    assert ('gpu-01 runs a cluster with cni "canal" (rke2-server is active or ' in " ".join(refused.output.split())
            and 'and the site asks for "cilium": RKE2 does not support changing the CNI of a running cluster'
            in " ".join(refused.output.split())), refused.output[-3000:]
    assert yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())["cni"] == "canal"
    allowed = local_run(tmp_path, {"gpu-01": root}, "--tags", "rke2_config", "-e", "rke2_allow_cni_change=true")
    allowed.assert_ok()
    assert yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())["cni"] == "cilium"


@pytest.mark.slow
def test_exactly_one_server_bootstraps_and_the_others_join_it(tmp_path: Path) -> None:
    roots = {"gpu-01": node_root(tmp_path, "gpu-01"), "gpu-02": node_root(tmp_path, "gpu-02")}
    result = local_run(tmp_path, roots, "--tags", "rke2_config", "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}",
                       "-e", "rke2_token=K10joined::server:secret")
    result.assert_ok()
    first = yaml.safe_load((roots["gpu-01"] / "etc/rancher/rke2/config.yaml").read_text())
    second = yaml.safe_load((roots["gpu-02"] / "etc/rancher/rke2/config.yaml").read_text())
    assert "server" not in first and "token-file" not in first
    assert second["server"] == "https://10.99.0.1:9345" and second["token-file"] == f"{roots['gpu-02']}/etc/rancher/rke2/join-token"
    assert second["cni"] == first["cni"] == "cilium" and second["tls-san"] == ["10.99.0.2"]
    assert (roots["gpu-02"] / "etc/rancher/rke2/join-token").read_text() == "K10joined::server:secret\n"
    assert not (roots["gpu-01"] / "etc/rancher/rke2/join-token").exists() and "secret" not in result.output
    plays = re.findall(r"^PLAY \[(.*?)\]", result.output, re.M)
    assert plays.index("Bootstrap the cluster on the first RKE2 server") < plays.index("Join the other RKE2 servers to the first")


@pytest.mark.slow
def test_a_second_server_with_a_cluster_of_its_own_is_refused(tmp_path: Path) -> None:
    roots = {"gpu-01": node_root(tmp_path, "gpu-01", version="v1.34.10+rke2r1"),
             "gpu-02": node_root(tmp_path, "gpu-02", version="v1.34.10+rke2r1", config={"cni": "cilium"}, cluster=True)}
    result = local_run(tmp_path, roots, "--tags", "rke2_config", "-e", "rke2_token=K10x::server:y")
    assert result.rc != 0
    assert ("gpu-02 already runs a cluster of its own" in result.output
            and "exactly one server (gpu-01) bootstraps, the others join it at https://10.99.0.1:9345" in " ".join(result.output.split()))
    assert "server" not in yaml.safe_load((roots["gpu-02"] / "etc/rancher/rke2/config.yaml").read_text())


@pytest.mark.slow
def test_an_install_without_a_pinned_script_is_refused(tmp_path: Path) -> None:
    root = node_root(tmp_path)
    result = local_run(tmp_path, {"gpu-01": root})
    assert result.rc != 0
    assert ('gpu-01 needs RKE2 v1.34.10+rke2r1 installed (found none): rke2_install_script_sha256 must pin install.sh '
            '(64 hex digits, got "")') in " ".join(result.output.split())
    assert not (root / "etc").exists()


@dataclass(frozen=True)
class AirGap:
    """A controller folder of air-gap artifacts with its checksum file, and the digest a site pins for it."""

    directory: Path
    pinned: str
    env: dict[str, str]

    def args(self, *extra: str, script: bool = True) -> tuple[str, ...]:
        return ("-e", f"rke2_airgap_artifacts={self.directory}", "-e", f"rke2_airgap_checksums_sha256={self.pinned}",
                *(("-e", f"rke2_install_script_src={FAKEHOST / 'install.sh'}") if script else ()),
                "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}", *extra)


ARCH = {"x86_64": "amd64", "aarch64": "arm64"}[os.uname().machine]
AIRGAP_FILES = [f"rke2.linux-{ARCH}.tar.gz", f"rke2-images.linux-{ARCH}.tar.zst", f"rke2-images-cilium.linux-{ARCH}.tar.zst",
                "gpu-operator-images.tar.zst"]


@pytest.fixture
def airgap(tmp_path: Path) -> AirGap:
    directory = tmp_path / "artifacts"
    directory.mkdir()
    lines = []
    for name in AIRGAP_FILES:
        (directory / name).write_bytes(hashlib.sha256(name.encode()).digest() * 512)
        lines.append(f"{hashlib.sha256((directory / name).read_bytes()).hexdigest()}  {name}\n")
    (directory / f"sha256sum-{ARCH}.txt").write_text("".join(lines))
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "systemctl").symlink_to(FAKEHOST / "systemctl")
    state = tmp_path / "state"
    state.mkdir()
    env = {"PATH": f"{fakebin}:{os.environ['PATH']}", "RKE2_FAKE_ROOT": str(tmp_path / "gpu-01"),
           "RKE2_FAKE_STATE": str(state), "RKE2_FAKE_LOG": str(tmp_path / "calls.jsonl")}
    return AirGap(directory, hashlib.sha256((directory / f"sha256sum-{ARCH}.txt").read_bytes()).hexdigest(), env)


@pytest.mark.slow
def test_air_gapped_install_verifies_every_artifact_and_renders_the_registries(tmp_path: Path, airgap: AirGap) -> None:
    root = node_root(tmp_path)
    auth = json.dumps({"rke2_airgap_extra_images": ["gpu-operator-images.tar.zst"], "rke2_registry_auth": {
        "registry.hospital.local:5000": {"username": "rke2-pull", "password": "s3cret-from-vault"}}})
    result = local_run(tmp_path, {"gpu-01": root}, *airgap.args("-e", auth), site=AIRGAP_SITE, env=airgap.env)
    result.assert_ok()
    staged = root / "var/tmp/rke2-install/artifacts"
    assert sorted(p.name for p in staged.iterdir()) == sorted(AIRGAP_FILES + [f"sha256sum-{ARCH}.txt"])
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["args"] for c in calls if c["cmd"] == "install.sh"] == [["v1.34.10+rke2r1", "server", f"{root}/usr/local", str(staged)]]
    registries = yaml.safe_load((root / "etc/rancher/rke2/registries.yaml").read_text())
    assert registries == {
        "mirrors": {r: {"endpoint": ["https://registry.hospital.local:5000"]}
                    for r in ("docker.io", "registry.k8s.io", "nvcr.io", "quay.io", "ghcr.io")},
        "configs": {"registry.hospital.local:5000": {"auth": {"username": "rke2-pull", "password": "s3cret-from-vault"}}}}
    assert stat.S_IMODE((root / "etc/rancher/rke2/registries.yaml").stat().st_mode) == 0o600
    assert "s3cret-from-vault" not in result.output
    config = yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())
    assert config["system-default-registry"] == "registry.hospital.local:5000"
    assert config["disable-default-registry-endpoint"] is True


@pytest.mark.slow
@pytest.mark.parametrize(("damage", "message"), [
    ("missing", "air-gapped site: missing artifact(s) {dir}/rke2-images-cilium.linux-{arch}.tar.zst; nothing is downloaded"),
    ("tampered", "rke2-images-cilium.linux-{arch}.tar.zst has sha256 "),
    ("unlisted", "rke2-images-cilium.linux-{arch}.tar.zst is not listed"),
    ("checksums", "sha256sum-{arch}.txt has sha256 "),
    ("no-script", "the site is air-gapped (airgap: true), so nothing is downloaded: rke2_install_script_src (got \"\")"),
])
def test_air_gapped_install_refuses_a_bad_artifact_before_installing(tmp_path: Path, airgap: AirGap, damage: str,
                                                                     message: str) -> None:
    cilium = airgap.directory / f"rke2-images-cilium.linux-{ARCH}.tar.zst"
    sums = airgap.directory / f"sha256sum-{ARCH}.txt"
    args = airgap.args()
    if damage == "missing":
        cilium.unlink()
    elif damage == "tampered":
        cilium.write_bytes(b"not the release's bytes")
    elif damage == "unlisted":
        sums.write_text("".join(line for line in sums.read_text().splitlines(True) if "cilium" not in line))
        args = airgap.args("-e", f"rke2_airgap_checksums_sha256={hashlib.sha256(sums.read_bytes()).hexdigest()}")
    elif damage == "checksums":
        sums.write_text(sums.read_text() + f"{'0' * 64}  extra.tar.zst\n")
    else:
        args = airgap.args(script=False)
    root = node_root(tmp_path)
    result = local_run(tmp_path, {"gpu-01": root}, *args, site=AIRGAP_SITE, env=airgap.env)
    assert result.rc != 0
    assert message.format(dir=airgap.directory, arch=ARCH) in " ".join(result.output.split()), result.output[-3000:]
    calls = (tmp_path / "calls.jsonl").read_text() if (tmp_path / "calls.jsonl").exists() else ""
    assert '"install.sh"' not in calls, "install.sh must not have run"
    assert not (root / "etc/rancher/rke2/config.yaml").exists() and not (root / "var/tmp/rke2-install/install.sh").exists()


# --- the kubeconfig rename and merge, as data ---

ADMIN = yaml.safe_load((FAKEHOST / "rke2.yaml").read_text())


@pytest.mark.slow
def test_rename_names_everything_after_the_context_and_points_at_the_node() -> None:
    f = load_filters("rke2_kubeconfig", "rke2_kubeconfig")
    renamed = f.rke2_kubeconfig_rename(ADMIN, "tirosh-home/rke2/gpu", "192.168.10.21")
    assert [c["name"] for c in renamed["clusters"]] == [u["name"] for u in renamed["users"]] == \
        [c["name"] for c in renamed["contexts"]] == ["tirosh-home/rke2/gpu"]
    assert renamed["contexts"][0]["context"] == {"cluster": "tirosh-home/rke2/gpu", "user": "tirosh-home/rke2/gpu"}
    assert renamed["clusters"][0]["cluster"] == {"certificate-authority-data": "RkFLRS1DQQ==",
                                                 "server": "https://192.168.10.21:6443"}
    assert f.rke2_kubeconfig_rename(ADMIN, "x", "fd00::5")["clusters"][0]["cluster"]["server"] == "https://[fd00::5]:6443"
    for loopback in ("127.0.0.1", "::1", "localhost"):
        with pytest.raises(Exception, match="not loopback"):
            f.rke2_kubeconfig_rename(ADMIN, "x", loopback)


def test_merge_puts_new_entries_first_replaces_stale_ones_and_keeps_current_context() -> None:
    f = load_filters("rke2_kubeconfig", "rke2_kubeconfig")
    new = f.rke2_kubeconfig_rename(ADMIN, "tirosh-home/rke2/gpu", "192.168.10.21")
    existing = {"apiVersion": "v1", "kind": "Config", "current-context": "k3s",
                "clusters": [{"name": "tirosh-home/rke2/gpu", "cluster": {"server": "https://old:6443"}},
                             {"name": "k3s", "cluster": {"server": "https://10.0.0.2:6443"}}],
                "users": [{"name": "k3s", "user": {"token": "t"}}],
                "contexts": [{"name": "k3s", "context": {"cluster": "k3s", "user": "k3s"}}]}
    merged = f.rke2_kubeconfig_merge(existing, new)
    assert [c["name"] for c in merged["clusters"]] == ["tirosh-home/rke2/gpu", "k3s"]
    assert merged["clusters"][0]["cluster"]["server"] == "https://192.168.10.21:6443"
    assert merged["current-context"] == "k3s"
    assert f.rke2_kubeconfig_merge(None, new)["current-context"] == "tirosh-home/rke2/gpu"


def test_missing_labels_and_taints_compare_with_the_live_node() -> None:
    f = load_filters("rke2", "rke2_filters")
    node = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "t", "effect": "NoSchedule"}]}}
    assert f.rke2_missing_labels(node, ["a=1", "b=3", "c="]) == ["b=3", "c="]
    assert f.rke2_missing_taints(node, ["t:NoSchedule", "t=:NoSchedule", "u=v:NoExecute"]) == ["u=v:NoExecute"]


# --- a fake DGX Spark: real sshd on loopback, PATH shims for systemctl/kubectl, a fake install.sh ---

@dataclass(frozen=True)
class FakeHost:
    """An sshd on 127.0.0.1 whose sessions see the shims first on PATH; the node's files live under root."""

    inventory: Path
    root: Path
    state: Path
    log: Path
    home: Path
    env: dict[str, str]

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def install(self, *args: str, root: Path | None = None) -> Run:
        return run_playbook(INSTALL_PLAYBOOKS[0], self.inventory, "-e", f"rke2_root={root or self.root}",
                            "-e", f"rke2_install_script_src={FAKEHOST / 'install.sh'}", "-e", "rke2_ready_delay=1",
                            "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}",
                            *args, env=self.env)

    def playbook(self, playbook: Path, *args: str) -> Run:
        return run_playbook(playbook, self.inventory, "-e", f"rke2_root={self.root}", *args, env=self.env)


@pytest.fixture(scope="module")
def fake_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHost]:
    if not Path("/usr/sbin/sshd").exists() or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("the fake host needs root, /usr/sbin/sshd and unshare")
    tmp = tmp_path_factory.mktemp("fakehost")
    root, state, home, bindir = tmp / "root", tmp / "state", tmp / "home", tmp / "bin"
    for d in (root, state, home, bindir):
        d.mkdir()
    for shim in ("systemctl", "kubectl"):
        (bindir / shim).symlink_to(FAKEHOST / shim)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "host_key")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "id_ed25519")], check=True)
    shutil.copy(tmp / "id_ed25519.pub", tmp / "authorized_keys")
    port = free_port()
    cpdir = tempfile.mkdtemp(prefix="dgxcp", dir="/tmp")
    (tmp / "known_hosts").write_text(f"[127.0.0.1]:{port} {(tmp / 'host_key.pub').read_text()}")
    path = f"{bindir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    (tmp / "sshd_config").write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {tmp / 'host_key'}",
        f"AuthorizedKeysFile {tmp / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes", "UsePAM no",
        "StrictModes no", f"PidFile {tmp / 'sshd.pid'}", "Subsystem sftp internal-sftp",
        f"SetEnv PATH={path} RKE2_FAKE_ROOT={root} RKE2_FAKE_STATE={state} RKE2_FAKE_LOG={tmp / 'calls.jsonl'}", ""]))
    # sshd wants /run/sshd: give it a private tmpfs /run in its own mount namespace, nothing on the real host.
    sshd = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs tmpfs /run && mkdir /run/sshd && exec /usr/sbin/sshd -D -e -f {tmp / 'sshd_config'}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp / "sshd.log", "w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert sshd.poll() is None and time.monotonic() < deadline, (tmp / "sshd.log").read_text()
                time.sleep(0.1)
        inventory = tmp / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"rke2_servers": {"hosts": {"gpu-01": {
            "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root", "ansible_become": False,
            "ansible_ssh_private_key_file": str(tmp / "id_ed25519"), "ansible_python_interpreter": sys.executable,
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={tmp / 'known_hosts'} -o IdentitiesOnly=yes",
            "rke2_api_address": "192.168.10.21"}}}}}}))
        # One multiplexed connection for all runs (a short socket path: unix sockets have a 108-byte limit).
        control = f"-o ControlMaster=auto -o ControlPersist=60s -o ControlPath={cpdir}/%C"
        yield FakeHost(inventory, root, state, tmp / "calls.jsonl", home, {"ANSIBLE_SSH_ARGS": control})
    finally:
        subprocess.run(["ssh", "-o", f"ControlPath={cpdir}/%C", "-p", str(port), "-O", "exit", "root@127.0.0.1"],
                       capture_output=True, timeout=10, check=False)
        os.killpg(sshd.pid, signal.SIGTERM)
        sshd.wait(timeout=10)
        shutil.rmtree(cpdir, ignore_errors=True)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@dataclass(frozen=True)
class FirstInstall:
    """The fake host's first install, made once for the tests that need an installed host (any of them may run alone,
    or in any order): its run and what it left, read right after it."""

    run: Run
    calls: list[dict[str, Any]]
    config: dict[str, Any]
    labels: dict[str, str]


@pytest.fixture(scope="module")
def installed(fake_host: FakeHost) -> FirstInstall:
    assert not [c for c in fake_host.calls() if c["cmd"] == "install.sh"], "the fake host was installed before"
    run = fake_host.install()
    return FirstInstall(run, fake_host.calls(), yaml.safe_load((fake_host.root / "etc/rancher/rke2/config.yaml").read_text()),
                        json.loads((fake_host.state / "node.json").read_text())["metadata"]["labels"])


@pytest.mark.slow
def test_check_mode_on_a_fresh_host_shows_the_writes_and_writes_nothing(fake_host: FakeHost, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh-root"
    fresh.mkdir()
    before = len(fake_host.calls())
    result = fake_host.install("--check", "--diff", root=fresh)
    result.assert_ok()
    assert result.changed() >= 3, result.output
    assert '+node-name: "gpu-01"' in result.output and "+cni: \"cilium\"" in result.output
    assert list(fresh.iterdir()) == []
    assert [c for c in fake_host.calls()[before:]
            if c["cmd"] != "systemctl" or c["args"][0] not in ("show", "is-enabled", "is-active")] == []


@pytest.mark.slow
def test_first_install_writes_config_installs_the_pinned_release_and_starts_the_server(installed: FirstInstall,
                                                                                       fake_host: FakeHost) -> None:
    installed.run.assert_ok()
    assert installed.run.changed() >= 5
    assert installed.config["cni"] == "cilium"
    assert (fake_host.root / "var/lib/rancher/rke2/server/manifests/rke2-cilium-config.yaml").is_file()
    installs = [c["args"] for c in installed.calls if c["cmd"] == "install.sh"]
    assert installs == [["v1.34.10+rke2r1", "server", f"{fake_host.root}/usr/local", ""]]
    verbs = [c["args"][0] for c in installed.calls if c["cmd"] == "systemctl"]
    assert verbs.count("start") == 1 and "enable" in verbs and verbs.index("start") > verbs.index("daemon-reload"), verbs
    assert installed.labels["node.tirosh.ai/role"] == "gpu" and installed.labels["node.tirosh.ai/model"] == "dgx-spark"


@pytest.mark.slow
def test_second_install_reports_no_change(installed: FirstInstall, fake_host: FakeHost) -> None:
    before = len(fake_host.calls())
    result = fake_host.install()
    result.assert_ok()
    assert result.changed() == 0, result.output[-6000:]
    mutating = [c for c in fake_host.calls()[before:]
                if c["cmd"] == "install.sh" or c["args"][0] in ("enable", "start", "restart", "label", "taint")]
    assert mutating == []


@pytest.mark.slow
def test_labels_under_the_gpu_operators_domain_are_set_at_registration_only(installed: FirstInstall,
                                                                           fake_host: FakeHost) -> None:
    assert "nvidia.com/gpu.present=true" in installed.config["node-label"]  # registration (ADR 0001 lists it)
    assert "nvidia.com/gpu.present" not in installed.labels, "the first install must not label it through the API"
    node_file = fake_host.state / "node.json"
    as_installed = node_file.read_text()
    node = json.loads(as_installed)
    node["metadata"]["labels"].update({"nvidia.com/gpu.present": "false", "node.tirosh.ai/role": "cpu"})
    node_file.write_text(json.dumps(node))
    before = len(fake_host.calls())
    try:
        result = fake_host.install()
        live = json.loads(node_file.read_text())["metadata"]["labels"]
    finally:
        node_file.write_text(as_installed)  # the other tests find the node as the first install left it
    result.assert_ok()
    labels = [c["args"] for c in fake_host.calls()[before:] if c["cmd"] == "kubectl" and "label" in c["args"]]
    assert [a[a.index("label") + 3] for a in labels] == ["node.tirosh.ai/role=gpu"], labels
    assert (live["node.tirosh.ai/role"], live["nvidia.com/gpu.present"]) == ("gpu", "false")
    assert ("gpu-01 lacks nvidia.com/gpu.present=true: labels under nvidia.com, feature.node.kubernetes.io are set by RKE2 "
            "at registration (config.yaml node-label) and then belong to their operators; this role never relabels them."
            in " ".join(result.output.split())), result.output[-3000:]


@pytest.mark.slow
def test_check_mode_after_install_changes_nothing(installed: FirstInstall, fake_host: FakeHost) -> None:
    before = snapshot(fake_host.root)
    result = fake_host.install("--check", "--diff")
    result.assert_ok()
    assert result.changed() == 0, result.output[-6000:]
    assert snapshot(fake_host.root) == before


@pytest.mark.slow
def test_kubeconfig_merge_renames_to_the_site_context_and_is_idempotent(installed: FirstInstall,
                                                                       fake_host: FakeHost) -> None:
    out = fake_host.home / ".kube" / "config"
    out.parent.mkdir(exist_ok=True)
    out.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "tirosh-home/k3s/argocd",
                                   "clusters": [{"name": "tirosh-home/k3s/argocd", "cluster": {"server": "https://10.0.0.2:6443"}}],
                                   "users": [{"name": "tirosh-home/k3s/argocd", "user": {"token": "x"}}],
                                   "contexts": [{"name": "tirosh-home/k3s/argocd",
                                                 "context": {"cluster": "tirosh-home/k3s/argocd", "user": "tirosh-home/k3s/argocd"}}]}))
    args = ("-e", f"rke2_kubeconfig_out={out}")
    first = fake_host.playbook(PLAYBOOKS / "rke2-kubeconfig.yml", *args)
    first.assert_ok()
    assert first.changed() == 1
    merged = yaml.safe_load(out.read_text())
    name = "tirosh-home/rke2/gpu"
    assert [merged[k][0]["name"] for k in ("clusters", "users", "contexts")] == [name, name, name]
    assert merged["contexts"][0]["context"] == {"cluster": name, "user": name}
    assert merged["clusters"][0]["cluster"]["server"] == "https://192.168.10.21:6443"
    assert merged["contexts"][1]["name"] == "tirosh-home/k3s/argocd" and merged["current-context"] == "tirosh-home/k3s/argocd"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert "RkFLRS1LRVk=" not in first.output, "the client key must never reach the output"
    second = fake_host.playbook(PLAYBOOKS / "rke2-kubeconfig.yml", *args)
    second.assert_ok()
    assert second.changed() == 0


# --- every Make target against the testbed: real sshd hosts in namespaces (a server and an agent) and its API ---

TESTBED_KUBECTL = Path(__file__).resolve().parent / "provisioning_testbed" / "kubectl"


@dataclass(frozen=True)
class SiteRehearsal:
    """A testbed two-node site that RKE2 has started (admin kubeconfig, node-token, kubectl), driven through make."""

    directory: Path
    kubeconfig_out: Path
    node_dirs: dict[str, Path]
    addresses: dict[str, str]

    def make(self, target: str, *variables: str, timeout: int = 240) -> Run:
        env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "HOME": str(self.directory / "home")}
        proc = subprocess.run(["make", "--no-print-directory", target, "SITE_DIR=sites/tirosh-home",
                               f"INVENTORY={self.directory / 'inventory.yml'}", f"SSH_CONFIG={self.directory / 'ssh_config'}",
                               f"KUBECONFIG_OUT={self.kubeconfig_out}", f"ANSIBLE_PLAYBOOK={ANSIBLE_PLAYBOOK}", *variables],
                              cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout, check=False)
        output = proc.stdout + proc.stderr
        recap: dict[str, dict[str, int]] = {}
        for m in RECAP.finditer(output):  # several playbooks (rke2/check) add up
            old = recap.get(m["host"], {"ok": 0, "changed": 0, "unreachable": 0, "failed": 0})
            recap[m["host"]] = {k: old[k] + int(m[k]) for k in old}
        return Run(proc.returncode, output, recap)

    def ssh(self, host: str, command: str, stdin: str = "") -> str:
        proc = subprocess.run(["ssh", "-F", str(self.directory / "ssh_config"), "-o", "BatchMode=yes", host, command],
                              input=stdin, capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, f"ssh {host} {command!r}: {proc.stderr}"
        return proc.stdout

    def upper(self, host: str) -> dict[str, str]:
        """What was written on the node since it came up (its overlay upper layers), file -> sha256."""
        rw = self.node_dirs[host] / "rw"
        return {str(p.relative_to(rw)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(rw.glob("*/upper/**/*")) if p.is_file()}


def _rke2_first_start(tb: Any, rehearsal: SiteRehearsal) -> None:
    """What RKE2's first start leaves on the server: rke2.yaml (names `default`), node-token and its kubectl."""
    config = yaml.safe_load(tb.kubeconfig.read_text())
    context = tb.contexts["workload"]
    pick = {kind: next(e for e in config[kind] if e["name"] == context) for kind in ("clusters", "users")}
    admin = {"apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": "default",
             "clusters": [{"name": "default", "cluster": pick["clusters"]["cluster"]}],
             "users": [{"name": "default", "user": pick["users"]["user"]}],
             "contexts": [{"name": "default", "context": {"cluster": "default", "user": "default"}}]}
    rehearsal.ssh("gpu-01", "mkdir -p /var/lib/rancher/rke2/bin /var/lib/rancher/rke2/server && "
                  "umask 077 && cat > /etc/rancher/rke2/rke2.yaml", json.dumps(admin))
    rehearsal.ssh("gpu-01", "umask 077 && cat > /var/lib/rancher/rke2/server/node-token",
                  "K10" + "0" * 64 + "::server:" + hashlib.sha256(str(tb.directory).encode()).hexdigest()[:32] + "\n")
    rehearsal.ssh("gpu-01", "cat > /var/lib/rancher/rke2/bin/kubectl && chmod 0755 /var/lib/rancher/rke2/bin/kubectl",
                  TESTBED_KUBECTL.read_text())


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteRehearsal]:
    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
        pytest.skip("the testbed needs root and /usr/sbin/sshd")
    from pytest_dgxspark.testbed.orchestrator import Testbed

    directory = tmp_path_factory.mktemp("rehearsal")
    scenario = directory / "scenario"
    scenario.mkdir()
    # a server and an agent; the Argo CD management cluster does not know this cluster yet
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({
        "description": "two-node, not yet registered in Argo CD", "extends": "two-node",
        "management": {"registered": False}}))
    tb = Testbed(scenario, directory / "tb")
    tb.up()
    try:
        state = json.loads((tb.directory / "state.json").read_text())
        (directory / "home").mkdir()
        site = SiteRehearsal(tb.directory, directory / "kube" / "config",
                             {h["name"]: Path(h["node_dir"]) for h in state["hosts"]},
                             {h["name"]: h["address"] for h in state["hosts"]})
        _rke2_first_start(tb, site)
        # the operator's own kubeconfig already holds the management (k3s) context, as at a real site
        config = yaml.safe_load(tb.kubeconfig.read_text())
        mgmt = tb.contexts["management"]
        site.kubeconfig_out.parent.mkdir()
        site.kubeconfig_out.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": mgmt,
            **{kind: [e for e in config[kind] if e["name"] == mgmt] for kind in ("clusters", "users", "contexts")}}))
        site.kubeconfig_out.chmod(0o600)
        yield site
    finally:
        tb.down()


@pytest.mark.slow
def test_status_reports_the_running_release_of_every_node_without_hanging(rehearsal: SiteRehearsal) -> None:
    started = time.monotonic()
    result = rehearsal.make("rke2/status")
    result.assert_ok()
    assert time.monotonic() - started < 60
    assert result.output.count("version: rke2 version v1.34.10+rke2r1 (6ce1a80e4d9c3b0f2a7e5d8c1b4a9f3e2d7c6b5a)") == 2, \
        result.output[-5000:]
    assert "unit: 'rke2-server: active'" in result.output and "unit: 'rke2-agent: active'" in result.output
    assert re.search(r"gpu-01\s+Ready\s+v1\.34\.10\+rke2r1", result.output), result.output[-3000:]
    assert set(result.recap) == {"gpu-01", "cpu-01"} and result.changed("gpu-01") == result.changed("cpu-01") == 0


@pytest.mark.slow
def test_status_fails_naming_the_release_when_the_site_pins_another(rehearsal: SiteRehearsal) -> None:
    result = rehearsal.make("rke2/status", "ANSIBLE_ARGS=-e rke2_version=v1.35.7+rke2r1")
    assert result.rc != 0
    assert ("gpu-01: rke2-server must be active and run v1.35.7+rke2r1; found unit \"active\" (rc 0), version "
            "\"rke2 version v1.34.10+rke2r1 (6ce1a80e4d9c3b0f2a7e5d8c1b4a9f3e2d7c6b5a)\" (rc 0)") in " ".join(result.output.split())


def _actions(rehearsal: SiteRehearsal, host: str) -> list[dict[str, Any]]:
    text = rehearsal.ssh(host, "cat /usr/lib/dgxspark-testbed/units-actions.jsonl 2>/dev/null || true")
    return [json.loads(line) for line in text.splitlines()]


@dataclass(frozen=True)
class SiteInstall:
    """The rehearsal's provisioning in the site's order, made once for the tests that need it (any of them may run
    alone, or in any order): the check before anything (and what it left), each install twice, the kubeconfig merge
    twice, each with what it left, read right after it."""

    check: Run
    upper_before_check: dict[str, dict[str, str]]
    upper_after_check: dict[str, dict[str, str]]
    actions_after_check: list[dict[str, Any]]
    server: tuple[Run, Run]
    server_config: dict[str, Any]
    server_actions: tuple[list[dict[str, Any]], list[dict[str, Any]]]
    agent: tuple[Run, Run]
    agent_config: dict[str, Any]
    agent_token_file: str
    agent_actions: list[dict[str, Any]]
    token: str
    kubeconfig: tuple[Run, Run]


@pytest.fixture(scope="module")
def site_installed(rehearsal: SiteRehearsal) -> SiteInstall:
    assert _actions(rehearsal, "gpu-01") == [], "the rehearsal's server was provisioned before"
    upper_before = {h: rehearsal.upper(h) for h in rehearsal.node_dirs}
    check = rehearsal.make("rke2/check")
    upper_after = {h: rehearsal.upper(h) for h in rehearsal.node_dirs}
    actions_after_check = _actions(rehearsal, "gpu-01")
    server_first = rehearsal.make("rke2/server/install")
    server_first.assert_ok()
    server_config = yaml.safe_load(rehearsal.ssh("gpu-01", "cat /etc/rancher/rke2/config.yaml"))
    server_actions_first = _actions(rehearsal, "gpu-01")
    server_second = rehearsal.make("rke2/server/install")
    server_actions_second = _actions(rehearsal, "gpu-01")
    agent_first = rehearsal.make("rke2/agent/install")
    agent_first.assert_ok()
    agent_config = yaml.safe_load(rehearsal.ssh("cpu-01", "cat /etc/rancher/rke2/config.yaml"))
    token_file = rehearsal.ssh("cpu-01", "cat /etc/rancher/rke2/join-token; stat -c %a /etc/rancher/rke2/join-token")
    agent_actions = _actions(rehearsal, "cpu-01")
    agent_second = rehearsal.make("rke2/agent/install")
    kubeconfig_first = rehearsal.make("rke2/kubeconfig")
    kubeconfig_first.assert_ok()
    kubeconfig_second = rehearsal.make("rke2/kubeconfig")
    return SiteInstall(check, upper_before, upper_after, actions_after_check, (server_first, server_second),
                       server_config, (server_actions_first, server_actions_second), (agent_first, agent_second),
                       agent_config, token_file, agent_actions,
                       rehearsal.ssh("gpu-01", "cat /var/lib/rancher/rke2/server/node-token"),
                       (kubeconfig_first, kubeconfig_second))


@pytest.mark.slow
def test_check_before_install_shows_the_new_config_and_writes_nothing(rehearsal: SiteRehearsal,
                                                                      site_installed: SiteInstall) -> None:
    result = site_installed.check
    result.assert_ok()
    assert result.changed("gpu-01") >= 2, result.output[-4000:]
    assert f'+  - "{rehearsal.addresses["gpu-01"]}"' in result.output  # tls-san, as the diff shows it
    assert site_installed.upper_after_check == site_installed.upper_before_check
    assert site_installed.actions_after_check == []


@pytest.mark.slow
def test_server_install_rewrites_the_config_restarts_once_and_a_second_run_changes_nothing(
        rehearsal: SiteRehearsal, site_installed: SiteInstall) -> None:
    first, second = site_installed.server
    first.assert_ok()
    assert first.changed("gpu-01") >= 2, first.output[-4000:]
    config = site_installed.server_config
    assert config["tls-san"] == [rehearsal.addresses["gpu-01"]] and config["cni"] == "cilium" and "server" not in config
    assert [a for a in site_installed.server_actions[0] if a["verb"] != "daemon-reload"] == [
        {"verb": "restart", "units": ["rke2-server.service"]}]
    second.assert_ok()
    assert second.changed("gpu-01") == 0, second.output[-4000:]
    assert len(site_installed.server_actions[1]) == 1


@pytest.mark.slow
def test_agent_install_joins_the_first_server_with_a_token_file(rehearsal: SiteRehearsal,
                                                                site_installed: SiteInstall) -> None:
    first, second = site_installed.agent
    first.assert_ok()
    assert first.changed("cpu-01") >= 2, first.output[-4000:]
    config = site_installed.agent_config
    assert config["server"] == f"https://{rehearsal.addresses['gpu-01']}:9345"
    assert config["token-file"] == "/etc/rancher/rke2/join-token" and "cni" not in config and "token" not in config
    token = site_installed.token
    assert site_installed.agent_token_file == token + "600\n"
    assert token.strip().split("::server:")[1] not in first.output
    assert [a for a in site_installed.agent_actions if a["verb"] != "daemon-reload"] == [
        {"verb": "restart", "units": ["rke2-agent.service"]}]
    second.assert_ok()
    assert second.changed("cpu-01") == 0, second.output[-4000:]


@pytest.mark.slow
def test_check_after_install_changes_nothing(rehearsal: SiteRehearsal, site_installed: SiteInstall) -> None:
    before = {h: rehearsal.upper(h) for h in rehearsal.node_dirs}
    result = rehearsal.make("rke2/check")
    result.assert_ok()
    assert result.changed("gpu-01") == 0, result.output[-4000:]
    assert {h: rehearsal.upper(h) for h in rehearsal.node_dirs} == before


@pytest.mark.slow
def test_kubeconfig_merges_a_context_the_suite_and_kubernetes_client_can_use(rehearsal: SiteRehearsal,
                                                                             site_installed: SiteInstall) -> None:
    first, second = site_installed.kubeconfig
    first.assert_ok()
    assert first.changed("gpu-01") >= 1
    from kubernetes import client
    from kubernetes import config as kubeconfig

    api = client.CoreV1Api(kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/rke2/gpu"))
    assert sorted(n.metadata.name for n in api.list_node().items) == ["cpu-01", "gpu-01"]
    assert second.changed("gpu-01") == 0


def _suite_rule(tmp_path: Path, scenario: Path, site: Path, test_file: str, rule: str) -> str:
    """Run one suite file against a testbed scenario directory; the rule's status in results.json."""
    reports = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "pytest", test_file, "--testbed", str(scenario), "--site", str(site),
                           "--report-dir", str(reports), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    results = json.loads((reports / "latest" / "results.json").read_text())
    statuses = {r["id"]: r["status"] for r in results["rules"]} if isinstance(results["rules"], list) else \
        {k: v["status"] for k, v in results["rules"].items()}
    assert rule in statuses, proc.stdout[-3000:] + proc.stderr[-2000:]
    return statuses[rule]


@pytest.mark.slow
@pytest.mark.parametrize(("mirrored", "expected"), [
    (None, "passed"),
    (["docker.io", "registry.k8s.io", "quay.io", "ghcr.io"], "failed"),  # nvcr.io forgotten: the GPU Operator's images
])
def test_an_air_gapped_site_provisioned_this_way_passes_image_mirror_on_the_testbed(
        tmp_path: Path, mirrored: list[str] | None, expected: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root")
    root = node_root(tmp_path, version="v1.34.10+rke2r1")
    extra = ("-e", json.dumps({"rke2_mirrored_registries": mirrored})) if mirrored else ()
    local_run(tmp_path, {"gpu-01": root}, "--tags", "rke2_config", *extra, site=AIRGAP_SITE).assert_ok()
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text(yaml.safe_dump({
        "description": "airgap, with the registries.yaml the rke2 role rendered from the site's vars", "extends": "airgap",
        "nodes": {"gpu-01": {"host": {"files": {
            "/etc/rancher/rke2/registries.yaml": (root / "etc/rancher/rke2/registries.yaml").read_text()}}}}}))
    assert _suite_rule(tmp_path, scenario, AIRGAP_SITE, "suites/gpu_operator/test_image_mirror.py",
                       "ADR-0002.image-mirror") == expected


class HelmController:
    """The test's stand-in for RKE2's helm-controller: once the manifest lands on the server, it replaces the
    helm-install Job by a new one (new uid) that succeeds or fails, as helm-controller does for a changed chart."""

    def __init__(self, rehearsal: SiteRehearsal, outcome: str) -> None:
        from kubernetes import client
        from kubernetes import config as kubeconfig

        self.rehearsal, self.outcome = rehearsal, outcome
        api = kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/rke2/gpu")
        self.batch, self.core = client.BatchV1Api(api), client.CoreV1Api(api)
        self.before = self._manifest()
        self.created: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _manifest(self) -> str:
        return self.rehearsal.ssh("gpu-01", "cat /var/lib/rancher/rke2/server/manifests/gpu-operator.yaml 2>/dev/null || true")

    def _run(self) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self._manifest() == self.before:
            time.sleep(0.5)
        name, ns = "helm-install-gpu-operator", "kube-system"
        old = self.batch.read_namespaced_job(name, ns)
        self.batch.delete_namespaced_job(name, ns)
        spec = old.spec.to_dict()
        job = self.batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": name, "namespace": ns, "labels": {"helmcharts.helm.cattle.io/chart": "gpu-operator"}},
            "spec": {"backoffLimit": spec["backoff_limit"], "template": {"spec": {
                "containers": [{"name": "helm", "image": "rancher/klipper-helm:v0.9.8-build20250709"}],
                "restartPolicy": "OnFailure"}}}})
        self.created = job.metadata.uid
        status = ({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]} if self.outcome == "succeeded" else
                  {"failed": 1, "active": 1, "conditions": []})
        self.batch.patch_namespaced_job_status(name, ns, {"status": status})


def _manifest_on(rehearsal: SiteRehearsal) -> str:
    return rehearsal.ssh("gpu-01", "cat /var/lib/rancher/rke2/server/manifests/gpu-operator.yaml 2>/dev/null || true")


@pytest.mark.slow
def test_gpu_operator_apply_needs_confirm_and_shows_the_adr_warning(rehearsal: SiteRehearsal,
                                                                     site_installed: SiteInstall) -> None:
    manifest = _manifest_on(rehearsal)
    result = rehearsal.make("rke2/gpu/operator/apply")
    assert result.rc != 0
    text = " ".join(result.output.split())
    assert "RKE2's documentation warns that the NVIDIA operator sends containerd a hangup, which restarts RKE2" in text
    assert "Nothing was applied; run again with CONFIRM=yes (-e gpu_operator_confirm=yes)." in text
    assert "TASK [Run the suite's host, rke2 and runtime layers" not in result.output and _manifest_on(rehearsal) == manifest


@pytest.mark.slow
def test_gpu_operator_apply_refuses_when_the_preflight_fails_naming_the_rule(rehearsal: SiteRehearsal,
                                                                              site_installed: SiteInstall) -> None:
    manifest = _manifest_on(rehearsal)
    rehearsal.ssh("gpu-01", "systemctl stop rke2-server")
    try:
        result = rehearsal.make("rke2/gpu/operator/apply", "CONFIRM=yes", timeout=400)
    finally:
        rehearsal.ssh("gpu-01", "systemctl start rke2-server")
    assert result.rc != 0
    text = " ".join(result.output.split())
    assert "the layers host, rke2, runtime did not pass (kubeconfig " in text, text[-3000:]
    assert re.search(r"\n\s*- ADR-0001\.rke2-service \(failed\): ", result.output), text[-3000:]  # one rule a line
    assert "Nothing was applied" in text and _manifest_on(rehearsal) == manifest


@pytest.mark.slow
def test_gpu_operator_apply_waits_for_the_job_of_this_apply_and_a_second_run_changes_nothing(
        rehearsal: SiteRehearsal, site_installed: SiteInstall) -> None:
    controller = HelmController(rehearsal, "succeeded")
    first = rehearsal.make("rke2/gpu/operator/apply", "CONFIRM=yes", timeout=400)
    first.assert_ok()
    controller.thread.join(timeout=10)
    assert controller.created and first.changed("gpu-01") == 1, first.output[-3000:]
    assert yaml.safe_load(_manifest_on(rehearsal)) == yaml.safe_load((SITE / "rke2/gpu-operator.helmchart.yaml").read_text())
    assert f"uid: {controller.created}" in first.output  # it waited for the new Job, not the earlier one
    second = rehearsal.make("rke2/gpu/operator/apply", "CONFIRM=yes", timeout=400)
    second.assert_ok()
    assert second.changed("gpu-01") == 0


@pytest.mark.slow
def test_gpu_operator_apply_fails_fast_when_the_job_of_this_apply_fails(rehearsal: SiteRehearsal, site_installed: SiteInstall,
                                                                        tmp_path: Path) -> None:
    chart = yaml.safe_load((SITE / "rke2/gpu-operator.helmchart.yaml").read_text())
    chart["spec"]["valuesContent"] += "\n# values changed: helm-controller starts a new Job\n"
    changed = tmp_path / "gpu-operator.helmchart.yaml"
    changed.write_text(yaml.safe_dump(chart))
    controller = HelmController(rehearsal, "failed")
    started = time.monotonic()
    result = rehearsal.make("rke2/gpu/operator/apply", "CONFIRM=yes", f"ANSIBLE_ARGS=-e gpu_operator_helmchart_src={changed}",
                            timeout=400)
    assert result.rc != 0
    assert controller.created
    text = " ".join(result.output.split())
    assert "job kube-system/helm-install-gpu-operator of this apply failed (failed pods: 1); " in text, text[-3000:]
    assert "(no pod of job helm-install-gpu-operator left to read a log from)" in text or "last 40 lines" in text
    assert "did not complete within" not in text and time.monotonic() - started < 300


class TokenController:
    """The test's stand-in for the token controller of RKE2's kube-controller-manager: fills the argocd-manager
    service-account-token Secret with a token the cluster's API accepts and its CA."""

    def __init__(self, rehearsal: SiteRehearsal) -> None:
        from kubernetes import client
        from kubernetes import config as kubeconfig

        api = kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/rke2/gpu")
        self.core = client.CoreV1Api(api)
        pki = rehearsal.directory / "pki"
        self.token = json.loads((pki / "workload-tokens.json").read_text())["tokens"][0]
        self.ca = (pki / "workload-ca.crt").read_bytes()
        self.filled = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kubernetes.client.rest import ApiException

        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                self.core.read_namespaced_secret("argocd-manager-long-lived-token", "kube-system")
            except ApiException:
                time.sleep(0.3)
                continue
            import base64

            self.core.patch_namespaced_secret("argocd-manager-long-lived-token", "kube-system", {"data": {
                "token": base64.b64encode(self.token.encode()).decode(), "ca.crt": base64.b64encode(self.ca).decode(),
                "namespace": base64.b64encode(b"kube-system").decode()}})
            self.filled = True
            return


def _suite_rules(rehearsal: SiteRehearsal, tmp_path: Path, target: str) -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", target, "--site", str(SITE), "--report-dir", str(tmp_path / "r"),
                           "--dgxspark-kubeconfig", str(rehearsal.kubeconfig_out),
                           "--dgxspark-inventory", str(rehearsal.directory / "inventory.yml"),
                           "--dgxspark-ssh-config", str(rehearsal.directory / "ssh_config"), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    results = tmp_path / "r" / "latest" / "results.json"
    assert results.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {r["id"]: r["status"] for r in json.loads(results.read_text())["rules"]}


@pytest.mark.slow
def test_argocd_register_adds_the_cluster_secret_and_a_second_run_changes_nothing(rehearsal: SiteRehearsal,
                                                                                    site_installed: SiteInstall,
                                                                                    tmp_path: Path) -> None:
    assert _suite_rules(rehearsal, tmp_path / "before", "suites/gitops")["ADR-0001.argocd-registered"] == "failed"
    controller = TokenController(rehearsal)
    first = rehearsal.make("rke2/argocd/register")
    first.assert_ok()
    assert controller.filled and first.changed("gpu-01") == 2, first.output[-3000:]  # the RBAC loop, the cluster Secret
    import base64

    from kubernetes import client
    from kubernetes import config as kubeconfig

    mgmt = client.CoreV1Api(kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/k3s/argocd"))
    secret = mgmt.read_namespaced_secret("cluster-tirosh-home-rke2-gpu", "argocd")
    data = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert secret.metadata.labels == {"argocd.argoproj.io/secret-type": "cluster"}
    assert (data["name"], data["server"]) == ("tirosh-home-rke2-gpu", f"https://{rehearsal.addresses['gpu-01']}:6443")
    assert json.loads(data["config"]) == {"bearerToken": controller.token, "tlsClientConfig": {
        "insecure": False, "caData": base64.b64encode(controller.ca).decode()}}
    assert controller.token not in first.output
    second = rehearsal.make("rke2/argocd/register")
    second.assert_ok()
    assert second.changed("gpu-01") == 0, second.output[-3000:]
    assert _suite_rules(rehearsal, tmp_path / "after", "suites/gitops")["ADR-0001.argocd-registered"] == "passed"


SUITE_USER = "system:serviceaccount:kube-system:dgxspark-suite"


@pytest.mark.slow
def test_suite_rbac_gives_the_suite_its_own_identity_and_a_kubeconfig_it_runs_with(rehearsal: SiteRehearsal,
                                                                                    site_installed: SiteInstall,
                                                                                    tmp_path: Path) -> None:
    from kubernetes import client
    from kubernetes import config as kubeconfig

    suite_config = rehearsal.directory / "home" / "dgxspark-suite.config"
    first = rehearsal.make("rke2/suite/rbac", f"SUITE_KUBECONFIG={suite_config}")
    first.assert_ok()
    text = " ".join(first.output.split())
    assert f"user to hand the suite: {SUITE_USER}" in text and f"kubeconfig: {suite_config}" in text, text[-3000:]
    assert stat.S_IMODE(suite_config.stat().st_mode) == 0o600
    written = yaml.safe_load(suite_config.read_text())
    assert [c["name"] for c in written["contexts"]] == ["tirosh-home/rke2/gpu", "tirosh-home/k3s/argocd"]
    assert [u["name"] for u in written["users"]] == ["dgxspark-suite@tirosh-home/rke2/gpu",
                                                     "dgxspark-suite@tirosh-home/k3s/argocd"]
    tokens = [u["user"]["token"] for u in written["users"]]
    assert all(set(u["user"]) == {"token"} for u in written["users"]) and all(tokens)  # no operator key copied
    assert not any(token in first.output for token in tokens)
    # what the API holds is the shipped template: the read role, the CUDA sample's writes, the admission policy
    admin = kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/rke2/gpu")
    rbac = client.RbacAuthorizationV1Api(admin)
    writes = rbac.read_cluster_role("dgxspark-suite-cuda-sample")
    assert sorted((tuple(r.api_groups), tuple(r.resources), tuple(r.verbs)) for r in writes.rules) == [
        (("",), ("namespaces",), ("create", "delete")), (("",), ("pods",), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("create", "patch"))]
    binding = rbac.read_cluster_role_binding("dgxspark-suite-read")
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [("ServiceAccount", "kube-system", "dgxspark-suite")]
    policy = client.AdmissionregistrationV1Api(admin).read_validating_admission_policy("dgxspark-suite-own-namespaces")
    assert policy.spec.match_conditions[0].expression == f"request.userInfo.username == '{SUITE_USER}'"
    mgmt = kubeconfig.new_client_from_config(str(rehearsal.kubeconfig_out), context="tirosh-home/k3s/argocd")
    role = client.RbacAuthorizationV1Api(mgmt).read_namespaced_role("dgxspark-suite-read-argocd-clusters", "argocd")
    assert [(r.resources, r.verbs) for r in role.rules] == [(["secrets"], ["list"])]
    # the suite runs as that identity: every request of its run is the ServiceAccount's
    log = rehearsal.directory / "requests.jsonl"
    before = len(log.read_text().splitlines())
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites/rke2", "suites/gitops", "--site", str(SITE),
                           "--report-dir", str(tmp_path / "r"), "--dgxspark-kubeconfig", str(suite_config),
                           "--dgxspark-inventory", str(rehearsal.directory / "inventory.yml"),
                           "--dgxspark-ssh-config", str(rehearsal.directory / "ssh_config"), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    statuses = {r["id"]: r["status"] for r in json.loads((tmp_path / "r" / "latest" / "results.json").read_text())["rules"]}
    assert statuses["ADR-0001.kubeconfig-context"] == statuses["ADR-0001.node-ready"] == "passed", proc.stdout[-3000:]
    run = [json.loads(line) for line in log.read_text().splitlines()[before:]]
    assert {r["cluster"] for r in run} == {"workload", "management"}
    # ... but one, once a test (in any order) registered the cluster in Argo CD: the Argo CD check then opens this
    # API with the registration's own token, as Argo CD connects, and does nothing else with it
    argocd = [(r["cluster"], r["method"], r["path"], r["status"], r.get("user")) for r in run if r.get("user") != SUITE_USER]
    registered = statuses["ADR-0001.argocd-registered"] == "passed"
    assert argocd == ([("workload", "GET", "/version", 200, "system:serviceaccount:kube-system:argocd-manager")]
                      if registered else []), statuses["ADR-0001.argocd-registered"]
    second = rehearsal.make("rke2/suite/rbac", f"SUITE_KUBECONFIG={suite_config}")
    second.assert_ok()
    assert second.changed("gpu-01") == 1, second.output[-3000:]  # only the kubeconfig, with fresh tokens


@pytest.mark.slow
def test_declared_hardening_is_rendered_into_config_and_its_files_and_nothing_when_undeclared(tmp_path: Path) -> None:
    """rke2_profile: cis, secrets encryption and the site's policy files (the hardened scenario's site) land where
    hardening-baseline reads them; tirosh-home declares none, so its config carries no hardening key (the first test)."""
    site = REPO / "pytest_dgxspark" / "testbed" / "scenarios" / "hardened" / "site"
    root = tmp_path / "root"
    result = run_playbook(INSTALL_PLAYBOOKS[0], local_inventory(tmp_path), "--tags", "rke2_config",
                          "-e", f"rke2_root={root}", "-e", "rke2_manage_service=false",
                          "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}", site=site)
    result.assert_ok()
    config = yaml.safe_load((root / "etc/rancher/rke2/config.yaml").read_text())
    assert {k: config[k] for k in ("profile", "secrets-encryption", "audit-policy-file",
                                   "pod-security-admission-config-file")} == {
        "profile": "cis", "secrets-encryption": True, "audit-policy-file": "/etc/rancher/rke2/audit-policy.yaml",
        "pod-security-admission-config-file": "/etc/rancher/rke2/rke2-pss.yaml"}
    assert (root / "etc/rancher/rke2/audit-policy.yaml").read_text() == (site / "rke2/audit-policy.yaml").read_text()
    assert (root / "etc/rancher/rke2/rke2-pss.yaml").read_text() == (site / "rke2/pod-security.yaml").read_text()
    assert (root / "etc/sysctl.d/60-rke2-cis.conf").read_text() == (
        "vm.panic_on_oom=0\nvm.overcommit_memory=1\nkernel.panic=10\nkernel.panic_on_oops=1\n")
    again = run_playbook(INSTALL_PLAYBOOKS[0], local_inventory(tmp_path), "--tags", "rke2_config",
                         "-e", f"rke2_root={root}", "-e", "rke2_manage_service=false",
                         "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}", site=site)
    again.assert_ok()
    assert again.changed() == 0
