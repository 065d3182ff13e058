"""Sign MANIFEST.sha256 with the engineer's SSH key and verify it (ssh-keygen -Y)."""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pytest_dgxspark.report.manifest import MANIFEST, SIGNATURE

NAMESPACE = "dgxspark-report"
_KEY_MARKERS = ("-----BEGIN OPENSSH PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----",
                "-----BEGIN EC PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----")
_PUBLIC_PREFIXES = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@openssh.com ",
                    "sk-ecdsa-sha2-")


class SigningError(Exception):
    """Signing or verifying the manifest could not be done."""


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome of ssh-keygen -Y verify on a bundle."""

    ok: bool
    identity: str
    message: str


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if not found:
        raise SigningError("ssh-keygen is required to sign or verify the manifest; install openssh-client")
    return found


def key_problem(key: Path) -> str | None:
    """Why key cannot sign (missing, unreadable, not an SSH key), or None when it looks usable.

    A private key signs directly; a public key (.pub) signs through the ssh-agent that holds it.
    The key's content never appears in the message.
    """
    if not key.is_file():
        return f"--dgxspark-sign {key}: no such key file"
    try:
        head = key.read_text(encoding="utf-8", errors="replace")[:200].lstrip()
    except OSError as exc:
        return f"--dgxspark-sign {key}: cannot read the key file ({exc.strerror})"
    if head.startswith(_KEY_MARKERS) or head.startswith(_PUBLIC_PREFIXES):
        return None
    return (f"--dgxspark-sign {key}: not an SSH private key (or a .pub key held by ssh-agent); "
            "expected e.g. ~/.ssh/id_ed25519")


def sign_manifest(run_dir: Path, key: Path, timeout: float = 300.0) -> Path:
    """Write run_dir/MANIFEST.sha256.sig with ssh-keygen -Y sign -n dgxspark-report; return its path."""
    keygen = _ssh_keygen()
    manifest = run_dir / MANIFEST
    signature = run_dir / SIGNATURE
    signature.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            [keygen, "-Y", "sign", "-f", str(key), "-n", NAMESPACE, str(manifest)],
            capture_output=True, text=True, timeout=timeout, check=False,  # stdin: a passphrase may be typed
        )
    except subprocess.TimeoutExpired as exc:
        raise SigningError(f"ssh-keygen -Y sign with {key} did not finish within {timeout:.0f} s") from exc
    if done.returncode != 0 or not signature.is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise SigningError(
            f"ssh-keygen -Y sign -f {key} -n {NAMESPACE} {manifest} exited {done.returncode}: "
            f"{detail[-1] if detail else 'no output'}"
        )
    return signature


def find_identities(run_dir: Path, allowed_signers: Path) -> list[str]:
    """The identities of allowed_signers whose key made the bundle's signature (ssh-keygen -Y find-principals)."""
    done = subprocess.run(
        [_ssh_keygen(), "-Y", "find-principals", "-s", str(run_dir / SIGNATURE), "-f", str(allowed_signers)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def verify_signature(run_dir: Path, allowed_signers: Path, identity: str | None = None) -> SignatureCheck:
    """Check MANIFEST.sha256.sig against allowed_signers for identity (found from the signature when None)."""
    signature = run_dir / SIGNATURE
    if not signature.is_file():
        return SignatureCheck(False, identity or "", f"{signature}: no signature in this bundle")
    if not allowed_signers.is_file():
        raise SigningError(f"--allowed-signers {allowed_signers}: no such file")
    if identity is None:
        found = find_identities(run_dir, allowed_signers)
        if not found:
            return SignatureCheck(False, "", f"{signature}: made by no key listed in {allowed_signers}")
        identity = found[0]
    manifest_bytes = (run_dir / MANIFEST).read_bytes()
    done = subprocess.run(
        [_ssh_keygen(), "-Y", "verify", "-f", str(allowed_signers), "-I", identity, "-n", NAMESPACE,
         "-s", str(signature)],
        input=manifest_bytes, capture_output=True, timeout=60, check=False,
    )
    output = (done.stdout + done.stderr).decode("utf-8", errors="replace").strip()
    last = output.splitlines()[-1] if output else "no output"
    return SignatureCheck(done.returncode == 0, identity, last)


SIGNING = "signing.json"  # who signed the bundle, with which key and when (inside the manifest), or why it is unsigned


def _sign_file(keygen: str, key: Path, path: Path, timeout: float) -> Path:
    """ssh-keygen -Y sign of one file; its .sig beside it; SigningError naming the reason."""
    target = path.with_name(path.name + ".sig")
    target.unlink(missing_ok=True)
    try:
        done = subprocess.run([keygen, "-Y", "sign", "-f", str(key), "-n", NAMESPACE, str(path)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise SigningError(f"ssh-keygen -Y sign with {key} did not finish within {timeout:.0f} s") from exc
    if done.returncode != 0 or not target.is_file():
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise SigningError(f"ssh-keygen -Y sign -f {key} -n {NAMESPACE} exited {done.returncode}: "
                           f"{detail[-1] if detail else 'no output'}")
    return target


def sign_bytes(key: Path, data: bytes, timeout: float = 300.0) -> str:
    """The armored SSH signature (namespace dgxspark-report) of data by key."""
    import tempfile

    keygen = _ssh_keygen()
    with tempfile.TemporaryDirectory(prefix="dgxspark-sign-") as folder:
        path = Path(folder) / "payload"
        path.write_bytes(data)
        return _sign_file(keygen, key, path, timeout).read_text(encoding="ascii")


def probe(key: Path, timeout: float = 60.0) -> str | None:
    """Why key cannot sign here (a passphrase and no terminal or agent, a missing key), or None when a signature of a
    probe succeeded: the bundle knows before it is sealed whether it will be signed."""
    problem = key_problem(key)
    if problem:
        return problem
    try:
        sign_bytes(key, b"dgxspark-report signing probe\n", timeout)
    except (SigningError, OSError) as exc:
        return str(exc)
    return None


def signature_fingerprint(armored: str) -> str | None:
    """The SHA256 fingerprint of the public key inside an armored SSH signature (SSHSIG), or None if unreadable."""
    import base64
    import hashlib
    import struct

    body = "".join(line for line in armored.strip().splitlines() if not line.startswith("-----"))
    try:
        blob = base64.b64decode(body, validate=False)
        if blob[:6] != b"SSHSIG":
            return None
        (length,) = struct.unpack(">I", blob[10:14])
        public = blob[14:14 + length]
    except (ValueError, struct.error):
        return None
    return "SHA256:" + base64.b64encode(hashlib.sha256(public).digest()).decode().rstrip("=")


def verify_bytes(data: bytes, armored: str, allowed_signers: Path, identity: str) -> SignatureCheck:
    """ssh-keygen -Y verify of data against an armored signature for identity in allowed_signers."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dgxspark-verify-") as folder:
        sig = Path(folder) / "data.sig"
        sig.write_text(armored, encoding="ascii")
        done = subprocess.run(
            [_ssh_keygen(), "-Y", "verify", "-f", str(allowed_signers), "-I", identity, "-n", NAMESPACE,
             "-s", str(sig)], input=data, capture_output=True, timeout=60, check=False)
    output = (done.stdout + done.stderr).decode("utf-8", errors="replace").strip()
    return SignatureCheck(done.returncode == 0, identity, output.splitlines()[-1] if output else "no output")


def principals(armored: str, allowed_signers: Path) -> list[str]:
    """The identities of allowed_signers whose key made an armored signature."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dgxspark-verify-") as folder:
        sig = Path(folder) / "data.sig"
        sig.write_text(armored, encoding="ascii")
        done = subprocess.run([_ssh_keygen(), "-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)],
                              capture_output=True, text=True, timeout=60, check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def public_fingerprint(key: Path) -> str | None:
    """The SHA256 fingerprint of key (its .pub beside it, or the private key itself), None if ssh-keygen cannot say."""
    for candidate in (key.with_name(key.name + ".pub"), key):
        if candidate.is_file():
            done = subprocess.run([_ssh_keygen(), "-l", "-E", "sha256", "-f", str(candidate)], capture_output=True,
                                  text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
            parts = done.stdout.split()
            if done.returncode == 0 and len(parts) > 1:
                return parts[1]
    return None
