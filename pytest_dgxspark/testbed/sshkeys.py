"""The testbed's SSH client key (ed25519, OpenSSH format)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from pytest_dgxspark.testbed.pki import write_private


def write_keypair(path: Path, comment: str = "dgxspark-testbed") -> str:
    """Write `path` (0600) and `path.pub`; return the public key line."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    line = f"{public} {comment}"
    write_private(path, private)
    path.with_name(path.name + ".pub").write_text(line + "\n")
    return line
