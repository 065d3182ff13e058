"""summary.pdf: the handover summary printed to A4 by headless Chromium (offline, with a timeout)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PDF = "summary.pdf"
_NAMES = ("chromium", "chromium-browser")
TIMEOUT_S = 120.0


class PdfError(Exception):
    """The PDF could not be printed; the message names the file and what went wrong."""


def chromium() -> str | None:
    """The headless Chromium binary on PATH, or None when none is installed."""
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def command(binary: str, profile: Path, source: Path, target: Path) -> list[str]:
    """Chromium's print-to-PDF command: no network (every host name fails to resolve), no first-run work.

    --no-sandbox: the runner is often root, where Chromium refuses its sandbox; the page is our own static
    HTML (no script, no remote resource), opened from a file.
    """
    return [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
        "--disable-quic", "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
        "--no-pdf-header-footer", f"--print-to-pdf={target}", source.resolve().as_uri(),
    ]


def relative_links(pdf: Path, folder: Path) -> int:
    """Make the PDF's links into the bundle relative (Chromium writes every link as an absolute file:// URI of the
    machine that printed it, which breaks once the bundle is copied): `/URI (file:///.../run/evidence/x.json)` becomes
    `/URI (./././evidence/x.json)`, padded with `./` to the same length so the PDF's cross-reference offsets hold.
    Returns how many links were rewritten."""
    data = pdf.read_bytes()
    prefix = b"/URI (" + (folder.as_uri().rstrip("/") + "/").encode()
    count = data.count(prefix)
    if not count:
        return 0
    width = len(prefix) - len(b"/URI (")
    pad = b"./" * (width // 2) + (b"/" if width % 2 else b"")  # ".//" collapses like "./" in a relative path
    pdf.write_bytes(data.replace(prefix, b"/URI (" + pad))
    return count


def absolute_links(pdf: Path) -> list[str]:
    """The file:// URIs a PDF still links to (none in a bundle's summary.pdf)."""
    import re

    return sorted({m.decode("latin-1") for m in re.findall(rb"/URI \((file:[^)]*)\)", pdf.read_bytes())})


def print_pdf(source: Path, target: Path, timeout: float = TIMEOUT_S,
              stop: Callable[[], bool] | None = None) -> Path:
    """Print the HTML file source to target (A4, as its @page says); PdfError when Chromium is missing or fails.

    Atomic: Chromium prints to a temporary name; only a whole PDF (its header and its %%EOF trailer) is synced and
    renamed to target, so a full disk never leaves a truncated summary.pdf under its final name. stop() true (the
    run was interrupted) ends Chromium and prints nothing."""
    binary = chromium()
    if binary is None:
        raise PdfError("chromium is not installed (Debian: apt-get install chromium); "
                       "render it later with dgxspark-report pdf DIR")
    if not source.is_file():
        raise PdfError(f"{source}: no such file to print")
    partial = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    partial.unlink(missing_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="dgxspark-chromium-") as profile:
            proc = subprocess.Popen(command(binary, Path(profile), source, partial), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            try:
                err = _wait(proc, binary, source, timeout, stop)
            finally:
                _kill(proc)
        if proc.returncode != 0 or not partial.is_file() or not partial.read_bytes()[:5] == b"%PDF-":
            lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
            raise PdfError(f"{binary} --print-to-pdf of {source} exited {proc.returncode} without a PDF: "
                           f"{lines[-1] if lines else 'no output'}")
        if not whole_pdf(partial):
            raise PdfError(f"{binary} printed {source} only in part ({partial.stat().st_size} bytes, no %%EOF "
                           "trailer): a full disk? summary.pdf was not kept")
        relative_links(partial, source.resolve().parent)
        _sync(partial)
        partial.replace(target)
        _sync(target.parent)
    finally:
        partial.unlink(missing_ok=True)
    return target


def whole_pdf(path: Path) -> bool:
    """Whether path holds a PDF to its end: its header, and the %%EOF trailer in its last kilobyte."""
    try:
        with path.open("rb") as handle:
            head = handle.read(5)
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 1024))
            tail = handle.read()
    except OSError:
        return False
    return head == b"%PDF-" and b"%%EOF" in tail


def _sync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _wait(proc: subprocess.Popen[bytes], binary: str, source: Path, timeout: float,
          stop: Callable[[], bool] | None) -> bytes:
    """Chromium's stderr once it exits; PdfError past timeout or once stop() says the run is ending."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, err = proc.communicate(timeout=0.2)
            return err or b""
        except subprocess.TimeoutExpired:
            pass
        if stop is not None and stop():
            raise PdfError(f"not printed: the run was interrupted while {binary} printed {source}")
        if time.monotonic() > deadline:
            raise PdfError(f"{binary} did not print {source} within {timeout:.0f} s")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """End Chromium and every helper process it started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
