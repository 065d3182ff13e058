"""summary.html: first page, compact matrix, detail, provenance, statuses, escaping, languages; printed by Chromium."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from pytest_dgxspark.report.example import RULE_LAYERS, example_results
from pytest_dgxspark.report.pdf import chromium, print_pdf
from pytest_dgxspark.report.summary import LAYERS, SummaryError, render_summary

RULE_IDS = [rule for ids in RULE_LAYERS.values() for rule in ids]
FAULT = {"ADR-0002.host-nvml": "failed", "ADR-0002.allocatable": "blocked"}
KO_NVML = "호스트에서 libnvidia-ml.so.1을 확인하고 드라이버를 다시 설치하십시오."


def _section(html: str, name: str) -> str:
    return html.split(f'<section id="{name}"')[1].split("</section>")[0]


def _first_page(html: str) -> str:
    return html.split('<div class="page1">')[1].split('<section id="matrix">')[0]


def _faulty() -> dict:
    results = example_results(statuses={**FAULT, "ADR-0002.image-mirror": "waived"})
    nvml = next(r for r in results["rules"] if r["id"] == "ADR-0002.host-nvml")
    nvml["remediation_ko"] = KO_NVML
    nvml["tests"][0]["message"] = "nvidia-smi exited 9: NVML could not be initialised"
    mirror = next(r for r in results["rules"] if r["id"] == "ADR-0002.image-mirror")
    mirror["waiver"] = results["waivers"][0]
    return results


def test_the_first_page_holds_verdict_run_ladder_root_causes_forecast_and_sign_off_in_that_order() -> None:
    html = render_summary(_faulty(), "both")
    first = _first_page(html)
    assert re.findall(r'<section id="([a-z-]+)"', first) == ["verdict", "run", "ladder", "root-causes", "forecast"]
    assert html.index('<section id="signoff" class="signoff-page">') > html.index('<section id="detail">')
    assert '<span id="verdict-word">REJECTED · 불합격</span>' in first
    assert "SIMULATED" in _section(html, "verdict") and "(healthy)" in _section(html, "verdict")
    assert '<div class="watermark" aria-hidden="true">SIMULATED</div>' in html
    run = _section(html, "run")
    assert "2026-01-05 01:02:03 UTC<br>2026-01-05 10:02:03 KST (Asia/Seoul)" in run
    assert "2026-01-05 01:04:09 UTC<br>2026-01-05 10:04:09 KST (Asia/Seoul)" in run
    assert "20260105T010203Z-0a1b" in run and "gpu-01" in run and "tirosh-home" in run
    ladder = _section(html, "ladder")
    assert re.findall(r'data-layer="([a-z0-9-]+)"', ladder) == list(LAYERS)
    assert '<td class="layer s-failed lowest" id="layer-host" data-layer="host" data-status="failed">' in ladder
    assert '<div class="count">3/4</div>' in ladder  # host: host-nvml failed
    not_passed = ladder.split('id="not-passed"')[1]
    assert re.findall(r'<span class="mono">([^<]+)</span>', not_passed) == ["ADR-0002.host-nvml", "ADR-0002.allocatable",
                                                                            "ADR-0002.image-mirror"]
    for role in ("Vendor engineer", "Hospital IT", "Security officer", "공급사 엔지니어"):
        assert role in _section(html, "signoff")
    assert "<script" not in html.lower() and "javascript:" not in html.lower()


def test_a_root_cause_shows_what_was_observed_and_its_remediation_in_korean_and_english() -> None:
    causes = _section(render_summary(_faulty(), "both"), "root-causes")
    assert re.findall(r'<div class="cause" id="cause-([^"]+)"', causes) == ["ADR-0002.host-nvml"]
    assert 'id="lowest-broken-layer">host</span>' in causes
    assert "nvidia-smi exited 9: NVML could not be initialised" in causes
    assert f'<div class="rem" lang="ko"><span class="lbl">조치</span> {KO_NVML}</div>' in causes
    assert ('<div class="rem" lang="en"><span class="lbl">Remediation</span> '
            "Fix the host layer first; do not reinstall RKE2.</div>") in causes
    english = _section(render_summary(_faulty(), "en"), "root-causes")
    assert KO_NVML not in english and "Fix the host layer first" in english


def test_more_than_three_root_causes_leave_room_for_the_sign_off_and_link_the_rest() -> None:
    ids = ["ADR-0002.host-static-ip", "ADR-0002.host-driver", "ADR-0002.host-nvml", "ADR-0002.driver-source",
           "ADR-0001.rke2-config"]
    results = example_results(statuses={rule: "failed" for rule in ids})
    results["root_causes"] = ids
    causes = _section(render_summary(results, "en"), "root-causes")
    assert re.findall(r'<div class="cause" id="cause-([^"]+)"', causes) == ids[:3]
    assert ('<a class="mono" href="#detail-ADR-0002.driver-source">ADR-0002.driver-source</a>, '
            '<a class="mono" href="#detail-ADR-0001.rke2-config">ADR-0001.rke2-config</a></p>') in causes


def test_a_root_cause_detail_brings_its_own_message_target_and_fix() -> None:
    results = example_results(statuses={"ADR-0002.host-static-ip": "error"})
    results.update(verdict="INCOMPLETE", root_causes=["ADR-0002.host-static-ip"], root_cause_details=[
        {"rule": "ADR-0002.host-static-ip", "kind": "unreachable", "layer": "host",
         "message": "gpu-01 (10.20.0.11): ssh: host key verification failed", "fix": "Accept the host key.",
         "fix_ko": "호스트 키를 확인하고 등록한다.", "target": "gpu-01", "cause": "host key unknown"}])
    causes = _section(render_summary(results, "both"), "root-causes")
    assert "gpu-01 (10.20.0.11): ssh: host key verification failed" in causes
    assert ('대상을 읽지 못함</span><span class="sep"> / </span><span lang="en">target not reachable</span> · '
            in causes)
    assert '<span class="mono">gpu-01</span> · host key unknown</div>' in causes
    assert '<span class="lbl">조치</span> 호스트 키를 확인하고 등록한다.</div>' in causes
    assert '<span class="lbl">Remediation</span> Accept the host key.</div>' in causes
    assert "Fix the host layer first" not in causes  # the rule's own fix is not the connection's


def test_without_a_korean_remediation_the_summary_says_so_and_shows_the_english_one() -> None:
    results = _faulty()
    del next(r for r in results["rules"] if r["id"] == "ADR-0002.host-nvml")["remediation_ko"]
    korean = _section(render_summary(results, "ko"), "root-causes")
    assert ('<span class="msg">(한국어 조치 문구 없음)</span> '
            '<span lang="en">Fix the host layer first; do not reinstall RKE2.</span>') in korean


_CATALOG = load_catalog()
_KO_LANDED = all(getattr(rule, "remediation_ko", "") for rule in _CATALOG)


@pytest.mark.xfail(not _KO_LANDED, reason="the catalog's remediation_ko lands with issue 12 (rootcause helper)")
def test_every_catalog_rule_has_a_korean_remediation_and_the_summary_shows_it() -> None:
    results = example_results(statuses={rule.id: "failed" for rule in _CATALOG})
    by_id = {rule.id: rule for rule in _CATALOG}
    for entry in results["rules"]:
        entry["remediation_ko"] = by_id[entry["id"]].remediation_ko
    results["root_causes"] = [rule.id for rule in _CATALOG]
    causes = _section(render_summary(results, "ko"), "root-causes")
    for rule in _CATALOG:
        assert rule.remediation_ko.strip() and re.search("[가-힣]", rule.remediation_ko), rule.id
    assert "한국어 조치 문구 없음" not in causes


def test_a_healthy_run_names_no_root_cause() -> None:
    causes = _section(render_summary(example_results(simulated=False), "en"), "root-causes")
    assert '<p id="no-root-causes"><span lang="en">No root causes: every judged rule passed or is waived</span></p>' in causes


def test_an_incomplete_run_without_root_causes_does_not_claim_everything_passed() -> None:
    results = example_results(statuses={"ADR-0002.host-nvml": "error"})
    results.update(verdict="INCOMPLETE", root_causes=[], lowest_broken_layer=None,
                   verdict_reasons=[f"gpu-{n:02d} unreachable: ssh exited 255" for n in range(1, 13)])
    html = render_summary(results, "en")
    causes = _section(html, "root-causes")
    assert "every judged rule passed" not in causes
    assert "No root cause among the judged failures: see the verdict reasons above and the matrix" in causes
    banner = _section(html, "verdict")
    assert banner.count("<li>") == 8 and "gpu-08 unreachable" in banner and "gpu-09" not in banner
    assert '<li class="more"><span lang="en">more reasons (see the matrix)</span>: 4</li>' in banner


def test_the_matrix_is_a_line_per_rule_with_failures_then_blocked_then_waivers_first() -> None:
    matrix = _section(render_summary(_faulty(), "both"), "matrix")
    order = re.findall(r'<tr class="rule-row" id="rule-([^"]+)"', matrix)
    rest = [r for r in RULE_IDS if r not in ("ADR-0002.host-nvml", "ADR-0002.allocatable", "ADR-0002.image-mirror")]
    assert order == ["ADR-0002.host-nvml", "ADR-0002.allocatable", "ADR-0002.image-mirror", *rest]
    row = matrix.split('id="rule-ADR-0002.host-nvml"')[1].split("</tr>")[0]
    assert 'data-status="failed"' in row and "ADR-0002 §5-3" in row
    assert '<td class="n">0/1</td>' in row and '<a href="evidence/host-host_nvml.json">1</a>' in row
    assert "HOSP-42" in matrix.split('id="rule-ADR-0002.image-mirror"')[1].split("</tr>")[0]
    assert "충족된다" not in matrix  # the Korean sentences live in the detail section


def test_the_detail_section_holds_the_korean_sentences_and_the_test_ids_grouped_by_check() -> None:
    html = render_summary(example_results(nodes=3, statuses=FAULT), "both")
    assert html.index('<section id="detail">') > html.index('<section id="matrix">')
    detail = _section(html, "detail")
    assert re.findall(r'<div class="rule" id="detail-([^"]+)"', detail)[:2] == ["ADR-0002.host-nvml", "ADR-0002.allocatable"]
    nvml = detail.split('id="detail-ADR-0002.host-nvml"')[1].split('<div class="rule"')[0]
    assert "“host 계층의 규칙 host_nvml이(가) 충족된다.”" in nvml and "host rule host_nvml holds" in nvml
    assert '<span class="mono">suites/host/test_host.py::test_host_nvml</span>' in nvml
    assert '<span class="status chip s-failed">0/3 <span lang="ko">실패</span>' in nvml
    links = re.findall(r'<a class="m mono" href="(evidence/[^"]+)">(gpu-0\d)</a>', nvml)
    assert links == [(f"evidence/host-host_nvml-gpu-0{n}.json", f"gpu-0{n}") for n in (1, 2, 3)]
    assert nvml.count('<div class="fail">') == 3 and "ADR-0002.host-nvml did not hold" in nvml
    assert "Fix the host layer first" in nvml  # a broken rule's remediation in its detail


def test_per_node_provenance_is_one_table_with_what_every_node_shares_above_it() -> None:
    provenance = _section(render_summary(example_results(nodes=16), "en"), "provenance")
    assert provenance.count("<table") == 2  # the cluster, then the nodes
    assert re.findall(r'<tr id="node-(gpu-\d\d)">', provenance) == [f"gpu-{n:02d}" for n in range(1, 17)]
    assert '<span lang="en">Same on every node</span> (16):' in provenance and 'NVIDIA driver <span class="mono">580.95.05</span>' in provenance
    head = provenance.split('<table class="nodes">')[1].split("</thead>")[0]
    assert re.findall(r"<th>(?:<span lang=\"en\">)?([^<]+)", head) == ["Nodes", "Address"]
    assert "<td>10.20.0.26</td>" in provenance.split('id="node-gpu-16"')[1].split("</tr>")[0]
    single = _section(render_summary(example_results(), "en"), "provenance")
    assert "Same on every node" not in single and "<td>580.95.05</td>" in single


def test_any_status_string_renders_with_a_label_and_a_safe_class() -> None:
    results = example_results(statuses={"ADR-0001.hardening-baseline": "recorded",
                                        "ADR-0001.argocd-registered": "not-selected",
                                        "ADR-0001.cni-cilium": "Some <new> status"})
    results["counts"] = {"passed": 27, "recorded": 1, "not-selected": 1, "Some <new> status": 1}
    html = render_summary(results, "both")
    matrix = _section(html, "matrix")
    assert '<td class="st status s-recorded"><span lang="ko">기록됨 (정보)</span>' in matrix
    assert '<td class="st status s-not-selected"><span lang="ko">선택 안 됨</span>' in matrix
    assert '<td class="st status s-some--new--status">Some &lt;new&gt; status' in matrix
    assert '<span lang="en">not selected</span>: 1</span>' in _section(html, "run")


def test_the_scope_and_leftover_namespaces_are_shown_when_results_carry_them() -> None:
    results = example_results()
    results["scope"] = {"label": "GPU chain", "markexpr": "gpu"}
    results["leftover_namespaces"] = [{"name": "dgxspark-cuda-20260101T000000Z-aaaa", "run_id": "20260101T000000Z-aaaa",
                                       "removed": False}]
    html = render_summary(results, "en")
    assert '<div class="scope" id="scope"><span lang="en">Scope</span>: GPU chain</div>' in _section(html, "verdict")
    leftovers = _section(html, "leftovers")
    assert re.findall(r"<th>([^<]+)</th>", leftovers) == ["name", "run_id", "removed"]
    assert '<td class="mono">dgxspark-cuda-20260101T000000Z-aaaa</td>' in leftovers and "<td class=\"mono\">false</td>" in leftovers
    plain = render_summary(example_results(), "en")
    assert 'id="leftovers"' not in plain and 'id="scope"' not in plain and "all rules" in _section(plain, "run")


def test_a_full_scope_is_a_whole_run_and_a_partial_one_names_its_unverified_prerequisites() -> None:
    results = example_results()
    results["scope"] = {"name": "full", "full": True, "selected": [], "not_selected": [],
                        "unverified_prerequisites": []}
    assert 'id="scope"' not in render_summary(results, "en")
    results["scope"] = {"name": "GPU chain", "full": False, "selected": ["ADR-0002.allocatable"],
                        "not_selected": ["ADR-0001.site-layout"],
                        "unverified_prerequisites": ["ADR-0002.host-nvml", "ADR-0001.node-ready"]}
    banner = _section(render_summary(results, "en"), "verdict")
    assert ('<div class="scope" id="scope"><span lang="en">Scope</span>: GPU chain · <span lang="en">unverified '
            'prerequisites</span>: <span class="mono">ADR-0002.host-nvml, ADR-0001.node-ready</span></div>') in banner


def test_every_value_is_escaped_and_only_evidence_paths_become_links() -> None:
    results = example_results()
    results["rules"][0]["statement_ko"] = "<img src=x onerror=alert(1)>"
    results["rules"][0]["title"] = "<img src=x onerror=alert(1)>"  # an English page shows a passed rule's title
    results["rules"][0]["tests"][0]["evidence"] = "javascript:alert(1)"
    results["rules"][1]["tests"][0]["evidence"] = "../../etc/passwd"
    html = render_summary(results, "en")
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'href="javascript:' not in html and 'href="../' not in html
    assert "Kim Engineer &lt;script&gt;" in html


@pytest.mark.slow
def test_one_language_shows_only_its_labels() -> None:
    results = example_results()
    english = render_summary(results, "en")
    korean = render_summary(results, "ko")
    assert "Traceability matrix" in english and "추적성 매트릭스" not in english
    assert "추적성 매트릭스" in korean and "Traceability matrix" not in korean
    assert '<html lang="en">' in english and '<html lang="ko">' in korean
    assert "site rule site_layout holds" not in korean and "site rule site_layout holds" in english
    both = render_summary(results, "both")
    assert "추적성 매트릭스" in both and "Traceability matrix" in both


def test_an_accepted_real_run_has_no_watermark() -> None:
    html = render_summary(example_results(simulated=False), "en")
    assert '<span id="verdict-word">ACCEPTED</span>' in html
    assert "SIMULATED" not in html


@pytest.mark.slow
def test_rendering_is_deterministic_and_refuses_incomplete_results() -> None:
    results = example_results(statuses=FAULT)
    assert render_summary(results) == render_summary(results)
    with pytest.raises(SummaryError, match="results.json lacks verdict; the summary needs run, verdict and rules"):
        render_summary({"run": {}, "rules": []})
    with pytest.raises(SummaryError, match="language must be one of ko, en, both, got 'fr'"):
        render_summary(results, "fr")


needs_chromium = pytest.mark.skipif(chromium() is None or shutil.which("pdfinfo") is None,
                                    reason="needs chromium and poppler-utils (Debian: apt-get install chromium poppler-utils)")


def _print(tmp_path: Path, results: dict, lang: str = "both") -> Path:
    page = tmp_path / "summary.html"
    page.write_text(render_summary(results, lang), encoding="utf-8")
    return print_pdf(page, tmp_path / "summary.pdf")


def pdf_pages(pdf: Path) -> int:
    """Pages of a PDF as pdfinfo counts them."""
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"^Pages:\s+(\d+)$", info, re.M).group(1))


def pdf_text(pdf: Path, *pages: int) -> str:
    """The PDF's text (pdftotext), of the given first and last page when given."""
    span = ["-f", str(pages[0]), "-l", str(pages[-1])] if pages else []
    return subprocess.run(["pdftotext", *span, str(pdf), "-"], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
@needs_chromium
def test_a_healthy_one_node_run_prints_on_at_most_four_a4_pages(tmp_path: Path) -> None:
    pdf = _print(tmp_path, example_results(simulated=False))
    assert 1 < pdf_pages(pdf) <= 4
    boxes = {tuple(round(float(v)) for v in box.split())
             for box in re.findall(rb"/MediaBox \[([0-9. ]+)\]", pdf.read_bytes())}
    assert boxes == {(0, 0, 595, 842)}, boxes  # every page A4 (210 x 297 mm in points)


@pytest.mark.slow
@needs_chromium
def test_a_healthy_sixteen_node_run_prints_on_at_most_eight_a4_pages(tmp_path: Path) -> None:
    pdf = _print(tmp_path, example_results(simulated=False, nodes=16))
    assert 1 < pdf_pages(pdf) <= 8
    text = pdf_text(pdf)
    assert "gpu-16" in text and "10.20.0.26" in text


@pytest.mark.slow
@needs_chromium
def test_the_printed_first_page_holds_verdict_site_nodes_run_ladder_root_cause_remediation_and_the_sign_off_last(
    tmp_path: Path,
) -> None:
    pdf = _print(tmp_path, _faulty())
    first = pdf_text(pdf, 1)
    flat = re.sub(r"\s+", " ", first)
    for expected in ("REJECTED · 불합격", "SIMULATED", "tirosh-home", "gpu-01", "20260105T010203Z-0a1b",
                     "2026-01-05 10:02:03 KST", "Layer ladder", "ADR-0002.host-nvml",
                     "NVML could not be initialised", KO_NVML, "Fix the host layer first; do not reinstall RKE2.",
                     "sign-off page at the end"):
        assert expected in flat, expected
    last = re.sub(r"\s+", " ", pdf_text(pdf, pdf_pages(pdf) - 1, pdf_pages(pdf)))  # the sign-off page(s)
    for expected in ("Sign-off", "Vendor engineer", "Hospital IT", "Security officer", "accept with waivers",
                     "What the signature means", "Passed rules: expected and observed", "Identity"):
        assert expected in last, expected
    assert [layer for layer in LAYERS if layer not in re.sub(r"\s+", "", first)] == []  # names may wrap at '-'
    assert "Traceability matrix" not in flat  # the matrix starts on page 2


@pytest.mark.slow
@needs_chromium
def test_the_printed_pdf_holds_every_rule_in_matrix_and_detail_and_the_korean_sentences(tmp_path: Path) -> None:
    pdf = _print(tmp_path, _faulty())
    flat = re.sub(r"\s+", "", pdf_text(pdf))
    assert [rule for rule in RULE_IDS if flat.count(rule) < 2] == []  # in the matrix and in the detail
    assert "host계층의규칙host_nvml이(가)충족된다." in flat
    assert "suites/host/test_host.py::test_host_nvml" in flat
    assert "Traceabilitymatrix" in flat and "Provenance(pernode)" in flat


@pytest.mark.slow
@needs_chromium
def test_every_printed_page_carries_simulated_the_run_and_its_page_number(tmp_path: Path) -> None:
    pdf = _print(tmp_path, example_results(nodes=16))
    pages = pdf_pages(pdf)
    for page in range(1, pages + 1):
        text = subprocess.run(["pdftotext", "-layout", "-f", str(page), "-l", str(page), str(pdf), "-"],
                              capture_output=True, text=True, check=True).stdout
        assert "SIMULATED — 모의 환경 (테스트베드) 실행" in text, page
        last = [line for line in text.splitlines() if line.strip()][-1]
        assert re.search(rf"tirosh-home · 20260105T010203Z-0a1b\s+{page}\s*/\s*{pages}$", last), last
    (tmp_path / "real").mkdir()
    real = _print(tmp_path / "real", example_results(simulated=False))
    assert "SIMULATED" not in pdf_text(real)


def test_values_in_the_page_margins_cannot_leave_their_css_string() -> None:
    results = example_results()
    results["run"]["site"] = 'x"; } body { display: none } </style><script>alert(1)</script>'
    html = render_summary(results, "en")
    style = html.split("<style>")[1].split("</style>")[0]
    assert "<script" not in html and "</style><" not in style and 'x"; }' not in style
    assert '\\22 ' in style and '\\3c /style\\3e ' in style


FORECAST = [
    {"id": "SPARK.driver-version-skew", "layer": "host", "severity": "major", "status": "advised",
     "title": "The loaded NVIDIA kernel module, the module on disk, libnvidia-ml and the NVIDIA packages are one version",
     "nodeid": "suites/host/test_forecast_upkeep.py::test_skew[gpu-01]", "evidence": [], "target": "ssh:gpu-01",
     "due": "at the next GPU pod restart or reboot",
     "message": "gpu-01 (192.168.10.21:22): the driver is not one version (loaded kernel module: 580.95.05; kernel "
                "module on disk (modinfo nvidia): 580.105.08; libnvidia-ml.so.580.95.05: 580.95.05)",
     "fix": "Finish the upgrade or downgrade to the loaded version, then reboot and rerun pytest -m gpu.",
     "fix_ko": "같은 버전으로 업그레이드를 끝내거나 로드된 버전으로 되돌린 뒤 재부팅하고 pytest -m gpu를 다시 실행한다."},
    {"id": "SPARK.reboot-pending", "layer": "host", "severity": "major", "status": "advised", "title": "No reboot",
     "nodeid": "n2", "evidence": [], "target": "ssh:gpu-01", "due": "at the next reboot",
     "message": "gpu-01: a reboot is pending for linux-image-6.17.0-1018-nvidia (/var/run/reboot-required.pkgs)",
     "fix": "Reboot in a maintenance window and rerun the suite.", "fix_ko": "점검 시간에 재부팅하고 다시 실행한다."},
    {"id": "SPARK.unattended-upgrades-unheld", "layer": "host", "severity": "major", "status": "advised",
     "title": "Unattended", "nodeid": "n3", "evidence": [], "target": "ssh:gpu-01", "due": "daily",
     "message": "gpu-01: unattended-upgrades may replace libnvidia-compute-580, nvidia-dkms-580-open",
     "fix": "Blacklist nvidia-, libnvidia-, cuda-, linux- in 50unattended-upgrades.",
     "fix_ko": "50unattended-upgrades의 blacklist에 nvidia-, libnvidia-, cuda-, linux-를 넣는다."},
]


@pytest.mark.slow
def test_page_one_carries_the_forecast_box_with_what_breaks_next_and_its_fix_in_both_languages() -> None:
    results = {**_faulty(), "forecast": FORECAST, "forecast_mode": "advise",
               "forecast_checked": {e["id"]: "advised" for e in FORECAST}}
    box = _section(_first_page(render_summary(results, "both")), "forecast")
    assert "Forecast: what will break next" in box and "advisory (not part of the verdict)" in box
    assert [m for m in re.findall(r'data-rule="([^"]+)"', box)] == [e["id"] for e in FORECAST]
    assert "580.105.08" in box and "at the next reboot" in box
    assert "점검 시간에 재부팅하고 다시 실행한다." in box and "Reboot in a maintenance window" in box
    enforced = _section(render_summary({**results, "forecast_mode": "enforce"}, "en"), "forecast")
    assert "enforced (rke2/vars.yml forecast: enforce)" in enforced


def test_page_one_says_nothing_was_advised_when_the_forecast_is_silent() -> None:
    results = {**example_results(), "forecast": [], "forecast_checked": {"SPARK.reboot-pending": "silent"}}
    box = _section(_first_page(render_summary(results, "en")), "forecast")
    assert 'id="no-forecast"><span lang="en">Nothing advised</span> (SPARK.reboot-pending: silent)' in box


@pytest.mark.slow
@needs_chromium
def test_a_faulty_run_with_three_forecasts_keeps_page_one_and_prints_on_at_most_four_pages(tmp_path: Path) -> None:
    results = {**_faulty(), "forecast": FORECAST, "forecast_mode": "advise",
               "forecast_checked": {e["id"]: "advised" for e in FORECAST}}
    pdf = _print(tmp_path, results)
    assert pdf_pages(pdf) <= 4
    first = re.sub(r"\s+", " ", pdf_text(pdf, 1))
    for expected in ("Forecast: what will break next", "SPARK.unattended-upgrades-unheld", "sign-off page at the end"):
        assert expected in first, expected
    last = re.sub(r"\s+", " ", pdf_text(pdf, pdf_pages(pdf) - 1, pdf_pages(pdf)))  # the sign-off page, its own
    assert "Sign-off" in last and "Security officer" in last
