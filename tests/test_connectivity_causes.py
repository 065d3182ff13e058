"""Connectivity causes, each with its own message and fix: a real sshd and a real TLS API server on loopback."""

from __future__ import annotations

import ssl
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import urllib3

from pytest_dgxspark.targets.causes import api_cause, ssh_cause
from pytest_dgxspark.targets.connections import Cluster, ClusterUnreachable, HostUnreachable
from tests.loopback import JsonHandler, free_port, host_target, write_kubeconfig

needs_openssh = pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="needs OpenSSH")


def _strict_config(tmp_path: Path, known_hosts: str) -> str:
    path = tmp_path / "known_hosts"
    path.write_text(known_hosts)
    config = tmp_path / "strict_ssh_config"
    config.write_text(f"Host *\n  StrictHostKeyChecking yes\n  UserKnownHostsFile {path}\n")
    return str(config)


@needs_openssh
def test_an_unknown_host_key_is_its_own_cause(sshd, tmp_path):
    target = host_target(sshd, tmp_path, ssh_config=_strict_config(tmp_path, ""))
    with pytest.raises(HostUnreachable) as info:
        target.connect()
    assert info.value.cause.kind == "host-key-unknown"
    assert "the host's SSH key is not in known_hosts" in str(info.value)
    assert "No ED25519 host key is known for [127.0.0.1]" in str(info.value)
    assert info.value.cause.fix.startswith("Compare the host key fingerprint on the console")


@needs_openssh
def test_a_changed_host_key_is_its_own_cause(sshd, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    target = host_target(sshd, tmp_path, ssh_config=_strict_config(tmp_path, f"[127.0.0.1]:{sshd['port']} {other[0]} {other[1]}\n"))
    with pytest.raises(HostUnreachable) as info:
        target.connect()
    assert info.value.cause.kind == "host-key-changed"
    assert "possible interception" in info.value.cause.fix


@needs_openssh
def test_refused_credentials_are_their_own_cause(sshd, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    target = host_target(sshd, tmp_path, identity_file=str(tmp_path / "stranger"))
    with pytest.raises(HostUnreachable) as info:
        target.connect()
    assert info.value.cause.kind == "auth-refused"
    assert "Permission denied (publickey" in str(info.value)


@pytest.mark.slow
@needs_openssh
def test_exit_255_never_reaches_a_check_as_a_command_result(sshd, tmp_path):
    target = host_target(sshd, tmp_path)
    try:
        target.connect()
        assert target.run("exit 3").rc == 3  # a command's own status is an answer
        with pytest.raises(HostUnreachable) as info:
            target.run("exit 255")
        assert info.value.target == "ssh:gpu-01"
        with pytest.raises(HostUnreachable):
            target.run("true")  # remembered: no second attempt
    finally:
        target.close()


@pytest.mark.slow
@needs_openssh
def test_sudo_asking_for_a_password_is_a_target_fault_not_output(sshd, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sudo").write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    (fake / "sudo").chmod(0o755)
    target = host_target(sshd, tmp_path)
    try:
        target.connect()
        backend = target.host.backend
        backend.sudo = True  # as for a non-root ansible_user; the target's sudo is the fake one, asking for a password
        backend.get_sudo_command = lambda command, user: backend.quote(f"{fake}/sudo -n /bin/sh -c %s", command)
        with pytest.raises(HostUnreachable) as info:
            target.run("nvidia-smi")
        assert info.value.cause.kind == "sudo-password"
        assert "NOPASSWD" in info.value.cause.fix
    finally:
        target.close()


@pytest.mark.parametrize(("stderr", "kind"), [
    ("ssh: Could not resolve hostname gpu-01.site: Name or service not known", "name-resolution"),
    ("ssh: connect to host 10.0.0.21 port 22: No route to host", "unreachable"),
    ("ssh: connect to host 10.0.0.21 port 22: Connection timed out", "unreachable"),
    ("Connection timed out during banner exchange\nConnection to 10.0.0.21 port 22 timed out", "banner-timeout"),
    ("Connection closed by 10.0.0.21 port 22", "dropped"),
    ("client_loop: send disconnect: Broken pipe", "dropped"),
    ("kex_exchange_identification: read: Connection reset by peer", "dropped"),
    ("@@@@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\nHost key verification failed.",
     "host-key-changed"),
    ("sudo: a terminal is required to read the password; either use the -S option", "sudo-password"),
], ids=lambda v: v if isinstance(v, str) and "-" in v and " " not in v else None)
def test_openssh_words_map_to_their_cause(stderr, kind):
    assert ssh_cause(stderr).kind == kind


# --- the API over TLS ---------------------------------------------------------------------------------------


def _ca_and_cert(tmp_path: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl, as a real cluster's PKI)."""
    ca_key, ca, key, csr, cert = (tmp_path / f"{name}-{x}" for x in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt"))
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(ca_key),
        "-out", str(ca), "-days", "2", "-subj", f"/CN={name}-ca")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
        str(csr), "-subj", "/CN=kube-apiserver")
    ext = tmp_path / f"{name}.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial", "-out", str(cert),
        "-days", "2", "-extfile", str(ext))
    return ca, cert, key


class _TlsApi(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.headers.get("Authorization") != "Bearer good":
            self._send(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        else:
            self._send(200, {"gitVersion": "v1.34.10+rke2r1"})


@pytest.fixture
def tls_api(tmp_path: Path) -> Iterator[dict[str, Any]]:
    ca, cert, key = _ca_and_cert(tmp_path, "cluster")
    other_ca, _, _ = _ca_and_cert(tmp_path, "other")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TlsApi)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def kubeconfig(ca_file: Path, token: str) -> Path:
        return write_kubeconfig(tmp_path / f"kubeconfig-{ca_file.stem}-{token}", f"https://127.0.0.1:{server.server_port}",
                                token, ca_file=ca_file)

    try:
        yield {"ca": ca, "other_ca": other_ca, "kubeconfig": kubeconfig}
    finally:
        server.shutdown()
        server.server_close()


def test_the_tls_api_answers_with_the_right_ca_and_token(tls_api):
    cluster = Cluster(tls_api["kubeconfig"](tls_api["ca"], "good"), "site/rke2/gpu")
    assert cluster.version()["gitVersion"] == "v1.34.10+rke2r1"


def test_a_kubeconfig_with_another_ca_is_a_certificate_mismatch(tls_api):
    cluster = Cluster(tls_api["kubeconfig"](tls_api["other_ca"], "good"), "site/rke2/gpu")
    with pytest.raises(ClusterUnreachable) as info:
        cluster.connect()
    assert info.value.cause.kind == "certificate"
    assert "does not match the kubeconfig's certificate authority" in str(info.value)
    assert "never disable TLS verification" in info.value.cause.fix


def test_a_wrong_token_is_credentials_rejected(tls_api):
    cluster = Cluster(tls_api["kubeconfig"](tls_api["ca"], "wrong"), "site/rke2/gpu")
    with pytest.raises(ClusterUnreachable) as info:
        cluster.connect()
    assert info.value.cause.kind == "credentials-rejected"
    assert str(info.value).endswith("(HTTP 401 Unauthorized)")
    assert "wrong" not in str(info.value)  # the token never reaches a message


@pytest.mark.slow
def test_a_client_call_to_a_dead_api_raises_a_target_error_never_a_raw_client_exception(tls_api, tmp_path):
    cluster = Cluster(write_kubeconfig(tmp_path / "dead", f"http://127.0.0.1:{free_port()}", "t", context="x"), "x")
    with pytest.raises(ClusterUnreachable) as info:
        cluster.call(cluster.core.read_namespace, "kube-system", _request_timeout=(2, 2))
    assert info.value.cause.kind == "refused" and info.value.target == "api:x"


def test_api_name_resolution_is_its_own_cause():
    error = urllib3.exceptions.MaxRetryError(
        None, "/version", urllib3.exceptions.NameResolutionError("gpu.site", None, OSError("Name or service not known")))
    assert api_cause(error).kind == "name-resolution"
