"""Finish a run's bundle once results.json, report.html and junit.xml exist: summary, PDF, CTRF, attestation,
manifest, signature."""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pytest_dgxspark.report import htmlagree, junitagree
from pytest_dgxspark.report.attestation import ATTESTATION, write_attestation
from pytest_dgxspark.report.ctrf import CTRF, CtrfError, write_ctrf
from pytest_dgxspark.report.manifest import ManifestError, write_manifest
from pytest_dgxspark.report.pdf import PDF, PdfError, chromium, print_pdf
from pytest_dgxspark.report.signing import (
    NAMESPACE,
    SIGNING,
    SigningError,
    public_fingerprint,
    sign_bytes,
    sign_manifest,
    signature_fingerprint,
)
from pytest_dgxspark.report.summary import SummaryError, write_summary

NO_CHROMIUM = ("summary.pdf not written: chromium is not installed (Debian: apt-get install chromium); "
               "render it later with dgxspark-report pdf {dir}")
# DGXSPARK_PDF=off skips the PDF (the project's own tests set it: Chromium costs a second or two a run).
PDF_ENV = "DGXSPARK_PDF"
PDF_OFF = "summary.pdf not written: DGXSPARK_PDF=off; render it later with dgxspark-report pdf {dir}"


@dataclass(frozen=True)
class BundleOutcome:
    """What finishing the bundle wrote, notes (e.g. no Chromium for the PDF), and every problem met on the way.

    results.json is never touched.
    """

    run_dir: Path
    written: tuple[str, ...]
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    unsigned: str | None = None  # why a bundle that was to be signed is not (signing.json says the same)

    @property
    def ok(self) -> bool:
        return not self.problems


def _step(name: str, action: Callable[[], Path], written: list[str], problems: list[str], where: Path) -> bool:
    """Run one writing step; a failure is a problem naming the file, and the next steps still run."""
    try:
        written.append(action().name)
        return True
    except (SummaryError, PdfError, CtrfError, ManifestError, SigningError) as exc:
        problems.append(f"{name} not written: {exc}")
    except OSError as exc:  # a full or read-only disk: the atomic write left no partial file behind
        problems.append(f"{name} not written ({exc.strerror or exc})")
    except Exception as exc:  # noqa: BLE001 - one broken file must not cost the rest of the bundle
        problems.append(f"{name} not written: {where}: {type(exc).__name__}: {exc}")
    return False


def html_leaks(run_dir: Path) -> list[str]:
    """The kinds and sources of secret values the run read that summary.html holds (values never named).

    The bundle's byte scan removes such a summary afterwards, but cannot see into the PDF's compressed text:
    a summary that holds a secret is never printed.
    """
    try:
        from pytest_dgxspark.data import redact
        from pytest_dgxspark.report.secretscan import scan_file
    except ImportError:  # pragma: no cover - the report package used without the core
        return []
    secrets = redact.LOG.secrets()
    leaks = scan_file(run_dir / "summary.html", secrets, "summary.html") if secrets else []
    return sorted({f"{leak.kind} read from {leak.source}" for leak in leaks})


def _write_signing(run_dir: Path, state: dict[str, object]) -> Path:
    from pytest_dgxspark.report.results import write_atomic

    target = run_dir / SIGNING
    write_atomic(target, json.dumps(state, indent=2, ensure_ascii=False) + "\n")
    return target


def _unsigned(reason: str) -> dict[str, object]:
    return {"state": "unsigned", "reason": reason}


def seal(run_dir: Path, sign_key: Path | None, written: list[str], problems: list[str]) -> str | None:
    """signing.json, then the attestation (DSSE, signed with sign_key), then MANIFEST.sha256 over every file, then
    its signature. A signature that cannot be made leaves the bundle unsigned and saying so (signing.json, the
    envelope without a signature), and its reason is returned (also among problems)."""
    from pytest_dgxspark.report.attestation import dsse_signature

    if sign_key is None:
        state = _unsigned("no signing key was given (--dgxspark-sign KEY)")
    else:
        state = {"state": "signed", "namespace": NAMESPACE, "signature": "MANIFEST.sha256.sig",
                 "key": public_fingerprint(sign_key), "signed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}

    def sign(data: bytes) -> dict[str, str]:
        armored = sign_bytes(sign_key, data)  # type: ignore[arg-type]
        return dsse_signature(armored, signature_fingerprint(armored) or str(state.get("key")))

    unsigned: str | None = None
    _step(SIGNING, lambda: _write_signing(run_dir, state), written, problems, run_dir)
    try:
        written.append(write_attestation(run_dir, keep_predicate=True, sign=sign if sign_key else None).name)
    except SigningError as exc:
        unsigned = f"the attestation could not be signed: {exc}"
        _write_signing(run_dir, _unsigned(unsigned))
        _step(ATTESTATION, lambda: write_attestation(run_dir, keep_predicate=True), written, problems, run_dir)
    except Exception:  # noqa: BLE001 - reported by _step below, as every other file
        _step(ATTESTATION, lambda: write_attestation(run_dir, keep_predicate=True), written, problems, run_dir)
    if not _step("MANIFEST.sha256", lambda: write_manifest(run_dir), written, problems, run_dir):
        if sign_key is not None:
            problems.append(f"MANIFEST.sha256.sig not written: there is no manifest to sign in {run_dir}")
        return unsigned or "no manifest"
    if sign_key is not None and unsigned is None:
        try:
            written.append(sign_manifest(run_dir, sign_key).name)
        except (SigningError, OSError) as exc:
            unsigned = f"MANIFEST.sha256 could not be signed: {exc}"
            _write_signing(run_dir, _unsigned(unsigned))
            write_attestation(run_dir, keep_predicate=True)
            write_manifest(run_dir)
    if unsigned is not None:
        (run_dir / "MANIFEST.sha256.sig").unlink(missing_ok=True)
        problems.append(f"MANIFEST.sha256.sig not written, the bundle is unsigned ({SIGNING} says why): {unsigned}")
    return unsigned


def agree_derived(run_dir: Path, written: list[str], problems: list[str]) -> None:
    """pytest's own files follow results.json: report.html's rows and header, junit.xml's elements (and its schema)."""
    for name, module in ((htmlagree.REPORT, htmlagree), (junitagree.JUNIT, junitagree)):
        if not (run_dir / name).is_file():
            continue
        try:
            module.agree(run_dir)
        except (OSError, ValueError, SyntaxError, htmlagree.ReportHtmlError) as exc:
            problems.append(f"{name} kept as pytest wrote it, not brought in line with results.json: {exc}")


def finish_bundle(run_dir: Path, lang: str | None = None, sign_key: Path | None = None,
                  stop: Callable[[], bool] | None = None) -> BundleOutcome:
    """Write summary.html, summary.pdf (when Chromium is installed), ctrf.json, attestation.intoto.json,
    then MANIFEST.sha256 over every other file, then its signature with sign_key.

    stop() true (the run is being interrupted) ends a PDF being printed. Each step runs even when an earlier one failed (an unsigned manifest is better than none); a failed
    step is reported in `problems`, naming the file and what went wrong.
    """
    written: list[str] = []
    problems: list[str] = []
    notes: list[str] = []
    results = run_dir / "results.json"
    if not results.is_file():
        return BundleOutcome(run_dir, (), (f"{run_dir}: no results.json, so no summary or manifest was written",))
    (run_dir / ATTESTATION).unlink(missing_ok=True)  # a fresh run gets a fresh predicate
    agree_derived(run_dir, written, problems)
    summary = _step("summary.html", lambda: write_summary(run_dir, lang), written, problems, results)
    leaks = html_leaks(run_dir) if summary else []
    if leaks:
        problems.append(f"{PDF} not printed: summary.html holds a secret value the run read ({'; '.join(leaks)}); "
                        "the bundle's secret scan removes it")
    elif summary and os.environ.get(PDF_ENV) == "off":
        notes.append(PDF_OFF.format(dir=run_dir))
    elif summary and chromium() is None:
        notes.append(NO_CHROMIUM.format(dir=run_dir))
    elif summary:
        _step(PDF, lambda: print_pdf(run_dir / "summary.html", run_dir / PDF, stop=stop), written, problems, run_dir)
    _step(CTRF, lambda: write_ctrf(run_dir), written, problems, results)
    unsigned = seal(run_dir, sign_key, written, problems)
    return BundleOutcome(run_dir, tuple(written), tuple(problems), tuple(notes), unsigned)
