"""Finish a run's bundle once results.json, report.html and junit.xml exist: summary, manifest, signature."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_dgxspark.report.manifest import ManifestError, write_manifest
from pytest_dgxspark.report.signing import SigningError, sign_manifest
from pytest_dgxspark.report.summary import SummaryError, write_summary


@dataclass(frozen=True)
class BundleOutcome:
    """What finishing the bundle wrote, and every problem met on the way (results.json is never touched)."""

    run_dir: Path
    written: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def finish_bundle(run_dir: Path, lang: str | None = None, sign_key: Path | None = None) -> BundleOutcome:
    """Write summary.html, then MANIFEST.sha256 over every other file, then its signature with sign_key.

    Each step runs even when an earlier one failed (an unsigned manifest is better than none); a failed
    step is reported in `problems`, naming the file and what went wrong.
    """
    written: list[str] = []
    problems: list[str] = []
    if not (run_dir / "results.json").is_file():
        return BundleOutcome(run_dir, (), (f"{run_dir}: no results.json, so no summary or manifest was written",))
    try:
        written.append(write_summary(run_dir, lang).name)
    except SummaryError as exc:
        problems.append(f"summary.html not written: {exc}")
    except Exception as exc:  # noqa: BLE001 - a broken summary must not cost the manifest
        problems.append(f"summary.html not written: {run_dir / 'results.json'}: {type(exc).__name__}: {exc}")
    try:
        manifest = write_manifest(run_dir)
        written.append(manifest.name)
    except (OSError, ManifestError) as exc:
        problems.append(f"MANIFEST.sha256 not written in {run_dir}: {exc}")
        manifest = None
    if sign_key is not None:
        if manifest is None:
            problems.append(f"MANIFEST.sha256.sig not written: there is no manifest to sign in {run_dir}")
        else:
            try:
                written.append(sign_manifest(run_dir, sign_key).name)
            except (OSError, SigningError) as exc:
                problems.append(f"MANIFEST.sha256.sig not written: {exc}")
    return BundleOutcome(run_dir, tuple(written), tuple(problems))
