"""summary.pdf: the handover summary printed to A4 by headless Chromium (offline, with a timeout)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
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


def print_pdf(source: Path, target: Path, timeout: float = TIMEOUT_S) -> Path:
    """Print the HTML file source to target (A4, as its @page says); PdfError when Chromium is missing or fails."""
    binary = chromium()
    if binary is None:
        raise PdfError("chromium is not installed (Debian: apt-get install chromium); "
                       "render it later with dgxspark-report pdf DIR")
    if not source.is_file():
        raise PdfError(f"{source}: no such file to print")
    partial = target.with_name(target.name + ".tmp")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="dgxspark-chromium-") as profile:
        proc = subprocess.Popen(command(binary, Path(profile), source, partial), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill(proc)
            partial.unlink(missing_ok=True)
            raise PdfError(f"{binary} did not print {source} within {timeout:.0f} s") from exc
        finally:
            _kill(proc)
    if proc.returncode != 0 or not partial.is_file() or not partial.read_bytes()[:5] == b"%PDF-":
        partial.unlink(missing_ok=True)
        lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        raise PdfError(f"{binary} --print-to-pdf of {source} exited {proc.returncode} without a PDF: "
                       f"{lines[-1] if lines else 'no output'}")
    partial.replace(target)
    return target


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """End Chromium and every helper process it started (its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
