"""Per-testbed PKI: a CA, API server certificates, client certificates, tokens and the kubeconfig."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    """A PEM certificate and its PEM private key."""

    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


# The testbed's mark in its CA and serving certificate (organizational unit): a sign the API user cannot remove (the
# suite reads it from the kubeconfig's CA and from the certificate the API serves; judge/identity.py).
TESTBED_UNIT = "dgxspark-testbed"


def _name(common_name: str, organization: str | None = None, marked: bool = False) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    if marked:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, TESTBED_UNIT))
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)


def make_ca(common_name: str) -> Pair:
    """A self-signed CA like RKE2's `rke2-server-ca@<epoch>`."""
    key = _key()
    name = _name(common_name, marked=True)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def _issue(ca: Pair, subject: x509.Name, usage: ExtendedKeyUsageOID, sans: list[x509.GeneralName] | None,
           days: float = 365) -> Pair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    key = _key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return Pair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key))


def server_cert(ca: Pair, ips: list[str], dns: list[str]) -> Pair:
    """The API server's serving certificate, with the node IP(s) and names as SANs."""
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(name) for name in dns]
    return _issue(ca, _name("kube-apiserver", marked=True), ExtendedKeyUsageOID.SERVER_AUTH, sans)


def client_cert(ca: Pair, user: str, group: str, days: float = 365) -> Pair:
    """A client certificate (CN = user, O = group), like RKE2's `system:admin` / `system:masters`, valid `days`."""
    return _issue(ca, _name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH, None, days=days + 5 / 1440)


def rke2_node_certs(server: bool, days_left: float) -> dict[str, bytes]:
    """A node's RKE2 certificate files (public parts; RKE2's names), its leaves expiring in `days_left` days (RKE2
    issues them for 365; +5 minutes for the back-dated start), the CAs for ten years."""
    server_ca, client_ca = make_ca("rke2-server-ca"), make_ca("rke2-client-ca")
    files = {"/var/lib/rancher/rke2/agent/server-ca.crt": server_ca.cert,
             "/var/lib/rancher/rke2/agent/client-ca.crt": client_ca.cert}
    leaves = {"agent/client-kubelet.crt": ("system:node", ExtendedKeyUsageOID.CLIENT_AUTH),
              "agent/serving-kubelet.crt": ("kubelet", ExtendedKeyUsageOID.SERVER_AUTH),
              "agent/client-kube-proxy.crt": ("system:kube-proxy", ExtendedKeyUsageOID.CLIENT_AUTH),
              "agent/client-rke2-controller.crt": ("system:rke2-controller", ExtendedKeyUsageOID.CLIENT_AUTH)}
    if server:
        files.update({"/var/lib/rancher/rke2/server/tls/server-ca.crt": server_ca.cert,
                      "/var/lib/rancher/rke2/server/tls/client-ca.crt": client_ca.cert})
        leaves.update({"server/tls/serving-kube-apiserver.crt": ("kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH),
                       "server/tls/client-kube-apiserver.crt": ("system:apiserver", ExtendedKeyUsageOID.CLIENT_AUTH),
                       "server/tls/client-admin.crt": ("system:admin", ExtendedKeyUsageOID.CLIENT_AUTH),
                       "server/tls/client-controller.crt": ("system:kube-controller-manager",
                                                            ExtendedKeyUsageOID.CLIENT_AUTH),
                       "server/tls/client-scheduler.crt": ("system:kube-scheduler", ExtendedKeyUsageOID.CLIENT_AUTH)})
    for name, (cn, usage) in leaves.items():
        ca = server_ca if usage == ExtendedKeyUsageOID.SERVER_AUTH else client_ca
        files[f"/var/lib/rancher/rke2/{name}"] = _issue(ca, _name(cn), usage, None,
                                                        days=days_left + 5 / 1440).cert
    return files


def new_token() -> str:
    """A random bearer token in the `<id>.<secret>` shape."""
    return f"{secrets.token_hex(3)}.{secrets.token_hex(8)}"


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file readable by its owner only."""
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(raw)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_entry(name: str, server: str, ca: Pair, client: Pair) -> dict[str, Any]:
    """One cluster/user/context triple, all named `name` (never `default`)."""
    return {
        "cluster": {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca.cert)}},
        "user": {"name": name, "user": {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)}},
        "context": {"name": name, "context": {"cluster": name, "user": name}},
    }


def write_kubeconfig(path: Path, entries: list[dict[str, Any]], current: str) -> None:
    """Write a kubeconfig holding the given entries, `current` as current-context."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [e["cluster"] for e in entries],
        "users": [e["user"] for e in entries],
        "contexts": [e["context"] for e in entries],
        "current-context": current,
    }
    write_private(path, yaml.safe_dump(config, sort_keys=False))
