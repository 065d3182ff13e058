"""Builds the testbed's native artefacts (mock libnvidia-ml.so.1, daemon stand-in) once, cached by source hash."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def default_cache_dir() -> Path:
    """Where built artefacts live unless told otherwise: $DGXSPARK_TESTBED_CACHE or ~/.cache/dgxspark-testbed."""
    env = os.environ.get("DGXSPARK_TESTBED_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dgxspark-testbed"


def _build(source: str, output: str, flags: list[str], cache_dir: Path) -> Path:
    src = _HERE / source
    digest = hashlib.sha256(src.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    target = Path(cache_dir) / digest / output
    if target.is_file():
        return target
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        raise RuntimeError(f"building {source} needs a C compiler: gcc (or $CC) was not found on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{output}.")
    os.close(fd)
    proc = subprocess.run([compiler, "-O2", "-Wall", *flags, "-o", tmp, str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise RuntimeError(f"compiling {src} must succeed, {compiler} exited {proc.returncode}:\n{proc.stderr}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)  # atomic: concurrent builders end with the same file
    return target


def build_nvml_mock(cache_dir: Path | None = None) -> Path:
    """Compile the mock libnvidia-ml.so.1 (once per source hash) and return its path."""
    flags = ["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1"]
    return _build("nvml_mock.c", "libnvidia-ml.so.1", flags, cache_dir or default_cache_dir())


def build_sleeper(cache_dir: Path | None = None) -> Path:
    """Compile the daemon stand-in (once per source hash) and return its path."""
    return _build("sleeper.c", "sleeper", [], cache_dir or default_cache_dir())


def build_shim_client(python: str, cache_dir: Path | None = None) -> Path:
    """Compile the shim client (native/shimclient.c) for a node whose python3 is `python` and return its path."""
    if not python.startswith("/") or '"' in python or "\\" in python:
        raise ValueError(f"the shim client's python must be an absolute path without quotes, got {python!r}")
    return _build("shimclient.c", "shimclient", [f'-DSHIM_PYTHON="{python}"'], cache_dir or default_cache_dir())
