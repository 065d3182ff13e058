"""Provisioning explains itself offline: the missing pin and how to make it, check mode downloads nothing, an
unreachable script names the host and points at the air-gapped mode, a failed install says what it left."""
from __future__ import annotations

import hashlib
import http.server
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests.loopback import free_port
from tests.test_provisioning import SCRIPT_SHA256, local_run, node_root

# Every test here that runs Ansible or make against fake hosts (its `slow` ones) is `make test-provisioning`'s:
# `make test` leaves them out (a first install alone took 99 s here at load 10); .ci/run runs both.
pytestmark = pytest.mark.provisioning

REPO = Path(__file__).resolve().parents[1]


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
def test_the_stock_site_names_the_missing_pin_and_the_command_that_makes_it(tmp_path):
    result = local_run(tmp_path, {"gpu-01": node_root(tmp_path)}, "--check")
    assert result.rc != 0
    assert ("rke2_install_script_sha256 must pin install.sh (64 hex digits, got \"\"); make the pin on a machine with "
            "network: curl -sfL https://get.rke2.io -o install.sh && sha256sum install.sh, review install.sh, then set "
            "rke2_install_script_sha256 (and rke2_install_script_src to that file, so nothing is downloaded) in "
            f"{REPO}/sites/tirosh-home/rke2/vars.yml") in words(result.output)


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        body = b"#!/bin/sh\nexit 0\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.slow
def test_check_mode_downloads_nothing(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/install.sh"
        sha = hashlib.sha256(b"#!/bin/sh\nexit 0\n").hexdigest()
        result = local_run(tmp_path, {"gpu-01": node_root(tmp_path)}, "--check", "-e", f"rke2_install_script_url={url}",
                           "-e", f"rke2_install_script_sha256={sha}")
    finally:
        server.shutdown()
    assert _Counting.hits == [], result.output[-3000:]
    assert "Download the pinned install script" not in result.output or "skipping" in result.output


@pytest.mark.slow
def test_an_unreachable_install_script_names_the_host_and_points_at_the_air_gapped_mode(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/install.sh"
    root = node_root(tmp_path)
    result = local_run(tmp_path, {"gpu-01": root}, "-e", f"rke2_install_script_url={url}",
                       "-e", f"rke2_install_script_sha256={SCRIPT_SHA256}", "-e", "rke2_probe_timeout=5")
    assert result.rc != 0
    said = words(result.output)
    assert f"gpu-01 could not download {url} (" in said, result.output[-3000:]
    assert ("A node without internet: set airgap: true, rke2_install_script_src and the rke2_airgap_* pins (README, "
            "\"An air-gapped site\"); nothing is downloaded then.") in said


@pytest.mark.slow
def test_a_failed_install_removes_its_staging_folder_and_names_what_it_left(tmp_path):
    script = tmp_path / "install.sh"
    script.write_text("#!/bin/sh\necho 'curl: (6) Could not resolve host: github.com' >&2\nexit 6\n")
    sha = hashlib.sha256(script.read_bytes()).hexdigest()
    root = node_root(tmp_path)
    result = local_run(tmp_path, {"gpu-01": root}, "-e", f"rke2_install_script_src={script}",
                       "-e", f"rke2_install_script_sha256={sha}")
    assert result.rc != 0
    said = words(result.output)
    assert "gpu-01: install.sh failed (exit 6: curl: (6) Could not resolve host: github.com)." in said, result.output[-3000:]
    assert "a node without internet needs airgap: true (README, \"An air-gapped site\")" in said
    assert f"Removed: {root}/var/tmp/rke2-install." in said
    assert f"Left on the node (a rerun rewrites them; delete them to undo): {root}/etc/rancher/rke2/config.yaml" in said
    assert not (root / "var/tmp/rke2-install").exists()


def test_make_conformance_and_rke2_targets_need_site():
    env = {k: v for k, v in os.environ.items() if k not in ("SITE", "SITE_DIR")}
    for target in ("conformance", "rke2/check", "rke2/server/install"):
        proc = subprocess.run(["make", "-s", target, "VENV=" + str(Path(os.sys.executable).parent.parent)], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2, (target, proc.stdout, proc.stderr)
        assert "SITE= is required" in proc.stderr and "tirosh-home" in proc.stderr
        assert "192.168" not in proc.stdout + proc.stderr
