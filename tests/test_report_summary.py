"""summary.html: content, escaping, languages, times; rendered and printed by a real headless Chromium."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_dgxspark.report.example import RULE_LAYERS, example_results
from pytest_dgxspark.report.summary import LAYERS, SummaryError, render_summary

RULE_IDS = [rule for ids in RULE_LAYERS.values() for rule in ids]
FAULT = {"ADR-0002.host-nvml": "failed", "ADR-0002.allocatable": "blocked"}


def _section(html: str, name: str) -> str:
    return html.split(f'<section id="{name}"')[1].split("</section>")[0]


def test_the_summary_has_banner_run_ladder_matrix_provenance_waivers_manual_checks_and_sign_off() -> None:
    html = render_summary(example_results(statuses=FAULT), "both")
    banner = _section(html, "verdict")
    assert '<div class="word" id="verdict-word">REJECTED · 불합격</div>' in banner
    assert "SIMULATED" in banner and "(healthy)" in banner
    assert '<div class="watermark" aria-hidden="true">SIMULATED</div>' in html
    run = _section(html, "run")
    assert "2026-01-05 01:02:03 UTC<br>2026-01-05 10:02:03 KST (Asia/Seoul)" in run
    assert "2026-01-05 01:04:09 UTC<br>2026-01-05 10:04:09 KST (Asia/Seoul)" in run
    assert "20260105T010203Z-0a1b" in run and "gpu-01" in run
    ladder = _section(html, "ladder")
    assert re.findall(r'data-layer="([a-z0-9-]+)"', ladder) == list(LAYERS)
    assert '<tr class="layer lowest" id="layer-host"' in ladder
    assert "Fix the host layer first; do not reinstall RKE2." in ladder
    matrix = _section(html, "matrix")
    assert re.findall(r'<tr class="rule" id="rule-([^"]+)"', matrix) == RULE_IDS
    assert 'data-rule="ADR-0002.host-nvml" data-status="failed"' in matrix
    assert '<a href="evidence/host-host_nvml.json">' in matrix
    assert "ADR-0002 §5-3" in matrix and "host 계층의 규칙 host_nvml이(가) 충족된다." in matrix
    provenance = _section(html, "provenance")
    assert "580.95.05" in provenance and "NVIDIA 드라이버 / NVIDIA driver" in provenance and "v26.3.2" in provenance
    assert "HOSP-42" in _section(html, "waivers")
    assert "UPS 연결 확인" in _section(html, "manual-checks") and "Park IT" in _section(html, "manual-checks")
    signoff = _section(html, "signoff")
    for role in ("Vendor engineer", "Hospital IT", "Security officer"):
        assert role in signoff
    assert "<script" not in html.lower() and "javascript:" not in html.lower()


def test_every_value_is_escaped_and_only_evidence_paths_become_links() -> None:
    results = example_results()
    results["rules"][0]["statement_ko"] = "<img src=x onerror=alert(1)>"
    results["rules"][0]["tests"][0]["evidence"] = "javascript:alert(1)"
    results["rules"][1]["tests"][0]["evidence"] = "../../etc/passwd"
    html = render_summary(results, "en")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="javascript:' not in html and 'href="../' not in html
    assert "Kim Engineer &lt;script&gt;" in html


def test_one_language_shows_only_its_labels() -> None:
    results = example_results()
    english = render_summary(results, "en")
    korean = render_summary(results, "ko")
    assert "Traceability matrix" in english and "추적성 매트릭스" not in english
    assert "추적성 매트릭스" in korean and "Traceability matrix" not in korean
    assert '<html lang="en">' in english and '<html lang="ko">' in korean
    assert "passed holds" not in korean and "site rule site_layout holds" in english
    both = render_summary(results, "both")
    assert "추적성 매트릭스" in both and "Traceability matrix" in both


def test_an_accepted_real_run_has_no_watermark() -> None:
    html = render_summary(example_results(simulated=False), "en")
    assert '<div class="word" id="verdict-word">ACCEPTED</div>' in html
    assert "SIMULATED" not in html


def test_rendering_is_deterministic_and_refuses_incomplete_results() -> None:
    results = example_results(statuses=FAULT)
    assert render_summary(results) == render_summary(results)
    with pytest.raises(SummaryError, match="results.json lacks verdict; the summary needs run, verdict and rules"):
        render_summary({"run": {}, "rules": []})
    with pytest.raises(SummaryError, match="language must be one of ko, en, both, got 'fr'"):
        render_summary(results, "fr")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium)")
def test_chromium_renders_the_verdict_ladder_and_all_30_rules_and_prints_them_to_a4_pdf(tmp_path: Path) -> None:
    page = tmp_path / "summary.html"
    page.write_text(render_summary(example_results(statuses=FAULT), "both"), encoding="utf-8")
    url = page.as_uri()

    dom = _chromium(tmp_path / "p1", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<div class="word" id="verdict-word">REJECTED · 불합격</div>' in dom.stdout
    assert re.findall(r'data-layer="([a-z0-9-]+)"', dom.stdout) == list(LAYERS)
    assert re.findall(r'<tr class="rule" id="rule-([^"]+)"', dom.stdout) == RULE_IDS

    shot = tmp_path / "summary.png"
    done = _chromium(tmp_path / "p2", "--window-size=1000,1400", f"--screenshot={shot}", url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

    pdf = tmp_path / "summary.pdf"
    done = _chromium(tmp_path / "p3", "--no-pdf-header-footer", f"--print-to-pdf={pdf}", url)
    assert done.returncode == 0, done.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
    assert pages >= 3, pages
    boxes = {tuple(round(float(v)) for v in box.split()) for box in re.findall(rb"/MediaBox \[([0-9. ]+)\]", data)}
    assert boxes == {(0, 0, 595, 842)}, boxes  # every page A4 (210 x 297 mm in points)
    if shutil.which("pdftotext") is None:
        pytest.skip("pdftotext (poppler-utils) is not installed: PDF text not checked")
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    flat = re.sub(r"\s+", "", text)
    missing = [rule for rule in RULE_IDS if flat.count(rule) < 2]  # once in the ladder, once in the matrix
    assert missing == []
    assert "REJECTED" in text and "Sign-off" in text
