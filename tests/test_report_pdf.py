"""summary.pdf: printed by headless Chromium with a timeout; `dgxspark-report pdf DIR` prints it later and re-seals."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_dgxspark.report import bundle as bundle_module
from pytest_dgxspark.report import cli
from pytest_dgxspark.report import pdf as pdf_module
from pytest_dgxspark.report.attestation import read_envelope
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.example import example_results, write_example_bundle
from pytest_dgxspark.report.manifest import read_manifest
from pytest_dgxspark.report.pdf import PdfError, chromium, print_pdf

# slow: Chromium prints every summary (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

needs_chromium = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed")


@pytest.fixture(autouse=True)
def pdf_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests print: undo tests/conftest.py's DGXSPARK_PDF=off."""
    monkeypatch.delenv("DGXSPARK_PDF", raising=False)


@pytest.fixture
def unprinted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bundle finished on a machine without Chromium."""
    run_dir = write_example_bundle(tmp_path / "20260105T010203Z-0a1b", example_results(simulated=False))
    with monkeypatch.context() as patch:
        patch.setattr(bundle_module, "chromium", lambda: None)
        outcome = finish_bundle(run_dir, "both")
    assert outcome.problems == () and "summary.pdf" not in outcome.written
    return run_dir


def _signer(tmp_path: Path) -> tuple[Path, Path]:
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2]
    allowed = key.parent / "allowed_signers"
    allowed.write_text(f'engineer@vendor.example namespaces="dgxspark-report" {kind} {blob}\n', encoding="utf-8")
    return key, allowed


@needs_chromium
def test_a_bundle_finished_with_chromium_holds_the_pdf_in_manifest_and_attestation(tmp_path: Path) -> None:
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    outcome = finish_bundle(run_dir, "en")
    assert outcome.problems == () and outcome.notes == ()
    assert outcome.written == ("summary.html", "summary.pdf", "ctrf.json", "signing.json", "attestation.intoto.json", "MANIFEST.sha256")
    assert (run_dir / "summary.pdf").read_bytes().startswith(b"%PDF-")
    assert "summary.pdf" in read_manifest(run_dir)
    statement = read_envelope(run_dir)[1]
    assert "summary.pdf" in [s["name"] for s in statement["subject"]]
    assert not list(run_dir.glob("*.tmp"))


@needs_chromium
def test_pdf_prints_a_bundle_later_and_re_seals_it(unprinted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["pdf", str(unprinted)]) == 0
    assert capsys.readouterr().out == (f"wrote {unprinted / 'summary.pdf'}; re-sealed: signing.json, attestation.intoto.json, "
                                       "MANIFEST.sha256\n")
    assert "summary.pdf" in read_manifest(unprinted)
    assert (unprinted / "summary.pdf").stat().st_mode & 0o777 == 0o640
    assert cli.main(["verify", str(unprinted)]) == 3  # consistent, no trust anchor: UNVERIFIED


@needs_chromium
@needs_ssh_keygen
def test_pdf_of_a_signed_bundle_needs_the_key_and_re_signs_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    key, allowed = _signer(tmp_path)
    run_dir = write_example_bundle(tmp_path / "run", example_results(simulated=False))
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)
    assert finish_bundle(run_dir, "ko", key).problems == ()
    monkeypatch.undo()
    assert cli.main(["pdf", str(run_dir)]) == 1
    assert capsys.readouterr().err == (
        f"FAILED: {run_dir} is signed (MANIFEST.sha256.sig); give --sign KEY to re-sign the rewritten manifest, "
        "or -o FILE to print the PDF outside the bundle\n")
    assert not (run_dir / "summary.pdf").exists()
    assert cli.main(["pdf", str(run_dir), "--sign", str(key)]) == 0
    assert "re-sealed: signing.json, attestation.intoto.json, MANIFEST.sha256, MANIFEST.sha256.sig" in capsys.readouterr().out
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed)]) == 0


def test_pdf_refuses_to_re_seal_a_bundle_that_no_longer_matches_its_manifest(
    unprinted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (unprinted / "results.json").write_text("{}", encoding="utf-8")
    assert cli.main(["pdf", str(unprinted)]) == 1
    assert capsys.readouterr().err == (f"FAILED: {unprinted} does not match its MANIFEST.sha256 (changed: results.json); "
                                       f"refusing to re-seal it (see dgxspark-report verify {unprinted})\n")
    assert not (unprinted / "summary.pdf").exists()


@needs_chromium
def test_pdf_to_another_file_leaves_the_bundle_as_it_is(unprinted: Path, tmp_path: Path) -> None:
    target = tmp_path / "print.pdf"
    assert cli.main(["pdf", str(unprinted), "-o", str(target)]) == 0
    assert target.read_bytes().startswith(b"%PDF-") and not (unprinted / "summary.pdf").exists()
    assert cli.main(["verify", str(unprinted)]) == 3  # consistent, no trust anchor: UNVERIFIED


def test_pdf_without_chromium_says_how_to_get_it(unprinted: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pdf_module, "chromium", lambda: None)
    assert cli.main(["pdf", str(unprinted)]) == 1
    assert capsys.readouterr().err == ("FAILED: chromium is not installed (Debian: apt-get install chromium); "
                                       "render it later with dgxspark-report pdf DIR\n")


def _fake_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    binary = tmp_path / "fake-chromium"
    binary.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    binary.chmod(0o755)
    monkeypatch.setattr(pdf_module, "chromium", lambda: str(binary))


def test_a_chromium_that_hangs_is_ended_at_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_chromium(tmp_path, monkeypatch, "sleep 60 & wait")
    source = tmp_path / "summary.html"
    source.write_text("<html></html>", encoding="utf-8")
    with pytest.raises(PdfError, match=r"fake-chromium did not print .*summary.html within 1 s$"):
        print_pdf(source, tmp_path / "summary.pdf", timeout=1)
    assert not (tmp_path / "summary.pdf").exists() and not (tmp_path / "summary.pdf.tmp").exists()


def test_a_chromium_that_fails_is_reported_with_its_last_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_chromium(tmp_path, monkeypatch, "echo 'starting' >&2; echo 'ERROR: cannot open display' >&2; exit 3")
    source = tmp_path / "summary.html"
    source.write_text("<html></html>", encoding="utf-8")
    with pytest.raises(PdfError, match=r"--print-to-pdf of .*summary.html exited 3 without a PDF: ERROR: cannot open display$"):
        print_pdf(source, tmp_path / "summary.pdf")


def test_chromium_is_told_to_resolve_no_host_and_print_without_headers() -> None:
    command = pdf_module.command("chromium", Path("/p"), Path("/r/summary.html"), Path("/r/summary.pdf"))
    assert "--host-resolver-rules=MAP * ~NOTFOUND" in command and "--no-pdf-header-footer" in command
    assert command[-2:] == ["--print-to-pdf=/r/summary.pdf", "file:///r/summary.html"]


def test_a_failed_print_is_a_bundle_problem_and_the_rest_of_the_bundle_is_still_sealed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_chromium(tmp_path, monkeypatch, "echo 'Trace/breakpoint trap' >&2; exit 133")
    monkeypatch.setattr(bundle_module, "chromium", pdf_module.chromium)
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    outcome = finish_bundle(run_dir, "en")
    assert outcome.written == ("summary.html", "ctrf.json", "signing.json", "attestation.intoto.json", "MANIFEST.sha256")
    assert len(outcome.problems) == 1
    assert outcome.problems[0].startswith("summary.pdf not written: ")
    assert outcome.problems[0].endswith("exited 133 without a PDF: Trace/breakpoint trap")
    assert cli.main(["verify", str(run_dir)]) == 3  # consistent, no trust anchor: UNVERIFIED


def test_verify_fails_on_a_summary_pdf_that_is_not_a_pdf(unprinted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_dgxspark.report.attestation import write_attestation
    from pytest_dgxspark.report.manifest import write_manifest

    (unprinted / "summary.pdf").write_text("<html>not a pdf</html>", encoding="utf-8")
    write_attestation(unprinted, keep_predicate=True)
    write_manifest(unprinted)
    assert cli.main(["verify", str(unprinted)]) == 1
    assert f"summary.pdf FAILED:\n  {unprinted / 'summary.pdf'}: not a PDF" in capsys.readouterr().err


def test_a_summary_holding_a_secret_the_run_read_is_never_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_dgxspark.data import redact

    monkeypatch.setattr(bundle_module, "chromium", lambda: pytest.fail("a leaking summary must not be printed"))
    log = redact.reset()
    try:
        log.remember("K10abcdef0123456789::server:cafe", "join token", "sites/tirosh-home/rke2/vars.yml")
        results = example_results()
        results["rules"][0]["title"] = "token K10abcdef0123456789::server:cafe seen"  # slipped past redaction
        run_dir = write_example_bundle(tmp_path / "run", results)
        outcome = finish_bundle(run_dir, "en")
    finally:
        redact.reset()
    assert outcome.problems == ("summary.pdf not printed: summary.html holds a secret value the run read "
                                "(join token read from sites/tirosh-home/rke2/vars.yml); the bundle's secret scan removes it",)
    assert "K10abcdef" not in outcome.problems[0] and not (run_dir / "summary.pdf").exists()
