"""No secret byte in any bundle file: planted secrets of every kind, at default verbosity, -vv and DEBUG logging."""
from __future__ import annotations

import html
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCENARIO = REPO / "tests" / "scenarios" / "secrets-planted"
# Every value planted in the scenario, its site, the CI environment and --metadata (kind: value).
PLANTED = {
    "helm repo URL userinfo": "Chart-Pass-Planted-4417",
    "valuesContent env AWS_SECRET_ACCESS_KEY": "Aws-Secret-Planted-30391",
    "valuesContent env NGC_API_KEY": "nvapi-planted-ngc-key-81177",
    "spec.set password": "Set-Pass-Planted-6620",
    "annotation api key": "sk-annotation-planted-55123",
    "ansible_password": "Ansible-Pass-Planted-4471",
    "ansible_become_password": "Become-Pass-Planted-9902",
    "RKE2 join token (flow-style drop-in)": "0c4a6f2ed5a1c3b7e9",
    "RKE2 agent-token": "Agent-Token-Planted-7731",
    "etcd-s3-access-key": "AKIAPLANTED0EXAMPLE7",
    "etcd-s3-secret-key": "wJalrPlantedSecretKeyEXAMPLE0009",
    "CI variable through pytest-metadata": "Jenkins-Pass-Planted-8812",
    "--metadata password": "Meta-Pass-Planted-5521",
}


def _forms(value: str) -> list[bytes]:
    return [v.encode() for v in {value, json.dumps(value)[1:-1], html.escape(value)}]


def _run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    report_dir = tmp_path / "reports"
    env = {**os.environ, "JENKINS_URL": "https://ci-admin:Jenkins-Pass-Planted-8812@jenkins.example.org/",
           "BUILD_ID": "77"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--testbed", str(SCENARIO), "--report-dir", str(report_dir),
         "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "20", "--metadata", "DB_PASSWORD",
         "Meta-Pass-Planted-5521", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=400, check=False, env=env,
    )
    return proc, (report_dir / "latest").resolve()


@pytest.mark.parametrize("extra", [(), ("-vv", "--log-level=DEBUG", "-rA")], ids=["default", "-vv-debug-log"])
def test_no_planted_secret_reaches_any_bundle_file(tmp_path, extra):
    proc, bundle = _run(tmp_path, *extra)
    files = [p for p in bundle.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert names >= {"results.json", "report.html", "summary.html", "junit.xml", "MANIFEST.sha256"}, proc.stdout[-3000:]
    results = json.loads((bundle / "results.json").read_text())
    # the guard's scan found nothing to remove: the redaction layer caught every kind before it was written
    assert "secret_leaks" not in results, results.get("secret_leaks")
    assert "SECRET LEAK" not in proc.stdout + proc.stderr
    leaks = [(p.relative_to(bundle).as_posix(), kind) for p in files for kind, value in PLANTED.items()
             if any(form in p.read_bytes() for form in _forms(value))]
    assert leaks == []
    kinds = {entry["kind"] for entry in results["redactions"]}
    assert {"secret-key-value", "url-userinfo"} <= kinds
    assert all(set(entry) == {"kind", "where", "count"} for entry in results["redactions"])
    assert stat.S_IMODE(bundle.stat().st_mode) in (0o700, 0o750)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} <= {oct(0o600), oct(0o640)}
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in bundle.rglob("*") if d.is_dir()} <= {oct(0o700), oct(0o750)}
