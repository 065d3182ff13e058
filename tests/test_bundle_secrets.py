"""No secret byte in any bundle file: planted secrets of every kind, at default verbosity, -vv and DEBUG logging."""
from __future__ import annotations

import base64
import html
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tests.conftest import REPO

# slow: the suite against a testbed with planted secrets (make test only; make test-fast deselects it)
pytestmark = pytest.mark.slow

SCENARIO = REPO / "tests" / "scenarios" / "secrets-planted"
# Every value planted in the scenario, its site, the CI environment and --metadata (where: value), at least 50 in
# every place issue 20 names: the site's and the live HelmChart (repo userinfo and ?access_token=, set, annotations,
# env values), the inventory, the host files (RKE2 drop-ins, registries.yaml, netplan), manual check notes (free text:
# known by shape), the CI environment (pytest-metadata's JENKINS_URL, GIT_URL, BUILD_URL), --metadata and the CUDA
# pod's log.
PLANTED = {
    "helm repo URL userinfo": "Chart-Pass-Planted-4417",
    "helm repo URL ?access_token=": "Chart-Access-Planted-7400",
    "valuesContent env AWS_SECRET_ACCESS_KEY": "Aws-Secret-Planted-30391",
    "valuesContent env NGC_API_KEY": "nvapi-planted-ngc-key-81177",
    "valuesContent env GITLAB_TOKEN": "glpat-PlantedGitlabToken007403",
    "valuesContent env DB_PASSWORD": "Db-Pass-Planted-7404",
    "valuesContent env REGISTRY_TOKEN": "Registry-Token-Planted-7410",
    "valuesContent env HTTPS_PROXY userinfo": "Proxy-Pass-Planted-7405",
    "valuesContent flow env DCGM_PASSWORD": "Dcgm-Pass-Planted-7409",
    "spec.set password": "Set-Pass-Planted-6620",
    "spec.set token": "Set-Token-Planted-7401",
    "spec.set apiKey": "nvapi-Set-Planted-7407",
    "spec.set secret": "Validator-Secret-Planted-7408",
    "annotation api key": "sk-annotation-planted-55123",
    "annotation webhook ?token=": "Webhook-Token-Planted-7402",
    "ansible_password": "Ansible-Pass-Planted-4471",
    "ansible_become_password": "Become-Pass-Planted-9902",
    "ansible_ssh_pass": "Ssh-Pass-Planted-7500",
    "RKE2 join token (flow-style drop-in)": "0c4a6f2ed5a1c3b7e9",
    "RKE2 join token whole": "K10e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855::server:0c4a6f2ed5a1c3b7e9",
    "RKE2 agent-token": "Agent-Token-Planted-7731",
    "etcd-s3-access-key": "AKIAPLANTED0EXAMPLE7",
    "etcd-s3-secret-key": "wJalrPlantedSecretKeyEXAMPLE0009",
    "etcd-s3-session-token": "S3-Session-Planted-7100",
    "datastore-endpoint userinfo": "Datastore-Pass-Planted-7101",
    "registries.yaml password": "Registry-Pass-Planted-7200",
    "registries.yaml auth": "cm9ib3Q6UmVnaXN0cnktQXV0aC1QbGFudGVkLTcyMDE=",
    "registries.yaml auth, decoded": "Registry-Auth-Planted-7201",
    "registries.yaml identity_token": "Registry-Identity-Planted-7202",
    "netplan wifi password": "Wifi-Pass-Planted-7300",
    "netplan wifi password, block scalar": "Wifi-Block-Planted-7301",
    "netplan wifi password, quoted over two lines": "Wifi-Quoted-Planted-7302",
    "netplan wifi password, its second line": "-Continued-7303",
    "valuesContent password, block scalar": "Block-Pass-Planted-7411",
    "valuesContent apiKeys list": "List-Key-Planted-7412",
    "valuesContent env REGISTRY_PASS, value first": "Env-Rev-Planted-7413",
    "valuesContent env NGC_CREDS": "Creds-Planted-7414",
    "--metadata-from-json-file list item password=": "Meta-List-Planted-7802",
    "--metadata-from-json-file list item token:": "Meta-List-Token-Planted-7803",
    "manual check note ghp_ token": "ghp_PlantedNoteGithubToken00000000007604",
    "manual check note glpat- token": "glpat-PlantedNoteGitlab0007605",
    "manual check note ?access_token=": "Wiki-Access-Planted-7600",
    "manual check note Slack token": "xoxb-7602-7602-PlantedSlackNoteToken",
    "manual check note password:": "Note-Pass-Planted-7601",
    "CI JENKINS_URL userinfo": "Jenkins-Pass-Planted-8812",
    "CI JENKINS_URL ?token=": "Jenkins-Token-Planted-7700",
    "CI GIT_URL ?private_token=": "Git-Private-Planted-7701",
    "CI BUILD_URL userinfo": "Build-Pass-Planted-7702",
    "CI GIT_BRANCH bare ghp_ token": "ghp_PlantedBranchToken000000000000007703",
    "environment GITHUB_TOKEN": "ghp_PlantedEnvToken0000000000000000007704",
    "environment NGC_API_KEY": "nvapi-Env-Planted-7705",
    "--metadata password": "Meta-Pass-Planted-5521",
    "--metadata token": "Meta-Token-Planted-7800",
    "--metadata URL userinfo": "Meta-Url-Pass-Planted-7801",
    "CUDA pod log ghp_ token": "ghp_PlantedCudaLogToken00000000000007901",
    "CUDA pod log AWS key": "AKIAPLANTEDCUDA00079",
    "CUDA pod log ?access_token=": "Cuda-Access-Planted-7900",
    "CUDA pod log password=": "Cuda-Pass-Planted-7903",
    "CI JOB_NAME ?password=": "Job-Pass-Planted-7706",
}
ENV = {
    "JENKINS_URL": "https://ci-admin:Jenkins-Pass-Planted-8812@jenkins.example.org/?token=Jenkins-Token-Planted-7700",
    "GIT_URL": "https://git.example.org/site.git?private_token=Git-Private-Planted-7701",
    "BUILD_URL": "https://ci:Build-Pass-Planted-7702@jenkins.example.org/job/site/77/",
    "GIT_BRANCH": "origin/ghp_PlantedBranchToken000000000000007703",
    "JOB_NAME": "site-accept https://jenkins.example.org/trigger?password=Job-Pass-Planted-7706",
    "GITHUB_TOKEN": "ghp_PlantedEnvToken0000000000000000007704",
    "NGC_API_KEY": "nvapi-Env-Planted-7705",
    "BUILD_ID": "77",
}
METADATA = ("--metadata", "DB_PASSWORD", "Meta-Pass-Planted-5521", "--metadata", "API_TOKEN", "Meta-Token-Planted-7800",
            "--metadata", "REPO", "https://deploy:Meta-Url-Pass-Planted-7801@git.example.org/site.git")


def _forms(value: str) -> list[bytes]:
    """The value raw, JSON-, HTML- and URL-escaped, and base64-encoded wherever it sits in a longer encoding."""
    escaped = json.dumps(value)[1:-1]
    texts = {value, escaped, html.escape(value), html.escape(escaped), quote(value, safe=""), quote_plus(value)}
    for text in (value, escaped):
        raw = text.encode()
        for k in range(3):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                encoded = encode(b"\0" * k + raw).decode()
                texts.add(encoded[-(-8 * k // 6):(8 * (k + len(raw))) // 6])
    return [t.encode() for t in texts if len(t) >= 6]


def _run(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    report_dir = tmp_path / "reports"
    metadata = tmp_path / "metadata.json"  # a CI's metadata file: secret strings in a list
    metadata.write_text(json.dumps({"deploy": ["password=Meta-List-Planted-7802", "token: Meta-List-Token-Planted-7803"]}))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "suites", "--testbed", str(SCENARIO), "--report-dir", str(report_dir),
         "-p", "no:cacheprovider", "--dgxspark-cuda-timeout", "20", *METADATA,
         "--metadata-from-json-file", str(metadata), *extra],
        cwd=REPO, capture_output=True, text=True, timeout=400, check=False, env={**os.environ, **ENV},
    )
    return proc, (report_dir / "latest").resolve()


def test_at_least_fifty_secrets_are_planted():
    assert len(PLANTED) >= 50 and len(set(PLANTED.values())) == len(PLANTED)


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
    assert not any(value in proc.stdout + proc.stderr for value in PLANTED.values()), "the terminal shows no secret"
    kinds = {entry["kind"] for entry in results["redactions"]}
    assert {"secret-key-value", "url-userinfo"} <= kinds
    assert all(set(entry) == {"kind", "where", "count"} for entry in results["redactions"])
    assert stat.S_IMODE(bundle.stat().st_mode) in (0o700, 0o750)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} <= {oct(0o600), oct(0o640)}
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in bundle.rglob("*") if d.is_dir()} <= {oct(0o700), oct(0o750)}
