"""The report plugin in real runs: the whole bundle, pytest-html columns and evidence, JUnit rule, options, drift, signing."""
from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from pytest_dgxspark.report import bundle as bundle_module
from pytest_dgxspark.report import cli
from pytest_dgxspark.report.closing import EXIT_INCOMPLETE
from pytest_dgxspark.report.manifest import check_manifest, read_manifest
from pytest_dgxspark.report.pdf import chromium

ARGS = ("--site", "sites/tirosh-home", "--report-dir", "out", "-p", "no:cacheprovider")
HOST_SUITE = (
    "@pytest.mark.rule('ADR-0002.host-driver')\n"
    "def test_driver_module_is_loaded(evidence):\n"
    "    evidence.record('lsmod-nvidia-zz9', {'module': 'nvidia', 'token': 'abc123' + 'secret'})\n"
    "    assert FAIL is False, 'nvidia module not loaded'\n\n"
    "@pytest.mark.rule('ADR-0002.host-static-ip')\n"
    "def test_static_ip():\n"
    "    pass\n"
)


def _write(suite, fail: bool) -> None:
    suite("host", f"FAIL = {fail}\n\n" + HOST_SUITE)


def _run_dir(pytester: pytest.Pytester) -> Path:
    return (pytester.path / "out" / "latest").resolve()


# The tests whose runs print summary.pdf (the others run with DGXSPARK_PDF=off, as tests/conftest.py sets).
PDF_TESTS = {"test_a_run_writes_every_file_of_the_bundle", "test_without_chromium_the_run_says_so_and_the_bundle_still_verifies"}


@pytest.fixture(autouse=True)
def pdf_wanted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.name in PDF_TESTS:
        monkeypatch.delenv("DGXSPARK_PDF", raising=False)


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_a_run_writes_every_file_of_the_bundle(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    result = pytester.runpytest(*ARGS, "--dgxspark-operator", "Kim <Vendor>")
    assert result.ret == EXIT_INCOMPLETE  # a part of the catalog ran
    run_dir = _run_dir(pytester)
    names = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()}
    assert {"results.json", "report.html", "summary.html", "summary.pdf", "junit.xml", "ctrf.json",
            "attestation.intoto.json", "MANIFEST.sha256"} <= names
    assert any(n.startswith("evidence/") for n in names)
    assert "MANIFEST.sha256.sig" not in names
    assert {"summary.pdf", "ctrf.json", "attestation.intoto.json"} <= set(read_manifest(run_dir))
    assert (run_dir / "summary.pdf").read_bytes().startswith(b"%PDF-")
    result.stdout.fnmatch_lines([f"dgxspark bundle: {run_dir} (summary.html, summary.pdf, ctrf.json, "
                                 "signing.json, attestation.intoto.json, MANIFEST.sha256)"])
    assert check_manifest(run_dir).ok
    assert cli.main(["verify", str(run_dir)]) == 3  # consistent, no trust anchor: UNVERIFIED
    doc = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert doc["run"]["operator"] == "Kim <Vendor>"
    assert doc["run"]["lang"] == "both"
    assert doc["drift"] is None
    summary = (run_dir / "summary.html").read_text(encoding="utf-8")
    assert "Kim &lt;Vendor&gt;" in summary and "Kim <Vendor>" not in summary
    assert summary.count('<tr class="rule-row" ') == len(load_catalog())  # the 30 ADR rules and those beyond them


@pytest.mark.slow
def test_report_html_has_sortable_rule_layer_and_severity_columns_and_the_evidence(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=True)
    assert pytester.runpytest(*ARGS).ret == 1
    html = (_run_dir(pytester) / "report.html").read_text(encoding="utf-8")
    for column, title in (("rule", "Rule"), ("layer", "Layer"), ("severity", "Severity")):
        assert f'<th class="sortable" data-column-type="{column}">{title}</th>' in html
    assert "col-rule" in html and "ADR-0002.host-driver" in html
    assert "1 host" in html  # the layer sorts bottom-up: its position comes first
    assert "lsmod-nvidia-zz9" in html
    assert "abc123secret" not in html and "redacted" in html
    assert "<script" in html  # pytest-html's own, self-contained


@pytest.mark.slow
def test_junit_xml_carries_the_status_and_rule_of_every_testcase(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=True)
    pytester.runpytest(*ARGS)
    tree = ET.parse(_run_dir(pytester) / "junit.xml")
    rules = {case.get("name"): [o.text for o in case.iter("system-out")] for case in tree.iter("testcase")}
    assert rules == {"test_driver_module_is_loaded": ["dgxspark status: failed; rule ADR-0002.host-driver: failed"],
                     "test_static_ip": ["dgxspark status: passed; rule ADR-0002.host-static-ip: passed"]}


def test_html_and_junit_paths_given_by_the_user_are_kept(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    assert pytester.runpytest(*ARGS, "--html", "mine.html", "--junitxml", "mine.xml").ret == EXIT_INCOMPLETE  # a part of the catalog ran
    assert (pytester.path / "mine.html").is_file() and (pytester.path / "mine.xml").is_file()
    run_dir = _run_dir(pytester)
    assert not (run_dir / "report.html").exists() and not (run_dir / "junit.xml").exists()
    assert check_manifest(run_dir).ok


def test_a_run_outside_suites_writes_no_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    assert pytester.runpytest("-p", "no:cacheprovider").ret == 0
    assert not (pytester.path / "reports").exists()


def test_a_missing_baseline_and_a_bad_key_are_one_usage_error_with_the_rest_of_the_plan(
        pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    (pytester.path / "notakey").write_text("hello", encoding="utf-8")
    result = pytester.runpytest(*ARGS, "--dgxspark-baseline", "gone.json", "--dgxspark-sign", "notakey",
                                "--dgxspark-smi-timeout", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: invalid run input:",
        "--dgxspark-smi-timeout: expected a whole number of seconds from 1 to 600, got 0",
        "--dgxspark-sign notakey: not an SSH private key (or a .pub key held by ssh-agent); expected e.g. ~/.ssh/id_ed25519",
        "--dgxspark-baseline gone.json: no such file or directory",
    ])
    assert not (pytester.path / "out").exists()


def test_an_unknown_language_is_a_usage_error(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    result = pytester.runpytest(*ARGS, "--dgxspark-lang", "fr")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dgxspark-lang: invalid choice: 'fr' (choose from 'ko', 'en', 'both')"])


@pytest.mark.slow
def test_a_run_against_a_baseline_records_drift_in_results_and_summary(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    assert pytester.runpytest(*ARGS).ret == EXIT_INCOMPLETE  # a part of the catalog ran
    baseline = _run_dir(pytester)
    _write(suite, fail=True)
    assert pytester.runpytest(*ARGS, "--dgxspark-baseline", str(baseline), "--dgxspark-lang", "en").ret == 1
    run_dir = _run_dir(pytester)
    assert run_dir != baseline
    doc = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert doc["drift"]["regressed"] == [{"rule": "ADR-0002.host-driver", "from": "passed", "to": "failed"}]
    assert doc["drift"]["baseline"]["integrity"] == "verified"
    assert doc["run"]["lang"] == "en"
    summary = (run_dir / "summary.html").read_text(encoding="utf-8")
    assert '<tr class="drift-regressed"><td class="mono">ADR-0002.host-driver</td>' in summary
    assert '<html lang="en">' in summary


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) is not installed")
def test_a_signed_run_verifies_with_the_engineers_key(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=False)
    keys = pytester.path / "keys"
    keys.mkdir()
    key = keys / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2]
    allowed = keys / "allowed_signers"
    allowed.write_text(f'vendor@example namespaces="dgxspark-report" {kind} {blob}\n', encoding="utf-8")
    assert pytester.runpytest(*ARGS, "--dgxspark-sign", "keys/id_ed25519").ret == EXIT_INCOMPLETE  # a part of the catalog ran
    run_dir = _run_dir(pytester)
    assert (run_dir / "MANIFEST.sha256.sig").is_file()
    assert cli.main(["verify", str(run_dir), "--allowed-signers", str(allowed)]) == 0


@pytest.mark.slow
def test_without_chromium_the_run_says_so_and_the_bundle_still_verifies(
    pytester: pytest.Pytester, suite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)
    _write(suite, fail=False)
    result = pytester.runpytest(*ARGS)
    assert result.ret == EXIT_INCOMPLETE  # a part of the catalog ran
    run_dir = _run_dir(pytester)
    assert not (run_dir / "summary.pdf").exists()
    result.stdout.fnmatch_lines([
        f"dgxspark bundle: {run_dir} (summary.html, ctrf.json, signing.json, attestation.intoto.json, MANIFEST.sha256)",
        f"dgxspark bundle: summary.pdf not written: chromium is not installed (Debian: apt-get install chromium); "
        f"render it later with dgxspark-report pdf {run_dir}",
    ])
    assert "dgxspark bundle ERROR" not in result.stdout.str()
    assert cli.main(["verify", str(run_dir)]) == 3  # consistent, no trust anchor: UNVERIFIED


def test_without_pytest_html_the_bundle_is_still_complete_and_verifies(pytester: pytest.Pytester, suite) -> None:
    _write(suite, fail=True)
    assert pytester.runpytest(*ARGS, "-p", "no:html").ret == 1
    run_dir = _run_dir(pytester)
    assert not (run_dir / "report.html").exists()
    assert (run_dir / "summary.html").is_file() and (run_dir / "junit.xml").is_file()
    assert cli.main(["verify", str(run_dir)]) == 3  # consistent, no trust anchor: UNVERIFIED
