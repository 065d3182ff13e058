"""dgxspark-report verify is a verifier: every forgery of the handover audit fails it, a bundle without a trust anchor is
UNVERIFIED (never 0), a signing step that fails exits non-zero and leaves the bundle saying it is unsigned, and the
three-command check of docs/report.md holds without this project.

Two real suite runs against the testbed, made once for the module: healthy (signed with a passphrase key and no
terminal: the signing fails) and device-plugin-crashloop (signed); each test forges a copy of them.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.report import cli, htmlagree
from pytest_dgxspark.report.attestation import ATTESTATION, envelope, read_envelope, write_attestation
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.manifest import write_manifest
from pytest_dgxspark.report.pdf import chromium
from pytest_dgxspark.report.signing import sign_manifest
from tests.conftest import REPO

pytestmark = [
    pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server"),
    pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed"),
]
IDENTITY = "engineer@vendor.example"


def _key(folder: Path, name: str, passphrase: str = "") -> Path:
    key = folder / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", name, "-f", str(key)], check=True)
    return key


def _run(report_dir: Path, scenario: str, key: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DGXSPARK_PDF", "SSH_AUTH_SOCK", "DISPLAY", "SSH_ASKPASS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--testbed", scenario, "--report-dir", str(report_dir),
         "-p", "no:cacheprovider", "-q", "--no-header", "--dgxspark-sign", str(key)],
        cwd=REPO, capture_output=True, text=True, timeout=300, env=env,
        stdin=subprocess.DEVNULL, start_new_session=True,  # no terminal to type a passphrase on
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    keys = tmp_path_factory.mktemp("keys")
    good, locked, other = _key(keys, "id_good"), _key(keys, "id_locked", "a passphrase"), _key(keys, "id_other")
    allowed = keys / "allowed_signers"
    kind, blob = good.with_name("id_good.pub").read_text(encoding="utf-8").split()[:2]
    allowed.write_text(f'{IDENTITY} namespaces="dgxspark-report" {kind} {blob}\n', encoding="utf-8")
    runs = tmp_path_factory.mktemp("runs")
    healthy = _run(runs / "healthy", "healthy", locked)
    crash = _run(runs / "crash", "device-plugin-crashloop", good)
    return {"allowed": allowed, "good": good, "other": other, "healthy": healthy, "crash": crash,
            "healthy_dir": (runs / "healthy" / "latest").resolve(), "crash_dir": (runs / "crash" / "latest").resolve()}


@pytest.fixture
def crash(made: dict[str, Any], tmp_path: Path) -> Path:
    """A fresh copy of the signed device-plugin-crashloop bundle to forge."""
    assert made["crash"].returncode == 1, made["crash"].stdout[-3000:]
    return Path(shutil.copytree(made["crash_dir"], tmp_path / made["crash_dir"].name))


def _verify(run_dir: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = cli.main(["verify", str(run_dir), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def _reseal(run_dir: Path, key: Path | None) -> None:
    """What a forger does after changing a file: attest it again, list it in the manifest again, sign with own key."""
    write_attestation(run_dir, keep_predicate=True)
    write_manifest(run_dir)
    if key is not None:
        sign_manifest(run_dir, key)
    else:
        (run_dir / "MANIFEST.sha256.sig").unlink(missing_ok=True)


@pytest.mark.slow
def test_a_signed_bundle_verifies_against_its_trust_anchor_and_prints_what_it_says(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 0, err
    run_id = json.loads((crash / "results.json").read_text())["run"]["id"]
    lines = out.splitlines()
    assert lines[1].startswith(f"run id:    {run_id}  (site tirosh-home, started ")
    assert lines[2:5] == ["verdict:   REJECTED", "scope:     full (every rule)",
                          "SIMULATED: yes — --testbed device-plugin-crashloop (never a handover acceptance)"]
    assert f"signer:    {IDENTITY} (key SHA256:" in out and "\nsigned at: 20" in out
    for name in ("summary.html", "ctrf.json", "junit.xml", "report.html") + (("summary.pdf",) if chromium() else ()):
        assert f"{name} OK: agrees with results.json" in out
    assert lines[-1].startswith(f"VERIFIED: {run_id} says REJECTED (SIMULATED)")


@pytest.mark.slow
def test_without_a_trust_anchor_verify_prints_unverified_and_exits_non_zero(
        crash: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _verify(crash, capsys)
    assert code == 3
    assert "verdict:   REJECTED" in out and "SIMULATED: yes" in out
    assert err.startswith("UNVERIFIED: the files agree with each other, but nothing says who made them")


def test_the_sites_allowed_signers_is_the_anchor_verify_finds(made: dict[str, Any], crash: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "sites" / "tirosh-home"
    site.mkdir(parents=True)
    shutil.copy(made["allowed"], site / "allowed_signers")
    monkeypatch.chdir(tmp_path)
    code, out, _ = _verify(crash, capsys)
    assert code == 0 and "trust anchor sites/tirosh-home/allowed_signers" in out


def test_forgery_a_bundle_carrying_its_own_trust_anchor_is_refused(made: dict[str, Any], crash: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # re-signed with the forger's key, shipping sites/<site>/allowed_signers that names her key as the engineer's,
    # and verified from inside the bundle: the anchor found under the current directory is the forger's own
    shipped = crash / "sites" / "tirosh-home"
    shipped.mkdir(parents=True)
    kind, blob = made["other"].with_name("id_other.pub").read_text(encoding="utf-8").split()[:2]
    (shipped / "allowed_signers").write_text(f'{IDENTITY} namespaces="dgxspark-report" {kind} {blob}\n', encoding="utf-8")
    _reseal(crash, made["other"])
    monkeypatch.chdir(crash)
    code, _, err = _verify(Path("."), capsys)
    assert code == 1 and "trust anchor FAILED" in err and "lies inside the bundle it is to check" in err, err
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(shipped / "allowed_signers"))
    assert code == 1 and "lies inside the bundle it is to check" in err, err


def test_forgery_a_symlink_or_a_fifo_stands_in_for_a_bundle_file(made: dict[str, Any], crash: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    anchor = ("--allowed-signers", str(made["allowed"]))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "note.txt").write_text("content that rides along, attested by nothing")
    (crash / "extra").symlink_to(outside)  # a folder the walk used to skip
    code, _, err = _verify(crash, capsys, *anchor)
    assert code == 1 and "not a regular file: extra (a symlink" in err, err
    (crash / "extra").unlink()
    # results.json as a link to an identical copy outside the bundle, which can change once verify has read it
    shutil.copy(crash / "results.json", outside / "results.json")
    (crash / "results.json").unlink()
    (crash / "results.json").symlink_to(outside / "results.json")
    code, _, err = _verify(crash, capsys, *anchor)
    assert code == 1 and "results.json: cannot be read: not a regular file (a symlink" in err, err
    # ... or as a FIFO, which served the printed claims one content and the hash another: refused, never waited on
    (crash / "results.json").unlink()
    os.mkfifo(crash / "results.json")
    code, _, err = _verify(crash, capsys, *anchor)
    assert code == 1 and "results.json: cannot be read: not a regular file" in err, err


def test_forgery_a_path_listed_twice_in_the_signed_manifest(made: dict[str, Any], crash: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # sha256sum --strict -c checks both lines (and fails); verify used to keep the last one alone
    manifest = crash / "MANIFEST.sha256"
    manifest.write_text("0" * 64 + "  results.json\n" + manifest.read_text(encoding="utf-8"), encoding="utf-8")
    sign_manifest(crash, made["good"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "path 'results.json' is listed twice" in err, err


def test_a_signing_step_that_fails_exits_non_zero_and_the_bundle_says_unsigned(
        made: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    proc, run_dir = made["healthy"], made["healthy_dir"]
    assert proc.returncode == 8, proc.stdout[-3000:]  # ACCEPTED as judged, but the bundle is not signed: never 0
    assert "dgxspark: BUNDLE UNSIGNED: the attestation could not be signed: ssh-keygen -Y sign" in proc.stdout
    signing = json.loads((run_dir / "signing.json").read_text())
    assert signing["state"] == "unsigned" and "could not be signed" in signing["reason"]
    assert not (run_dir / "MANIFEST.sha256.sig").exists()
    assert read_envelope(run_dir)[0]["signatures"] == []
    code, out, err = _verify(run_dir, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "signing:   unsigned — the attestation could not be signed" in out
    assert "the bundle is unsigned (signing.json: the attestation could not be signed" in err


# The forgeries of the audit: each leaves a bundle consistent enough to pass a checksum, none passes verify.

@pytest.mark.slow
def test_forgery_the_accepted_summary_pdf_swapped_in_and_re_signed_by_another_key(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if chromium() is None or shutil.which("pdftotext") is None:
        pytest.skip("chromium or poppler-utils is not installed: no summary.pdf to swap")
    shutil.copy(made["healthy_dir"] / "summary.pdf", crash / "summary.pdf")
    _reseal(crash, made["other"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1
    assert "signature FAILED" in err and "made by no key listed in" in err
    assert "summary.pdf FAILED:" in err and "page 1 says ACCEPTED, results.json says REJECTED" in err
    code, _, err = _verify(crash, capsys)  # without the anchor the PDF still gives it away
    assert code == 1 and "summary.pdf FAILED:" in err


def test_forgery_the_accepted_summary_html_swapped_in(made: dict[str, Any], crash: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(made["healthy_dir"] / "summary.html", crash / "summary.html")
    _reseal(crash, None)
    code, _, err = _verify(crash, capsys)
    assert code == 1 and "summary.html: verdict ACCEPTED, results.json says REJECTED" in err


@pytest.mark.slow
def test_forgery_a_consistent_accepted_bundle_made_with_this_tool_and_another_key(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    results = json.loads((crash / "results.json").read_text())
    results["verdict"], results["root_causes"], results["lowest_broken_layer"] = "ACCEPTED", [], None
    results["verdict_reasons"] = []
    for rule in results["rules"]:
        if rule["status"] in ("failed", "blocked"):
            rule["status"] = "passed"
            for test in rule["tests"]:
                test["outcome"] = "passed"
    results["counts"] = {s: sum(1 for r in results["rules"] if r["status"] == s)
                         for s in {r["status"] for r in results["rules"]}}
    (crash / "results.json").write_text(json.dumps(results))
    monkeypatch.setenv("DGXSPARK_PDF", "off")
    (crash / "summary.pdf").unlink(missing_ok=True)
    htmlagree.agree(crash)
    assert finish_bundle(crash, "both", made["other"]).problems == ()  # every derived file re-made from the lie
    monkeypatch.chdir(tmp_path)
    code, _, err = _verify(crash, capsys)
    assert code == 3 and err.startswith("UNVERIFIED")  # consistent: only a trust anchor can tell
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "signature FAILED" in err


def test_forgery_results_json_saying_accepted_over_a_failed_rule_and_not_simulated_signed_again(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # a holder of the trusted key edits the verdict alone and re-makes every derived file from it: each agrees with
    # results.json, which no longer agrees with itself
    results = json.loads((crash / "results.json").read_text())
    failed = [r["id"] for r in results["rules"] if r["status"] == "failed"]
    assert failed and results["run"]["testbed"] == "device-plugin-crashloop"
    results["verdict"], results["verdict_reasons"] = "ACCEPTED", []
    results["run"]["simulated"] = False
    (crash / "results.json").write_text(json.dumps(results))
    monkeypatch.setenv("DGXSPARK_PDF", "off")
    (crash / "summary.pdf").unlink(missing_ok=True)
    htmlagree.agree(crash)
    assert finish_bundle(crash, "both", made["good"]).problems == ()
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "results.json FAILED:" in err, err
    assert f"verdict ACCEPTED, but its rules {', '.join(failed)} failed (a failed rule rejects)" in err
    assert "run.simulated is False, but the run names a testbed (device-plugin-crashloop)" in err


def _seal(run_dir: Path, key: Path) -> None:
    """What a holder of the trusted key does after changing a file: seal the bundle again, as a run seals it."""
    from pytest_dgxspark.report.bundle import seal

    for name in ("attestation.intoto.json", "MANIFEST.sha256", "MANIFEST.sha256.sig"):
        (run_dir / name).unlink(missing_ok=True)
    problems: list[str] = []
    assert seal(run_dir, key, [], problems) is None and problems == [], problems


def test_forgery_summary_html_showing_another_page_over_a_hidden_copy_of_the_genuine_one(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the genuine verdict inside a <template> (never rendered or printed) satisfied the fact read by pattern; what a
    # reader saw was the verdict after it, its marker renamed
    path = crash / "summary.html"
    genuine = path.read_text(encoding="utf-8")
    word = '<span id="verdict-word">REJECTED'
    assert genuine.count(word) == 1
    path.write_text(genuine.replace(word, f'<template>{word}</span></template><span id="verdict-word" >ACCEPTED'),
                    encoding="utf-8")
    _seal(crash, made["good"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "summary.html FAILED:" in err and "not the rendering of its results.json" in err, err
    assert "signature FAILED" not in err  # sealed again by the trusted key: only the page itself tells
    # made by another version (its ctrf.json says so), the page is held to being one page of these facts
    ctrf = json.loads((crash / "ctrf.json").read_text())
    ctrf["results"]["tool"]["version"], ctrf["generatedBy"] = "0.0.9", "pytest-dgxspark 0.0.9"
    (crash / "ctrf.json").write_text(json.dumps(ctrf))
    _seal(crash, made["good"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "not one page of these facts (made by pytest-dgxspark 0.0.9): <template" in err, err


def test_forgery_report_html_a_decoy_data_blob_before_the_one_the_page_renders(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = crash / "report.html"
    text = path.read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="[^"]*"', text).group(0)
    path.write_text(text.replace('<div id="data-container"', f"<template {blob}></template><div id=\"data-container\"", 1),
                    encoding="utf-8")
    _seal(crash, made["good"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "report.html FAILED:" in err and "2 data blobs; a report.html has one" in err, err


def test_forgery_report_html_rows_and_counts_edited(made: dict[str, Any], crash: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = crash / "report.html"
    text = path.read_text()
    path.write_text(text.replace("Blocked", "Passed").replace('<span class="blocked">4 Blocked,</span>',
                                                              '<span class="blocked">0 Blocked,</span>'))
    _reseal(crash, None)
    code, _, err = _verify(crash, capsys)
    assert code == 1 and "report.html FAILED:" in err and "results.json says blocked" in err


def test_forgery_junit_xml_skips_dropped(made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    tree = ET.parse(crash / "junit.xml")
    for case in tree.getroot().iter("testcase"):
        for child in [c for c in case if c.tag in ("failure", "skipped")]:
            case.remove(child)
    tree.write(crash / "junit.xml")
    _reseal(crash, None)
    code, _, err = _verify(crash, capsys)
    assert code == 1 and "junit.xml FAILED:" in err and "calls for [('failure', 'failed')]" in err


@pytest.mark.slow
def test_forgery_junit_xml_root_counts_that_a_ci_reads(made: dict[str, Any], crash: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    tree = ET.parse(crash / "junit.xml")
    tree.getroot().set("tests", "65")
    tree.getroot().set("failures", "0")
    tree.write(crash / "junit.xml")
    _reseal(crash, None)
    code, _, err = _verify(crash, capsys)
    assert code == 1 and "junit.xml FAILED:" in err and "testsuites: failures=0, its testsuites give " in err, err


def test_forgery_ctrf_statuses_passed(made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((crash / "ctrf.json").read_text())
    for test in doc["results"]["tests"]:
        test["status"], test["rawStatus"] = "passed", "passed"
    (crash / "ctrf.json").write_text(json.dumps(doc))
    _reseal(crash, None)
    code, _, err = _verify(crash, capsys)
    assert code == 1 and "ctrf.json FAILED:" in err


def test_forgery_ctrf_verdict_and_environment_edited_with_the_statuses_kept(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # what a CTRF dashboard shows: the verdict and the target, signed again by the trusted key; each test's name and
    # status as results.json gives them
    doc = json.loads((crash / "ctrf.json").read_text())
    extra = doc["results"]["summary"]["extra"]
    extra["verdict"], extra["simulated"], extra["root_causes"] = "ACCEPTED", False, []
    doc["results"]["environment"]["testEnvironment"] = "site:tirosh-home"
    (crash / "ctrf.json").write_text(json.dumps(doc, indent=2))
    _reseal(crash, made["good"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "ctrf.json FAILED:" in err, err
    assert "not the CTRF of its results.json" in err and "results.summary.extra.verdict" in err
    assert "results.environment.testEnvironment" in err


def test_a_ctrf_written_by_another_version_is_held_to_its_facts(crash: Path) -> None:
    from pytest_dgxspark.report.ctrf import check_ctrf

    doc = json.loads((crash / "ctrf.json").read_text())
    doc["results"]["tool"]["version"], doc["generatedBy"] = "0.0.9", "pytest-dgxspark 0.0.9"
    doc["results"]["summary"]["extra"]["a_field_of_that_version"] = "worded otherwise"
    (crash / "ctrf.json").write_text(json.dumps(doc))
    assert check_ctrf(crash) == []  # a bundle made years ago by another version
    doc["results"]["summary"]["extra"]["verdict"] = "ACCEPTED"
    (crash / "ctrf.json").write_text(json.dumps(doc))
    assert ["results.summary.extra.verdict" in p for p in check_ctrf(crash)] == [True]


@pytest.mark.slow
def test_signature_only_change_the_signature_removed(made: dict[str, Any], crash: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (crash / "MANIFEST.sha256.sig").unlink()
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "the bundle is unsigned" in err


def test_signature_only_change_another_keys_signature_of_the_same_manifest(
        made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sign_manifest(crash, made["other"])
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "made by no key listed in" in err


@pytest.mark.slow
def test_signature_only_change_a_trusted_signature_of_another_bundle(
        made: dict[str, Any], crash: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    donor = Path(shutil.copytree(made["crash_dir"], tmp_path / "donor"))
    (donor / "notes.txt").write_text("another manifest")
    write_manifest(donor)
    sign_manifest(donor, made["good"])
    shutil.copy(donor / "MANIFEST.sha256.sig", crash / "MANIFEST.sha256.sig")
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "signature FAILED" in err


@pytest.mark.slow
def test_forgery_the_attestations_dsse_signature_stripped(made: dict[str, Any], crash: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    doc, statement = read_envelope(crash)
    (crash / ATTESTATION).write_text(json.dumps(envelope(statement)))
    write_manifest(crash)
    sign_manifest(crash, made["good"])  # even re-signed by the trusted key (a stolen session), the envelope is unsigned
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "no DSSE signature by engineer@vendor.example verifies (0 signature(s)" in err


@pytest.mark.slow
def test_forgery_the_signing_time_edited(made: dict[str, Any], crash: Path, capsys: pytest.CaptureFixture[str]) -> None:
    signing = json.loads((crash / "signing.json").read_text())
    signing["signed_at"] = "2020-01-01T00:00:00+00:00"
    (crash / "signing.json").write_text(json.dumps(signing))
    code, _, err = _verify(crash, capsys, "--allowed-signers", str(made["allowed"]))
    assert code == 1 and "changed: signing.json" in err


def test_the_three_command_check_holds_without_this_project(made: dict[str, Any], crash: Path) -> None:
    """docs/report.md: ssh-keygen -Y verify, sha256sum --strict -c, and the list of files against the manifest."""
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum (coreutils) is not installed")
    manifest = (crash / "MANIFEST.sha256").read_bytes()
    signed = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(made["allowed"]), "-I", IDENTITY,
                             "-n", "dgxspark-report", "-s", "MANIFEST.sha256.sig"], cwd=crash, input=manifest,
                            capture_output=True, check=False)
    assert signed.returncode == 0, signed.stderr
    sums = subprocess.run(["sha256sum", "--strict", "-c", "MANIFEST.sha256"], cwd=crash, capture_output=True,
                          text=True, check=False)
    assert sums.returncode == 0, sums.stdout
    third = ("find . ! -type d ! -name MANIFEST.sha256 ! -name MANIFEST.sha256.sig | sed 's|^\\./||' | sort | "
             "diff - <(cut -c67- MANIFEST.sha256 | sort)")
    listed = subprocess.run(third, shell=True, executable="/bin/bash", cwd=crash, capture_output=True, text=True,
                            check=False)
    assert listed.returncode == 0, listed.stdout
    (crash / "extra.txt").write_text("an added file")  # the third command is what catches a file the manifest lacks
    (crash / "linked").symlink_to(crash.parent)  # ... and a symlink, to a folder or a file, which -type f missed
    listed = subprocess.run(third, shell=True, executable="/bin/bash", cwd=crash, capture_output=True, text=True,
                            check=False)
    assert listed.returncode == 1 and "< extra.txt" in listed.stdout and "< linked" in listed.stdout


# Page 1 names the real cause (the same crashloop run), and the PDF's links stay inside the bundle.

def _page(run_dir: Path, first: int, last: int) -> str:
    return subprocess.run(["pdftotext", "-f", str(first), "-l", str(last), str(run_dir / "summary.pdf"), "-"],
                          capture_output=True, text=True, check=True).stdout


needs_pdf = pytest.mark.skipif(chromium() is None or shutil.which("pdftotext") is None,
                               reason="chromium or poppler-utils is not installed: no summary.pdf")


@needs_pdf
def test_page_1_of_the_crashloop_names_v0_17_1_the_v0_17_4_floor_and_the_matching_fix_in_ko_and_en(
        made: dict[str, Any]) -> None:
    first = " ".join(_page(made["crash_dir"], 1, 1).split())
    assert "GB10 needs device plugin v0.17.4 or later, the pod runs nvcr.io/nvidia/k8s-device-plugin:v0.17.1" in first
    assert "Device plugin below the GB10 floor (v0.17.4)" in first and "GB10 하한(v0.17.4)보다 낮은 device plugin" in first
    assert "Drop the devicePlugin.version override from the GPU Operator HelmChart" in first
    assert "devicePlugin.version 지정을 지워" in first
    assert "NVML or the toolkit is missing" not in first  # the rule's generic fix is not what page 1 gives
    assert "gpu-stack-facts F19" in first
    # the recorded hardening values are on paper
    assert "Hardening baseline (recorded, ADR-0001 §6-2)" in first and "secrets-encryption: 미설정 / unset" in first


@needs_pdf
def test_the_pdf_links_into_the_bundle_are_relative_and_the_healthy_summary_has_at_most_4_pages(
        made: dict[str, Any]) -> None:
    from pytest_dgxspark.report.pdf import absolute_links

    for run_dir in (made["crash_dir"], made["healthy_dir"]):
        assert absolute_links(run_dir / "summary.pdf") == []
    info = subprocess.run(["pdfinfo", str(made["healthy_dir"] / "summary.pdf")], capture_output=True, text=True,
                          check=True).stdout
    pages = int(next(line.split()[-1] for line in info.splitlines() if line.startswith("Pages:")))
    assert 1 < pages <= 4
    last = _page(made["healthy_dir"], pages, pages)
    assert "Sign-off" in last and "accept with waivers" in last and "What the signature means" in last
    assert "Passed rules: expected and observed" in last and "ADR-0001.node-ready" in last
