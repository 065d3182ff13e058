"""Shared helpers of the project's own tests."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.loopback import free_port

# Runs made by the tests skip summary.pdf (Chromium costs 1-2 s a run); the report tests that print it unset this.
os.environ.setdefault("DGXSPARK_PDF", "off")

REPO = Path(__file__).resolve().parents[1]
SITE = REPO / "sites" / "tirosh-home"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One visible line when the tests on the real control plane could not run (no Go, no binaries), and when the
    bundled scenarios of tests/test_e2e.py ran on the stand-in instead of it."""
    reasons = [r.longrepr[2] for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and str(r.longrepr[2]).startswith("Skipped: real control plane:")]
    if reasons:
        terminalreporter.write_line(f"{len(reasons)} tests on the real control plane NOT RUN: "
                                    f"{reasons[0].removeprefix('Skipped: real control plane: ')}", yellow=True, bold=True)
    ran = any(getattr(r, "nodeid", "").startswith(("tests/test_e2e.py::test_the_suites_give_the_scenarios_expected",
                                                    "tests/test_e2e_other_half.py::test_the_suites_give"))
              for reports in terminalreporter.stats.values() for r in reports if hasattr(r, "nodeid"))
    if ran:
        from tests.realplane_available import why_not

        why = why_not()
        if (os.environ.get("DGXSPARK_E2E_API") or "real") == "real" and why is not None:
            terminalreporter.write_line("the bundled scenarios ran on the Python stand-in, NOT on the real control plane: "
                                        f"{why}", yellow=True, bold=True)


def alias_bomb(indent: str = "") -> str:
    """A billion-laughs YAML mapping (nine levels of nine aliases: 9**9 strings once expanded), lines indented."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "".join(f"{indent}{line}\n" for line in lines)


@pytest.fixture
def site_copy(tmp_path: Path) -> Path:
    """A writable copy of sites/tirosh-home."""
    dest = tmp_path / "sites" / "tirosh-home"
    shutil.copytree(SITE, dest)
    return dest


# The site copy's own kubeconfig (a real run refuses to start without one): both contexts point at a port nothing
# listens on; the stand-in checks of these runs never dial it.
STANDIN_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: "https://127.0.0.1:9"}}
users:
- {name: u, user: {token: stand-in}}
contexts:
- {name: tirosh-home/rke2/gpu, context: {cluster: c, user: u}}
- {name: tirosh-home/k3s/argocd, context: {cluster: c, user: u}}
"""


APPROVER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl kim@hospital"


def grant_waiver(site: Path, rule: str, expires: str = "2999-01-01", approver: str = "Kim",
                 digest: str | None = None) -> Path:
    """Write approvers.yml (Kim, with a key) and a waiver of `rule` granted against the site as it is now."""
    from pytest_dgxspark.site.governance import site_digest

    (site / "approvers.yml").write_text(f"approvers:\n  - name: Kim\n    role: security officer\n    key: {APPROVER_KEY}\n")
    path = site / "waivers.yml"
    path.write_text(f"waivers:\n  - rule: {rule}\n    reason: Hubble left on for the pilot\n    approver: {approver}\n"
                    f"    role: security officer\n    ticket: SEC-12\n    expires: {expires}\n"
                    f"    site_digest: {digest or site_digest(site)}\n")
    return path


@pytest.fixture
def suite(pytester: pytest.Pytester):
    """Write a fake suites/<layer>/test_x.py into the pytester dir, with a copy of the site (and a kubeconfig of it)."""
    shutil.copytree(SITE, pytester.path / "sites" / "tirosh-home")
    (pytester.path / "sites" / "tirosh-home" / "rke2" / "kubeconfig.yml").write_text(STANDIN_KUBECONFIG)

    def write(layer: str, source: str, name: str | None = None) -> Path:
        folder = pytester.path / "suites" / layer
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / (name or f"test_{layer}.py")
        path.write_text("import pytest\nfrom pytest_dgxspark import not_applicable\n\n" + source)
        return path

    return write


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real sshd on loopback accepting one key; yields its port, key, ssh_config and log."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")], check=True)
    (tmp_path / "authorized_keys").write_text((tmp_path / "id.pub").read_text())
    port = free_port()
    Path("/run/sshd").mkdir(exist_ok=True)
    (tmp_path / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host'}\nPidFile {tmp_path / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nStrictModes no\nUsePAM no\nPermitRootLogin yes\n"
        "PasswordAuthentication no\nLogLevel VERBOSE\nMaxStartups 50\n"
    )
    (tmp_path / "ssh_config").write_text("Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    log = tmp_path / "sshd.log"
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")], stderr=log.open("w"))
    try:
        for _ in range(50):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield {"port": port, "key": str(tmp_path / "id"), "ssh_config": str(tmp_path / "ssh_config"), "log": log, "dir": tmp_path}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
