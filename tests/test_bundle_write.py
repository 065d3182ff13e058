"""The bundle survives: results.json first and atomically, write failures named, private modes, the leak scan."""
from __future__ import annotations

import json
import stat

import pytest

from pytest_dgxspark.report.closing import EXIT_INCOMPLETE
from tests.pytester_args import SITE_ARGS

PASSING = "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver(evidence):\n    evidence.record('x', 1)\n"
FULL_DISK = """
import errno
import pytest_dgxspark.report.results as results

_original = results.write_atomic


def _full(path, text):
    if {match!r} in path.parent.name + "/" + path.name:
        raise OSError(errno.ENOSPC, "No space left on device")
    return _original(path, text)


def pytest_configure(config):
    results.write_atomic = _full


def pytest_unconfigure(config):
    results.write_atomic = _original
"""


@pytest.fixture
def full_disk(pytester, suite):
    """Run one passing host check on a disk that is full for every atomic write whose 'dir/name' holds `match`."""
    suite("host", PASSING)

    def run(match: str) -> pytest.RunResult:
        pytester.makeconftest(FULL_DISK.format(match=match))
        return pytester.runpytest(*SITE_ARGS)

    return run


@pytest.mark.slow
def test_results_json_is_written_before_junit_and_report_html_with_private_modes(pytester, suite):
    suite("host", PASSING)
    pytester.runpytest(*SITE_ARGS)
    run = (pytester.path / "out" / "latest").resolve()
    first = (run / "results.json").stat().st_mtime_ns
    assert first <= (run / "junit.xml").stat().st_mtime_ns
    assert first <= (run / "report.html").stat().st_mtime_ns
    assert stat.S_IMODE(run.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in run.rglob("*") if p.is_file()} == {0o640}
    assert not list((pytester.path / "out").glob(".latest-*")) and not list(run.glob(".results.json.tmp*"))


@pytest.mark.slow
def test_latest_is_replaced_by_each_run(pytester, suite):
    suite("host", PASSING)
    pytester.runpytest(*SITE_ARGS)
    first = (pytester.path / "out" / "latest").resolve()
    pytester.runpytest(*SITE_ARGS)
    second = (pytester.path / "out" / "latest").resolve()
    assert first != second and (pytester.path / "out" / "latest").is_symlink()
    assert json.loads((second / "results.json").read_text())["run"]["id"] == second.name


@pytest.mark.slow
def test_a_full_disk_while_writing_evidence_keeps_results_json_and_says_what_was_kept(pytester, full_disk):
    result = full_disk("evidence")
    result.stdout.fnmatch_lines([
        "dgxspark: BUNDLE INCOMPLETE ON DISK: evidence: 0 of 1 files written; kept results.json and those; "
        "first failure: */evidence/000-test_driver.json: not written (No space left on device)",
    ])
    run = (pytester.path / "out" / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["verdict"] == "INCOMPLETE"
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_full_disk_for_results_json_names_it_and_still_prints_the_verdict(full_disk):
    result = full_disk("results.json")
    result.stdout.fnmatch_lines([
        "dgxspark: BUNDLE NOT WRITTEN: */results.json: not written (No space left on device); nothing of this run "
        "was kept on disk: the verdict printed here is the only record",
        "dgxspark: INCOMPLETE*",
    ])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_a_full_disk_for_junit_xml_is_named_with_what_was_kept(pytester, suite):
    suite("host", PASSING)
    pytester.makeconftest(
        "import errno\nimport pytest\n\n"
        "@pytest.hookimpl(tryfirst=True)\ndef pytest_sessionfinish(session):\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device', 'out/x/junit.xml')\n")
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines(["dgxspark: BUNDLE INCOMPLETE ON DISK: out/x/junit.xml: not written (No space left on "
                                 "device); kept: evidence/000-test_driver.json, results.json"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_a_secret_that_reaches_a_bundle_file_removes_it_and_makes_the_run_incomplete(pytester, suite):
    inventory = pytester.path / "sites" / "tirosh-home" / "inventory.yml"
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver(pytestconfig):\n"
                  "    from pytest_dgxspark.report.results import run_info\n"
                  "    run = run_info(pytestconfig).dir\n    run.mkdir(parents=True, exist_ok=True)\n"
                  "    (run / 'stray.txt').write_text('written around the redaction: Become-Pass-Canary-1234')\n")
    inventory.write_text(inventory.read_text().replace("ansible_user: root",
                                                       "ansible_user: root\n          ansible_become_password: "
                                                       "Become-Pass-Canary-1234"))
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines([
        "dgxspark: SECRET LEAK: stray.txt held a secret-key-value read from */inventory.yml.all.children.rke2_servers"
        ".hosts.gpu-01.ansible_become_password: file removed; the run is INCOMPLETE",
    ])
    run = (pytester.path / "out" / "latest").resolve()
    assert not (run / "stray.txt").exists()
    doc = json.loads((run / "results.json").read_text())
    assert doc["verdict"] == "INCOMPLETE"
    assert doc["secret_leaks"] == [{"file": "stray.txt", "kind": "secret-key-value", "source": pytest.approx(
        doc["secret_leaks"][0]["source"])}]
    assert doc["secret_leaks"][0]["source"].endswith("ansible_become_password")
    assert any("reached stray.txt: the file was removed" in r for r in doc["verdict_reasons"])
    assert result.ret == EXIT_INCOMPLETE
    assert not any(b"Become-Pass-Canary-1234" in p.read_bytes() for p in run.rglob("*") if p.is_file())


def _in_mount_namespace(tmp_path, mount: str, *pytest_args: str):
    """Run pytest in a project copy whose report dir is a fresh tmpfs mount (a tiny or read-only disk)."""
    import shutil
    import subprocess
    import sys

    from tests.conftest import SITE, STANDIN_KUBECONFIG

    shutil.copytree(SITE, tmp_path / "sites" / "tirosh-home")
    (tmp_path / "sites" / "tirosh-home" / "rke2" / "kubeconfig.yml").write_text(STANDIN_KUBECONFIG)
    (tmp_path / "suites" / "host").mkdir(parents=True)
    (tmp_path / "suites" / "host" / "test_host.py").write_text(
        "import pytest\n\n@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver(evidence):\n"
        "    evidence.record('x', 'y' * 30000)\n")
    (tmp_path / "out").mkdir()
    script = (f"mount -t tmpfs -o {mount} tmpfs out && exec {sys.executable} -m pytest -p no:cacheprovider "
              f"--site sites/tirosh-home --report-dir out -q {' '.join(pytest_args)}")
    return subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.slow
def test_a_real_full_disk_names_the_partial_report_and_keeps_results_json(tmp_path):
    proc = _in_mount_namespace(tmp_path, "size=120k")
    assert "dgxspark: BUNDLE INCOMPLETE ON DISK: report.html (partial, removed): not written (No space left on " \
           "device); kept: evidence/000-test_driver.json, junit.xml, results.json" in proc.stdout, proc.stdout[-3000:]
    assert "dgxspark: INCOMPLETE, scope: full\n  lowest broken layer: none\n  root causes: none" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr and "INTERNALERROR" not in proc.stdout


@pytest.mark.slow
def test_a_read_only_report_dir_is_a_usage_error_before_any_target(tmp_path):
    proc = _in_mount_namespace(tmp_path, "ro,size=64k")
    assert proc.returncode == 4
    assert "cannot be written (Read-only file system); expected a directory this user can create files in" in proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr


FINISH_ON_A_FULL_DISK = """
import json, os
from pathlib import Path
from pytest_dgxspark.report import bundle
from pytest_dgxspark.report.example import example_results, write_example_bundle

os.environ["DGXSPARK_PDF"] = "off"
run = write_example_bundle(Path("out/run"), example_results())
fd = os.open("out/filler", os.O_WRONLY | os.O_CREAT)
try:
    while os.write(fd, b"x" * 4096):
        pass
except OSError:
    pass
outcome = bundle.finish_bundle(run, "both")
print(json.dumps({"problems": outcome.problems,
                  "files": sorted(p.name for p in run.iterdir() if p.is_file())}))
"""


@pytest.mark.slow
def test_a_full_disk_while_finishing_the_bundle_leaves_no_empty_or_partial_file(tmp_path):
    """A real tmpfs filled to the last page: summary, CTRF, attestation and manifest each fail, and leave nothing."""
    import subprocess
    import sys

    (tmp_path / "out").mkdir()
    (tmp_path / "finish.py").write_text(FINISH_ON_A_FULL_DISK)
    proc = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=2m tmpfs out && exec {sys.executable} "
                           "finish.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = json.loads(proc.stdout)
    assert done["problems"] == [f"{name} not written (No space left on device)"
                                for name in ("summary.html", "ctrf.json", "signing.json", "attestation.intoto.json",
                                             "MANIFEST.sha256")]
    assert done["files"] == ["results.json"]
