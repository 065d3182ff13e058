"""junit.xml writes each test's results.json status as its element: a target fault met in a check's call phase is an
<error>, never a <failure>; a fixture's own judgement in setup is a <failure>, never an <error>; the counts follow."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from pytest_dgxspark.report.junitagree import agree
from tests.pytester_args import SITE_ARGS, SSH_FAULT

SUITE = (
    "from pytest_dgxspark.checking import TargetError\nfrom pytest_dgxspark.targets.causes import SSH_CAUSES\n\n"
    "@pytest.fixture\ndef no_node():\n    pytest.fail('the cluster has no Node named gpu-01')\n\n"
    "@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_reach():\n"
    f"    {SSH_FAULT}\n\n"
    "@pytest.mark.rule('ADR-0001.node-metadata')\ndef test_node(no_node):\n    pass\n\n"
    "@pytest.mark.rule('ADR-0001.cni-cilium')\ndef test_cni():\n    assert False, 'the CNI is canal, not cilium'\n\n"
    "@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_config():\n    pass\n\n"
    "from pytest_dgxspark.targets.causes import API_CAUSES\n\n"
    "@pytest.fixture\ndef dead_api():\n"
    "    raise TargetError('Kubernetes API of context x: cannot read GET /api/v1/nodes: refused', "
    "target='api:tirosh-home/rke2/gpu', cause=API_CAUSES['refused'])\n\n"
    "@pytest.mark.rule('ADR-0002.cuda-sample')\ndef test_setup_fault(dead_api):\n    pass\n"
)


def junit_cases(path) -> dict[str, tuple[str | None, str | None, str | None]]:
    """testcase name -> (its dgxspark_status, the tag of its outcome element, that element's message)."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        status = next((p.get("value") for p in case.iter("property") if p.get("name") == "dgxspark_status"), None)
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        found[case.get("name")] = (status, None if outcome is None else outcome.tag,
                                   None if outcome is None else outcome.get("message"))
    return found


def test_junit_elements_follow_the_results_json_status_of_every_test(pytester, suite):
    suite("all", SUITE)
    pytester.runpytest(*SITE_ARGS)
    run = pytester.path / "out" / "latest"
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"]
                for r in json.loads((run / "results.json").read_text())["rules"] for t in r["tests"]}
    assert outcomes == {"test_reach": "error", "test_node": "failed", "test_cni": "failed", "test_config": "passed",
                        "test_setup_fault": "error"}
    cases = junit_cases(run / "junit.xml")
    assert cases["test_reach"][:2] == ("error", "error")
    assert cases["test_reach"][2].startswith("gpu-01 (10.0.0.21:22): cannot read the host over SSH: nothing accepts")
    assert cases["test_node"] == ("failed", "failure", "Failed: the cluster has no Node named gpu-01")
    assert cases["test_cni"][:2] == ("failed", "failure")
    assert cases["test_config"] == ("passed", None, None)
    assert cases["test_setup_fault"][:2] == ("error", "error")  # pytest: 'failed on setup with "..."'
    assert cases["test_setup_fault"][2].startswith("Kubernetes API of context x: cannot read GET /api/v1/nodes: refused")
    testsuite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert (testsuite.get("errors"), testsuite.get("failures"), testsuite.get("tests")) == ("2", "2", "5")
    # the bundle's manifest covers the file as rewritten
    manifest = (run / "MANIFEST.sha256").read_text()
    import hashlib

    assert f"{hashlib.sha256((run / 'junit.xml').read_bytes()).hexdigest()}  junit.xml" in manifest


def test_a_junit_file_that_already_agrees_is_left_as_it_is(tmp_path):
    path = tmp_path / "junit.xml"
    text = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="0" '
            'skipped="0" tests="1"><testcase classname="suites.host.test_host" name="test_x"><properties>'
            '<property name="dgxspark_status" value="error" /></properties><error message="m">m</error></testcase>'
            '</testsuite></testsuites>')
    path.write_text(text)
    assert agree(path) == 0
    assert path.read_text() == text


def test_a_junit_file_that_cannot_be_rewritten_is_kept_and_the_run_says_so(pytester, suite, monkeypatch):
    suite("all", SUITE)
    import errno

    import pytest_dgxspark.report.junitagree as junitagree

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(junitagree, "write_atomic", full)  # pytester runs in this process
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines(["dgxspark bundle: junit.xml kept as pytest wrote it (<failure>/<error> by phase, the "
                                 "dgxspark_status property is right): [[]Errno 28[]] No space left on device"])
    cases = junit_cases(pytester.path / "out" / "latest" / "junit.xml")
    assert cases["test_reach"][:2] == ("error", "failure")  # pytest's file, unchanged
    assert json.loads((pytester.path / "out" / "latest" / "results.json").read_text())["verdict"] == "REJECTED"
