"""SIMULATED from signs the API user cannot remove (issue 20 point 4): the testbed's CA and serving certificate carry
its mark; the kubeconfig's CA names a testbed without a request, the served certificate with a handshake only."""
from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import yaml

from pytest_dgxspark.judge import identity
from pytest_dgxspark.testbed import pki


def _kubeconfig(tmp_path, ca, server="https://127.0.0.1:6443"):
    client = pki.client_cert(ca, "system:admin", "system:masters")
    entry = pki.kubeconfig_entry("tirosh-home/rke2/gpu", server, ca, client)
    path = tmp_path / "kubeconfig.yml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [entry["cluster"]],
                                    "users": [entry["user"]], "contexts": [entry["context"]]}))
    return path


def test_the_testbeds_ca_in_a_kubeconfig_is_a_sign_even_with_annotation_header_and_marker_file_gone(tmp_path):
    path = _kubeconfig(tmp_path, pki.make_ca("rke2-server-ca@1700000000"))
    sign = identity.kubeconfig_ca_sign(path, "tirosh-home/rke2/gpu")
    assert sign == (f"kubeconfig {path} context 'tirosh-home/rke2/gpu': its CA is a testbed's "
                    f"(OU={identity.CERT_UNIT})")


def test_a_ca_without_the_mark_is_no_sign(tmp_path):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rke2-server-ca@1700000000")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    real = pki.Pair(cert.public_bytes(serialization.Encoding.PEM), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    assert identity.kubeconfig_ca_sign(_kubeconfig(tmp_path, real), "tirosh-home/rke2/gpu") is None


def test_the_certificate_the_api_serves_is_a_sign_from_the_handshake_alone(tmp_path):
    ca = pki.make_ca("rke2-server-ca@1700000000")
    served = pki.server_cert(ca, ["127.0.0.1"], ["localhost"])
    (tmp_path / "tls.crt").write_bytes(served.cert)
    (tmp_path / "tls.key").write_bytes(served.key)
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - never reached: the sign comes from the handshake
            requests.append(self.path)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.handle_request, daemon=True)
    thread.start()
    try:
        sign = identity.served_certificate_sign(f"https://127.0.0.1:{server.server_address[1]}", "ctx")
    finally:
        thread.join(timeout=10)
        server.server_close()
    assert sign == f"Kubernetes API of context 'ctx': serves a testbed's certificate (OU={identity.CERT_UNIT})"
    assert requests == []


def _banner_server(banner: bytes):
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.sendall(banner)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_an_ssh_banner_naming_the_testbed_is_a_sign_no_file_on_the_host_removes():
    server, thread = _banner_server(b"SSH-2.0-OpenSSH_9.2p1 dgxspark-testbed\r\n")
    try:
        sign = identity.ssh_banner_sign("gpu-01", "127.0.0.1", server.getsockname()[1])
    finally:
        thread.join(timeout=5)
        server.close()
    assert sign == "host gpu-01: its SSH server's banner names the testbed (SSH-2.0-OpenSSH_9.2p1 dgxspark-testbed)"


def test_a_real_hosts_banner_is_no_sign():
    server, thread = _banner_server(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n")
    try:
        assert identity.ssh_banner_sign("gpu-01", "127.0.0.1", server.getsockname()[1]) is None
    finally:
        thread.join(timeout=5)
        server.close()


class _Config:
    def __init__(self) -> None:
        import pytest

        self.stash = pytest.Stash()


def test_a_handover_needs_each_hosts_machine_id_to_be_its_nodes():
    config = _Config()
    seen = identity.of(config)
    seen.machine_ids.update({"gpu-01": "a" * 32, "gpu-02": "b" * 32, "gpu-03": ""})
    seen.node_machine_ids.update({"gpu-01": "a" * 32, "gpu-02": "c" * 32})
    assert identity.hardware_problems(config, ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]) == [
        f"host gpu-02: /etc/machine-id {'b' * 32} differs from Node gpu-02's machineID {'c' * 32}: the host checked "
        "and the Node checked are not one machine",
        "host gpu-03: its /etc/machine-id was not read in this run, so the machine handed over is not identified",
        "host gpu-04: its /etc/machine-id was not read in this run, so the machine handed over is not identified",
    ]
    assert identity.hardware_problems(config, ["gpu-01"]) == []
