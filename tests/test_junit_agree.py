"""junit.xml writes each test's results.json status as its element: a target fault met in a check's call phase is an
<error>, never a <failure>; a fixture's own judgement in setup is a <failure>, never an <error>; the counts follow;
the file validates against the common JUnit schema (Jenkins' junit-10.xsd: no per-testcase properties) and still
carries each test's status (the element's type and a system-out line)."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_dgxspark.report.junitagree import STATUS_PREFIX, disagreements
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
    """testcase name -> (its dgxspark status line's status, the tag of its outcome element, that element's message)."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        status = next((o.text[len(STATUS_PREFIX):].split(";")[0] for o in case.iter("system-out")
                       if (o.text or "").startswith(STATUS_PREFIX)), None)
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        found[case.get("name")] = (status, None if outcome is None else outcome.tag,
                                   None if outcome is None else outcome.get("message"))
    return found


@pytest.mark.slow
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


SCHEMA = Path(__file__).parent / "data" / "junit-jenkins.xsd"


@pytest.mark.slow
def test_the_bundles_junit_xml_validates_against_the_common_junit_schema_and_says_each_status(pytester, suite):
    lxml = pytest.importorskip("lxml.etree")
    suite("all", SUITE)
    pytester.runpytest(*SITE_ARGS)
    run = pytester.path / "out" / "latest"
    schema = lxml.XMLSchema(lxml.parse(str(SCHEMA)))
    assert schema.validate(lxml.parse(str(run / "junit.xml"))), schema.error_log
    assert disagreements(run) == []
    case = next(c for c in ET.parse(run / "junit.xml").getroot().iter("testcase") if c.get("name") == "test_reach")
    assert [(c.tag, c.get("type")) for c in case if c.tag != "system-out"] == [("error", "error")]
    assert case.find("system-out").text == "dgxspark status: error; rule ADR-0002.host-static-ip: error"
    # pytest's own file (per-testcase properties, file/line attributes) is what the schema refuses
    (run / "junit.xml").write_text(
        '<testsuites><testsuite name="p" tests="1" failures="0" errors="0"><testcase name="t" file="x.py" line="3">'
        '<properties><property name="rule" value="r"/></properties></testcase></testsuite></testsuites>')
    assert not schema.validate(lxml.parse(str(run / "junit.xml")))


@pytest.mark.slow
def test_a_junit_file_that_disagrees_with_results_json_is_named_by_test(pytester, suite):
    suite("all", SUITE)
    pytester.runpytest(*SITE_ARGS)
    run = pytester.path / "out" / "latest"
    tree = ET.parse(run / "junit.xml")
    element = next(c for c in tree.getroot().iter("error"))
    element.tag, _ = "failure", element.set("type", "failed")
    tree.write(run / "junit.xml")
    found = disagreements(run)
    assert any("outcome elements [('failure', 'failed')], results.json (error) calls for [('error', 'error')]" in p
               for p in found), found


@pytest.mark.slow
def test_a_junit_file_that_cannot_be_rewritten_is_kept_and_the_run_says_so(pytester, suite, monkeypatch):
    suite("all", SUITE)
    import errno

    import pytest_dgxspark.report.junitagree as junitagree

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(junitagree, "write_atomic", full)  # pytester runs in this process
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines(["dgxspark bundle ERROR: junit.xml kept as pytest wrote it, not brought in line with "
                                 "results.json: [[]Errno 28[]] No space left on device"])
    run = pytester.path / "out" / "latest"
    assert disagreements(run) != []  # pytest's file, unchanged: verify says so
    assert json.loads((run / "results.json").read_text())["verdict"] == "REJECTED"
