"""The bundle's integrity: manifest, attestation and CTRF checks in verify, signature round trip, finishing a bundle."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_dgxspark.report import bundle as bundle_module
from pytest_dgxspark.report import cli
from pytest_dgxspark.report.attestation import read_envelope, write_attestation
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.example import example_results, write_example_bundle, write_pytest_files
from pytest_dgxspark.report.manifest import check_manifest, read_manifest, sha256_file, write_manifest
from pytest_dgxspark.report.signing import key_problem

needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed")


@pytest.fixture
def no_chromium(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finish bundles as on a machine without Chromium (fast; the PDF path has tests of its own)."""
    monkeypatch.delenv("DGXSPARK_PDF", raising=False)
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)


@pytest.fixture
def bundle(tmp_path: Path, no_chromium: None) -> Path:
    run_dir = write_example_bundle(tmp_path / "20260105T010203Z-0a1b", example_results())
    write_pytest_files(run_dir, example_results())
    outcome = finish_bundle(run_dir, "both")
    assert outcome.problems == ()
    assert outcome.notes == (f"summary.pdf not written: chromium is not installed (Debian: apt-get install chromium); "
                             f"render it later with dgxspark-report pdf {run_dir}",)
    return run_dir


def test_a_finished_bundle_holds_every_file_and_the_manifest_lists_all_but_itself(bundle: Path) -> None:
    files = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file())
    assert {"results.json", "summary.html", "report.html", "junit.xml", "ctrf.json", "attestation.intoto.json",
            "MANIFEST.sha256"} <= set(files)
    assert "summary.pdf" not in files
    assert len([f for f in files if f.startswith("evidence/")]) == 30
    manifest = read_manifest(bundle)
    assert sorted(manifest) == [f for f in files if f != "MANIFEST.sha256"]
    assert list(manifest) == sorted(manifest)
    assert manifest["results.json"] == sha256_file(bundle / "results.json")
    results = json.loads((bundle / "results.json").read_text(encoding="utf-8"))
    for key in ("schema", "run", "verdict", "verdict_reasons", "root_causes", "lowest_broken_layer", "layers",
                "rules", "counts", "provenance", "waivers", "manual_checks", "timings"):
        assert key in results, key


def test_the_manifest_is_in_sha256sum_check_format(bundle: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum (coreutils) is not installed")
    done = subprocess.run(["sha256sum", "--strict", "-c", "MANIFEST.sha256"], cwd=bundle, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": OK") == len(read_manifest(bundle))


def test_verify_without_a_trust_anchor_prints_what_the_bundle_says_and_exits_unverified(
        bundle: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(bundle.parent)  # no sites/tirosh-home/allowed_signers here
    assert cli.main(["verify", str(bundle)]) == 3
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[:5] == [f"bundle:    {bundle}",
                       "run id:    20260105T010203Z-0a1b  (site tirosh-home, started 2026-01-05T01:02:03+00:00)",
                       "verdict:   INCOMPLETE", "scope:     full (every rule)",
                       "SIMULATED: yes — a testbed (never a handover acceptance)"]
    assert "signing:   unsigned — no signing key was given (--dgxspark-sign KEY)" in out
    assert f"manifest OK: {len(read_manifest(bundle))} files in {bundle} match MANIFEST.sha256" in out
    for name in ("summary.html", "ctrf.json", "junit.xml", "report.html"):
        assert f"{name} OK: agrees with results.json" in out
    assert captured.err.startswith("UNVERIFIED: the files agree with each other, but nothing says who made them: "
                                   "no --allowed-signers given and no sites/tirosh-home/allowed_signers in ")


def test_the_sites_allowed_signers_is_the_trust_anchor_when_none_is_given(
        bundle: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    site = bundle.parent / "sites" / "tirosh-home"
    site.mkdir(parents=True)
    (site / "allowed_signers").write_text("", encoding="utf-8")
    monkeypatch.chdir(bundle.parent)
    assert cli.main(["verify", str(bundle)]) == 1  # an unsigned bundle against the site's anchor
    assert f"{bundle / 'MANIFEST.sha256.sig'}: the bundle is unsigned (signing.json: no signing key was given " \
           "(--dgxspark-sign KEY))" in capsys.readouterr().err


def test_verify_fails_after_a_one_byte_change(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = bundle / "results.json"
    data = bytearray(target.read_bytes())
    data[10] ^= 0x01
    target.write_bytes(bytes(data))
    assert cli.main(["verify", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert f"manifest FAILED:\n  {bundle} does not match MANIFEST.sha256:" in err
    assert "  changed: results.json" in err
    assert f"  {bundle / 'attestation.intoto.json'}: changed: results.json (its sha256 differs from the attested digest)" in err


def test_verify_fails_after_a_removed_and_an_added_file_listing_each(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evidence = sorted((bundle / "evidence").iterdir())[0]
    evidence.unlink()
    (bundle / "evidence" / "extra.json").write_text("{}", encoding="utf-8")
    (bundle / "notes.txt").write_text("x", encoding="utf-8")
    assert cli.main(["verify", str(bundle)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert f"  removed: evidence/{evidence.name}" in err
    assert "  added: evidence/extra.json" in err
    assert "  added: notes.txt" in err
    check = check_manifest(bundle)
    assert (check.added, check.removed, check.changed) == (("evidence/extra.json", "notes.txt"), (f"evidence/{evidence.name}",), ())


def test_verify_of_a_directory_without_manifest_fails_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(tmp_path)]) == 1
    assert f"FAILED: {tmp_path / 'results.json'}: cannot be read" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps(example_results()), encoding="utf-8")
    assert cli.main(["verify", str(tmp_path)]) == 1
    assert f"manifest FAILED:\n  {tmp_path / 'MANIFEST.sha256'}: no MANIFEST.sha256 in this directory" in capsys.readouterr().err
    assert cli.main(["verify", str(tmp_path / "absent")]) == 2


@pytest.mark.slow
def test_re_rendering_the_summary_in_the_runs_language_keeps_the_manifest_valid(bundle: Path) -> None:
    before = (bundle / "summary.html").read_bytes()
    assert cli.main(["summary", str(bundle)]) == 0
    assert (bundle / "summary.html").read_bytes() == before
    assert check_manifest(bundle).ok
    assert cli.main(["summary", str(bundle), "--lang", "en", "-o", str(bundle.parent / "en.html")]) == 0
    assert 'lang="ko"' not in (bundle.parent / "en.html").read_text(encoding="utf-8").split("<body>")[1].split('id="matrix"')[0]


@pytest.mark.slow
def test_a_sealed_bundle_keeps_its_summary_when_another_language_is_asked_and_still_verifies(
        bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (bundle / "summary.html").read_bytes()
    assert cli.main(["summary", str(bundle), "--lang", "en"]) == 2
    assert capsys.readouterr().err == (
        f"FAILED: {bundle} is a sealed bundle (MANIFEST.sha256): a summary.html in lang en would no longer match its "
        "manifest and attestation (dgxspark-report verify would fail); give -o FILE to write it outside the bundle\n")
    assert (bundle / "summary.html").read_bytes() == before
    assert cli.main(["summary", str(bundle), "--lang", "both"]) == 0
    assert capsys.readouterr().out == f"{bundle / 'summary.html'} is already this rendering (lang both); the bundle is unchanged\n"
    assert cli.main(["verify", str(bundle)]) == 3  # consistent, no trust anchor: UNVERIFIED


def test_a_directory_without_a_manifest_gets_its_summary_rewritten_in_place(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    assert cli.main(["summary", str(run_dir), "--lang", "en"]) == 0
    assert capsys.readouterr().out == f"wrote {run_dir / 'summary.html'}\n"
    assert 'lang="ko"' not in (run_dir / "summary.html").read_text(encoding="utf-8").split("<body>")[1].split('id="matrix"')[0]


def test_dgxspark_pdf_off_skips_the_pdf_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGXSPARK_PDF", "off")
    monkeypatch.setattr(bundle_module, "chromium", lambda: pytest.fail("Chromium must not be looked for"))
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    outcome = finish_bundle(run_dir, "en")
    assert outcome.notes == (f"summary.pdf not written: DGXSPARK_PDF=off; render it later with dgxspark-report pdf {run_dir}",)
    assert outcome.problems == () and not (run_dir / "summary.pdf").exists()


def test_finishing_without_results_json_reports_it_and_writes_nothing(tmp_path: Path) -> None:
    outcome = finish_bundle(tmp_path)
    assert outcome.written == ()
    assert outcome.problems == (f"{tmp_path}: no results.json, so no summary or manifest was written",)


def test_a_broken_summary_is_reported_and_the_manifest_still_written(tmp_path: Path, no_chromium: None) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"run": {}}), encoding="utf-8")
    outcome = finish_bundle(tmp_path)
    assert outcome.written == ("signing.json", "attestation.intoto.json", "MANIFEST.sha256")
    assert outcome.problems == ("summary.html not written: results.json lacks verdict, rules; "
                                "the summary needs run, verdict and rules",
                                "ctrf.json not written: results.json lacks verdict, rules; "
                                "ctrf.json needs run, verdict and rules")
    statement = read_envelope(tmp_path)[1]
    assert statement["predicate"]["result"] == "FAILED"
    assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8")) == {"run": {}}
    assert check_manifest(tmp_path).ok


def test_a_file_that_is_not_a_key_is_refused_without_showing_its_content(tmp_path: Path) -> None:
    not_key = tmp_path / "notes.txt"
    not_key.write_text("hunter2 secret", encoding="utf-8")
    problem = key_problem(not_key)
    assert problem == (f"--dgxspark-sign {not_key}: not an SSH private key (or a .pub key held by ssh-agent); "
                       "expected e.g. ~/.ssh/id_ed25519")
    assert key_problem(tmp_path / "absent") == f"--dgxspark-sign {tmp_path / 'absent'}: no such key file"


@pytest.fixture
def signer(tmp_path: Path) -> tuple[Path, Path]:
    key = tmp_path / "keys" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "engineer", "-f", str(key)], check=True)
    public = key.with_suffix(".pub").read_text(encoding="utf-8").split()
    allowed = tmp_path / "keys" / "allowed_signers"
    allowed.write_text(f'engineer@vendor.example namespaces="dgxspark-report" {public[0]} {public[1]}\n',
                       encoding="utf-8")
    return key, allowed


@pytest.mark.slow
@needs_ssh_keygen
def test_a_signed_bundle_verifies_with_the_allowed_signers_and_fails_once_changed(
    tmp_path: Path, signer: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key, allowed = signer
    assert key_problem(key) is None
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)
    outcome = finish_bundle(run_dir, "ko", key)
    assert outcome.problems == ()
    assert outcome.written == ("summary.html", "ctrf.json", "signing.json", "attestation.intoto.json",
                               "MANIFEST.sha256", "MANIFEST.sha256.sig")
    assert "MANIFEST.sha256.sig" not in read_manifest(run_dir)

    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed)]) == 0
    out = capsys.readouterr().out
    assert "signature OK: MANIFEST.sha256 and attestation.intoto.json (DSSE) signed by engineer@vendor.example" in out
    assert "signer:    engineer@vendor.example (key SHA256:" in out and "\nsigned at: 20" in out
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed),
                     "--identity", "engineer@vendor.example"]) == 0
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed), "--identity", "someone@else"]) == 1
    capsys.readouterr()

    (run_dir / "summary.html").write_text("forged", encoding="utf-8")
    write_manifest(run_dir)  # a forger can rewrite the manifest (the attestation now disagrees), not its signature
    assert cli.main(["verify", str(run_dir)]) == 1
    assert "attestation.intoto.json: changed: summary.html" in capsys.readouterr().err
    write_attestation(run_dir)
    write_manifest(run_dir)  # ... and the attestation too: summary.html no longer says what results.json says
    assert cli.main(["verify", str(run_dir)]) == 1
    assert "summary.html FAILED:" in capsys.readouterr().err
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed)]) == 1
    assert "signature FAILED" in capsys.readouterr().err


@needs_ssh_keygen
def test_verify_with_allowed_signers_fails_on_an_unsigned_bundle(bundle: Path, signer: tuple[Path, Path],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", str(bundle), "--allowed-signers", str(signer[1])]) == 1
    assert f"signature FAILED:\n  {bundle / 'MANIFEST.sha256.sig'}: the bundle is unsigned" in capsys.readouterr().err


@needs_ssh_keygen
def test_a_signature_by_an_unlisted_key_fails(tmp_path: Path, signer: tuple[Path, Path], no_chromium: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    run_dir = write_example_bundle(tmp_path / "run", example_results())
    assert finish_bundle(run_dir, "en", other).problems == ()
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(signer[1])]) == 1
    assert f"made by no key listed in {signer[1]}" in capsys.readouterr().err
