"""End to end: drift between two testbed runs (healthy, then a fault scenario); the bundles verify and print."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgxspark.report import cli
from pytest_dgxspark.report.attestation import read_envelope
from pytest_dgxspark.report.pdf import chromium

# slow: the suite against a testbed, then the printed bundle (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
BROKEN = ("failed", "error", "blocked")


def _run(report_dir: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--report-dir", str(report_dir), "-p", "no:cacheprovider",
         "-q", "--no-header", *args],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "DGXSPARK_PDF"},  # these runs print summary.pdf
    )
    results = report_dir / "latest" / "results.json"
    assert results.is_file(), f"no results.json\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    return json.loads(results.read_text(encoding="utf-8"))


@pytest.mark.skipif(not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server")
def test_drift_between_a_healthy_and_a_fault_testbed_run(tmp_path: Path) -> None:
    name = "device-plugin-crashloop"
    healthy_doc = _run(tmp_path / "a", "--testbed", "healthy")
    baseline = (tmp_path / "a" / "latest").resolve()
    assert cli.main(["verify", str(baseline)]) == 3  # consistent, no trust anchor: UNVERIFIED
    # dated past RKE2 v1.34's upstream end: page 1 also carries that forecast beside the known cause and the hardening
    doc = _run(tmp_path / "b", "--testbed", name, "--dgxspark-baseline", str(baseline), "--dgxspark-operator", "CI",
               "--dgxspark-run-date", "2026-12-02")
    before = {r["id"]: r["status"] for r in healthy_doc["rules"]}
    after = {r["id"]: r["status"] for r in doc["rules"]}
    want = sorted(r for r, s in after.items() if s in BROKEN and before.get(r) == "passed")
    assert "ADR-0002.operator-components" in want
    assert sorted(c["rule"] for c in doc["drift"]["regressed"]) == want
    assert doc["drift"]["baseline"] == {**doc["drift"]["baseline"], "run_id": healthy_doc["run"]["id"],
                                        "integrity": "verified"}
    run_dir = (tmp_path / "b" / "latest").resolve()
    assert cli.main(["verify", str(run_dir)]) == 3  # consistent, no trust anchor: UNVERIFIED
    summary = (run_dir / "summary.html").read_text(encoding="utf-8")
    assert '<section id="drift">' in summary and "SIMULATED" in summary
    statement = read_envelope(run_dir)[1]
    assert statement["predicate"]["result"] == "FAILED" and "ADR-0002.operator-components" in statement["predicate"]["failedTests"]
    ctrf = json.loads((run_dir / "ctrf.json").read_text(encoding="utf-8"))
    assert ctrf["results"]["summary"]["tests"] == sum(len(r["tests"]) for r in doc["rules"])
    if chromium() is None or shutil.which("pdfinfo") is None:
        pytest.skip("chromium or poppler-utils is not installed: summary.pdf not checked")
    info = subprocess.run(["pdfinfo", str(baseline / "summary.pdf")], capture_output=True, text=True, check=True).stdout
    assert 1 < int(re.search(r"^Pages:\s+(\d+)$", info, re.M).group(1)) <= 4  # the healthy one-node run
    first = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(run_dir / "summary.pdf"), "-"],
                           capture_output=True, text=True, check=True).stdout
    flat = " ".join(first.split())
    assert "REJECTED" in flat and "ADR-0002.operator-components" in flat and "sign-off page at the end" in flat
    assert "SPARK.component-support" in flat and "v0.17.4" in flat  # the forecast box and the known cause
