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
