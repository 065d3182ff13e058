"""A real target is never implied, the plan is shown before anything connects, and one inventory and one OpenSSH
config serve the suite and Ansible alike (the route Ansible takes)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.site.model import load_inventory
from pytest_dgxspark.targets.ssh import HostTarget
from pytest_dgxspark.targets.sshroute import route
from tests.conftest import REPO

# pytest in a fresh interpreter that records every socket connect and every process it starts (audit hooks), so a
# test can assert that nothing was dialled: `ssh -G` (reads the SSH config, dials nothing) is the only process allowed.
AUDITED = """
import json, sys
events = []
def hook(event, args):
    if event == "socket.connect":
        events.append(["connect", repr(args[1])])
    elif event == "subprocess.Popen":
        events.append(["popen", [str(a) for a in (args[1] or [])]])
sys.addaudithook(hook)
import pytest
try:
    code = pytest.main(sys.argv[2:])
finally:
    open(sys.argv[1], "w").write(json.dumps(events))
sys.exit(int(code))
"""


def audited_pytest(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list]:
    events = tmp_path / "events.json"
    environ = {**os.environ, "HOME": str(tmp_path), **(env or {})}
    environ.pop("KUBECONFIG", None)
    proc = subprocess.run([sys.executable, "-c", AUDITED, str(events), *args, "-p", "no:cacheprovider"], cwd=REPO,
                          env=environ, capture_output=True, text=True, timeout=120, check=False)
    return proc, json.loads(events.read_text())


NETWORK_TOOLS = ("ssh", "scp", "sftp", "curl", "wget", "kubectl", "ansible", "ansible-playbook", "nc")


def dialled(events: list) -> list:
    """Every socket connect (AF_UNIX ones too: a ControlMaster socket is a connection) and every process of a tool that
    reaches other machines, but `ssh -G` (pytest-metadata's `git` calls stay local)."""
    return [e for e in events if e[0] == "connect" or (
        e[0] == "popen" and Path(e[1][0]).name in NETWORK_TOOLS and e[1][:2] != ["ssh", "-G"])]


def ssh_resolutions(events: list) -> list:
    return [e for e in events if e[0] == "popen" and e[1][:2] == ["ssh", "-G"]]


@pytest.mark.slow
def test_pytest_suites_alone_is_a_usage_error_listing_sites_and_scenarios_that_opens_no_socket(tmp_path):
    proc, events = audited_pytest(tmp_path, "suites")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "ERROR: no target given: pytest-dgxspark never implies a real site; give one of" in proc.stderr
    assert "(sites here: tirosh-home)" in proc.stderr
    assert "scenarios: airgap, " in proc.stderr and " healthy, " in proc.stderr
    assert dialled(events) == [] and ssh_resolutions(events) == [], events  # not even an ssh -G: nothing resolved
    assert "192.168" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_dgxspark_plan_prints_tirosh_home_and_exits_0_without_a_single_connection(tmp_path):
    kubeconfig = tmp_path / "kubeconfig.yml"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "gpu", "cluster": {"server": "https://192.168.10.21:6443"}},
                     {"name": "mgmt", "cluster": {"server": "https://192.168.10.5:6443"}}],
        "users": [{"name": "u", "user": {"token": "never-printed-token"}}],
        "contexts": [{"name": "tirosh-home/rke2/gpu", "context": {"cluster": "gpu", "user": "u"}},
                     {"name": "tirosh-home/k3s/argocd", "context": {"cluster": "mgmt", "user": "u"}}]}))
    proc, events = audited_pytest(tmp_path, "suites", "--site", "sites/tirosh-home", "--dgxspark-plan",
                                  "--dgxspark-kubeconfig", str(kubeconfig))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dialled(events) == []
    assert ssh_resolutions(events), "the plan asks ssh -G what the SSH config makes of each host"
    out = proc.stdout
    assert "dgxspark: run plan (nothing contacted yet): site tirosh-home (--site: sites/tirosh-home)" in out
    host = next(line for line in out.splitlines() if line.strip().startswith("gpu-01"))
    assert "gpu-01 (server, GPU): ssh root@192.168.10.21 port 22 (root); ssh config: ~/.ssh/config;" in host
    assert f"known_hosts: {pwd.getpwuid(os.getuid()).pw_dir}/.ssh/known_hosts" in host  # ssh's home, not $HOME
    assert "host keys: checked (an unknown or changed key stops the run)" in host
    assert f"Kubernetes API: context tirosh-home/rke2/gpu -> https://192.168.10.21:6443 (kubeconfig {kubeconfig})" in out
    assert "management API: context tirosh-home/k3s/argocd -> https://192.168.10.5:6443" in out
    assert "written on the cluster: namespace dgxspark-cuda-<run id> with the CUDA sample pod" in out
    assert "never-printed-token" not in out
    assert not (REPO / "reports" / "latest").is_symlink() or "plan" not in os.readlink(REPO / "reports" / "latest")


@pytest.mark.slow
def test_dgxspark_plan_without_a_kubeconfig_says_a_run_would_stop_there(tmp_path):
    proc, events = audited_pytest(tmp_path, "suites", "--site", "sites/tirosh-home", "--dgxspark-plan")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert dialled(events) == []
    assert "Kubernetes API: context tirosh-home/rke2/gpu: no kubeconfig found" in proc.stdout
    assert (f"a run would stop here: no kubeconfig for context 'tirosh-home/rke2/gpu': looked for --dgxspark-kubeconfig, "
            f"sites/tirosh-home/rke2/kubeconfig.yml, $KUBECONFIG and {tmp_path}/.kube/config") in proc.stdout


def test_a_missing_kubeconfig_is_a_usage_error_before_anything_connects(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched')\n")
    (pytester.path / "sites" / "tirosh-home" / "rke2" / "kubeconfig.yml").unlink()
    result = pytester.runpytest("--site", "sites/tirosh-home", "--report-dir", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no kubeconfig for context 'tirosh-home/rke2/gpu': looked for --dgxspark-kubeconfig, "
                                 "sites/tirosh-home/rke2/kubeconfig.yml, $KUBECONFIG and */.kube/config; give one of them "
                                 "(make rke2/kubeconfig SITE=tirosh-home writes */.kube/config)"])
    assert "touched" not in result.stdout.str()


@pytest.mark.slow
def test_a_real_run_prints_its_plan_before_the_first_check(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    print('CHECK RAN')\n")
    result = pytester.runpytest("--site", "sites/tirosh-home", "--report-dir", "out", "-s", "-q")
    out = result.stdout.str()
    assert out.index("dgxspark: run plan (nothing contacted yet)") < out.index("CHECK RAN")
    assert "gpu-01 (server, GPU): ssh root@192.168.10.21 port 22" in out


@pytest.mark.parametrize(("option", "message"), [
    (["--hosts", "ssh://root@10.0.0.9"], "--hosts: the hosts are the inventory's*testinfra's option is not used*"),
    (["--sudo"], "--sudo: sudo follows ansible_user*"),
    (["--ssh-identity-file", "/k"], "--ssh-identity-file: set ansible_ssh_private_key_file in the inventory*"),
    (["--connection", "paramiko"], "--connection: set ansible_connection*"),
])
def test_testinfras_own_host_options_are_refused_naming_where_their_setting_lives(pytester, suite, option, message):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched')\n")
    result = pytester.runpytest("--site", "sites/tirosh-home", "--report-dir", "out", *option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}"])


@pytest.mark.slow
def test_testinfras_ssh_config_is_honoured_as_the_runs_ssh_config(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host 192.168.10.21\n  Port 2222\n  User admin\n  UserKnownHostsFile /srv/known\n")
    proc, events = audited_pytest(tmp_path, "suites", "--site", "sites/tirosh-home", "--dgxspark-plan",
                                  "--ssh-config", str(config))
    assert proc.returncode == 0, proc.stderr
    assert dialled(events) == []
    # the inventory's ansible_user (root) is on the command line, before the config, as Ansible puts it: it wins
    assert (f"ssh root@192.168.10.21 port 2222 (root); ssh config: {config}; known_hosts: /srv/known") in proc.stdout


@pytest.mark.slow
def test_an_ssh_config_block_naming_only_the_alias_is_a_usage_error_naming_file_and_line(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("# bastion setup\nHost gpu-01\n  ProxyJump bastion.hospital.local\n")
    proc, _ = audited_pytest(tmp_path, "suites", "--site", "sites/tirosh-home", "--dgxspark-ssh-config", str(config))
    assert proc.returncode == 4
    assert (f"{config}:2: 'Host gpu-01' names the inventory alias 'gpu-01', but Ansible and the suite dial ansible_host "
            "'192.168.10.21', so this block is never read: name the address too ('Host gpu-01 192.168.10.21')") in proc.stderr


def test_the_route_is_ansibles_order_inventory_options_then_common_args(tmp_path):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                         "          ansible_host: 10.1.2.3\n          ansible_port: 2200\n          ansible_user: admin\n"
                         "          ansible_ssh_private_key_file: ~/.ssh/site\n"
                         "          ansible_ssh_common_args: '-o ProxyJump=jump@bastion -o \"ServerAliveInterval 7\"'\n")
    _, hosts = load_inventory(inventory, ssh_config="/cfg")
    r = route(hosts[0])
    assert r.argv() == ["-F", "/cfg", "-o", "Port=2200", "-o", f"IdentityFile={Path.home()}/.ssh/site", "-o", "User=admin",
                        "-o", "ProxyJump=jump@bastion", "-o", "ServerAliveInterval 7", "10.1.2.3"]


def _site_for(sshd: dict[str, Any], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of tirosh-home whose one host is the loopback sshd, reached through a jump over the same sshd, and one
    OpenSSH config that matches it by its address (as Ansible dials it)."""
    site = tmp_path / "sites" / "loop"
    shutil.copytree(REPO / "sites" / "tirosh-home", site)
    (site / "inventory.yml").write_text(
        "all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n          ansible_host: 127.0.0.1\n"
        "          ansible_user: root\n          ansible_ssh_common_args: -o ProxyJump=jump\n")
    config = tmp_path / "site_ssh_config"
    config.write_text(
        f"Host jump\n  HostName 127.0.0.1\n  Port {sshd['port']}\n  User root\n\n"
        f"Host gpu-01 127.0.0.1\n  Port {sshd['port']}\n\n"
        f"Host *\n  IdentityFile {sshd['key']}\n  IdentitiesOnly yes\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n  LogLevel ERROR\n")
    keys = subprocess.run(["ssh-keyscan", "-p", str(sshd["port"]), "-t", "ed25519", "127.0.0.1"], capture_output=True,
                          text=True, timeout=30, check=True).stdout
    (tmp_path / "known_hosts").write_text(keys)
    return site, config


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")
def test_one_site_and_one_ssh_config_serve_the_suite_and_ansible_alike(sshd, tmp_path):
    site, config = _site_for(sshd, tmp_path)
    _, hosts = load_inventory(site / "inventory.yml", ssh_config=str(config))
    control = tmp_path / "ctl"
    control.mkdir()
    target = HostTarget(hosts[0], str(control), 0)
    try:
        assert target.run("echo suite-$SSH_CONNECTION").stdout.startswith("suite-127.0.0.1")
    finally:
        target.close()
    suite_logins = sshd["log"].read_text().count("Accepted publickey")
    assert suite_logins == 2, "the suite went through the jump (ansible_ssh_common_args ProxyJump): two logins"
    ansible = Path(sys.executable).with_name("ansible")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "provisioning" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           # what provisioning/rke2.mk gives Ansible for SSH_CONFIG=...
           "ANSIBLE_SSH_ARGS": f"-F {config} -o ControlMaster=auto -o ControlPersist=60s",
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(tmp_path / "actl")}
    proc = subprocess.run([str(ansible), "-i", str(site / "inventory.yml"), "gpu-01", "-m", "ansible.builtin.raw",
                           "-a", "echo ansible"], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0 and "ansible" in proc.stdout, proc.stdout + proc.stderr
    assert sshd["log"].read_text().count("Accepted publickey") == suite_logins + 2


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")
def test_the_operator_preflight_reaches_the_host_with_the_same_site_and_config(sshd, tmp_path):
    site, config = _site_for(sshd, tmp_path)
    (site / "rke2" / "kubeconfig.yml").write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- {name: c, cluster: {server: 'https://127.0.0.1:9'}}\n"
        "users:\n- {name: u, user: {token: t}}\ncontexts:\n- {name: tirosh-home/rke2/gpu, context: {cluster: c, user: u}}\n"
        "- {name: tirosh-home/k3s/argocd, context: {cluster: c, user: u}}\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("KUBECONFIG", None)
    proc = subprocess.run(["make", "-s", "rke2/gpu/operator/apply", f"SITE_DIR={site}", f"SSH_CONFIG={config}",
                           "CONFIRM=yes", f"VENV={Path(sys.executable).parent.parent}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out  # a loopback Debian host is no DGX Spark: the preflight refuses the apply
    assert "Nothing was applied" in out
    assert "ADR-0002.host-driver" in out  # judged on the host it reached: a finding, not an SSH error
    refusals = [line.strip() for line in out.splitlines() if line.strip().startswith("- ADR-")]
    assert any(line.startswith("- ADR-0002.host-driver (failed): ") for line in refusals), out[-3000:]  # one per line
    assert "cannot read the host over SSH" not in out
    assert sshd["log"].read_text().count("Accepted publickey") >= 2


def _register(tmp_path: Path, *make_args: str) -> subprocess.CompletedProcess:
    site = tmp_path / "sites" / "loop"
    shutil.copytree(REPO / "sites" / "tirosh-home", site)
    (site / "inventory.yml").write_text("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                                        "          ansible_host: 127.0.0.1\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("KUBECONFIG", None)
    return subprocess.run(["make", "-s", "rke2/argocd/register", f"SITE_DIR={site}",
                           f"VENV={Path(sys.executable).parent.parent}", *make_args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_argocd_register_without_a_kubeconfig_says_so_once_before_anything_is_applied(tmp_path):
    proc = _register(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert out.count("fatal: ") == 1, out  # one task fails, once, before anything is applied
    assert f"kubeconfig {tmp_path}/.kube/config: not found; write it with make rke2/kubeconfig" in out
    assert "ConfigException" not in out and "Apply the argocd-manager" not in out


@pytest.mark.slow
def test_argocd_register_with_both_apis_down_names_each_once_without_retry_noise(tmp_path):
    from tests.loopback import free_port

    port = free_port()
    kubeconfig = tmp_path / "kubeconfig.yml"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n"
        f"- {{name: gpu, cluster: {{server: 'https://127.0.0.1:{port}'}}}}\n"
        f"- {{name: mgmt, cluster: {{server: 'https://127.0.0.1:{port + 1}'}}}}\n"
        "users:\n- {name: u, user: {token: t}}\ncontexts:\n"
        "- {name: tirosh-home/rke2/gpu, context: {cluster: gpu, user: u}}\n"
        "- {name: tirosh-home/k3s/argocd, context: {cluster: mgmt, user: u}}\n")
    proc = _register(tmp_path, f"KUBECONFIG_OUT={kubeconfig}")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert out.count("fatal: ") == 1, out  # one task fails, once, naming both APIs, before anything is applied
    assert (f"context tirosh-home/rke2/gpu (https://127.0.0.1:{port}): the API does not answer: ConnectionRefusedError"
            in out)
    assert f"context tirosh-home/k3s/argocd (https://127.0.0.1:{port + 1}): the API does not answer" in out
    assert "MaxRetryError" not in out
    assert "Retrying (Retry(" not in out and "Apply the argocd-manager" not in out


@pytest.mark.skipif(shutil.which("ssh") is None or not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")
def test_an_unknown_host_key_names_the_known_hosts_files_the_run_reads_and_the_entry(sshd, tmp_path):
    config = tmp_path / "strict_config"
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    config.write_text(f"Host 127.0.0.1\n  Port {sshd['port']}\n  IdentityFile {sshd['key']}\n"
                      f"  UserKnownHostsFile {known}\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n")
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                         "          ansible_host: 127.0.0.1\n          ansible_user: root\n")
    _, hosts = load_inventory(inventory, ssh_config=str(config))
    (tmp_path / "ctl").mkdir()
    target = HostTarget(hosts[0], str(tmp_path / "ctl"), 0)
    from pytest_dgxspark.targets.ssh import HostUnreachable

    with pytest.raises(HostUnreachable) as caught:
        target.connect()
    assert caught.value.cause.kind == "host-key-unknown"
    assert str(caught.value).endswith(f"; the run reads known_hosts {known} /dev/null for [127.0.0.1]:{sshd['port']}")
