"""An error that judged nothing (not verifiable, unreadable evidence) is never a root cause: the terminal, the closing
block, results.json, junit.xml and the summary say the same status and the same words, with the check's own fix."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_dgxspark.report.junitagree import STATUS_PREFIX
from tests.pytester_args import SITE_ARGS

EXIT_INCOMPLETE = 8
NOT_VERIFIABLE = (
    "from pytest_dgxspark.checking import not_verifiable, unreadable\n\n"
    "@pytest.mark.rule('ADR-0001.argocd-registered')\ndef test_registered():\n"
    "    not_verifiable('vars.yml names no Argo CD management cluster (argocd_context)',\n"
    "                   'Set argocd_context in vars.yml (the management cluster\\'s kubeconfig context) and rerun.',\n"
    "                   'vars.yml에 argocd_context를 설정하고 다시 실행한다.')\n\n"
    "@pytest.mark.rule('ADR-0002.operator-separate')\ndef test_separate():\n"
    "    unreadable('/x/site: no Makefile', fix='Run the suite on the site inside its repository.')\n\n"
    "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n"
)


def results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


def junit_statuses(pytester: pytest.Pytester) -> dict[str, tuple[str | None, str | None]]:
    """testcase name -> (its dgxspark status property, the message of its failure/error/skipped element)."""
    root = ET.parse(pytester.path / "out" / "latest" / "junit.xml").getroot()
    found = {}
    for case in root.iter("testcase"):
        line = next((o.text for o in case.iter("system-out") if (o.text or "").startswith(STATUS_PREFIX)), "") or ""
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        found[case.get("name")] = (line[len(STATUS_PREFIX):].split(";")[0] or None,
                                   outcome.get("message") if outcome is not None else None)
    return found


@pytest.mark.slow
def test_a_required_rule_the_run_cannot_verify_is_an_error_everywhere_with_its_own_fix_and_no_root_cause(pytester, suite):
    suite("all", NOT_VERIFIABLE)
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == EXIT_INCOMPLETE
    out = result.stdout.str()
    assert "suites/all/test_all.py E.E " in out and "N/A" not in out
    result.stdout.fnmatch_lines([
        "*ERROR at call of test_registered*",
        "not verifiable: vars.yml names no Argo CD management cluster (argocd_context)",
        "fix: Set argocd_context in vars.yml (the management cluster's kubeconfig context) and rerun.",
        "*1 passed, *2 errors in*",
        "dgxspark: INCOMPLETE, scope: full",
        "  lowest broken layer: none",
        "  root causes: none",
        "  not judged (an error kept these rules from being judged; never a root cause):",
        "    ADR-0002.operator-separate (unreadable): /x/site: no Makefile",
        "      fix: Run the suite on the site inside its repository.",
        "    ADR-0001.argocd-registered (not-verifiable): not verifiable: vars.yml names no Argo CD management "
        "cluster (argocd_context)",
        "      fix: Set argocd_context in vars.yml (the management cluster's kubeconfig context) and rerun.",
        "*",
        "  rules: 2 error, 28 untested, 1 passed, 2 not-applicable",  # image-mirror (not air-gapped), gpu-sharing
    ])
    assert "Make the target reachable" not in out and "make rke2/argocd/register" not in out
    doc = results(pytester)
    assert doc["root_causes"] == [] and doc["root_cause_details"] == []
    argo = next(r for r in doc["rules"] if r["id"] == "ADR-0001.argocd-registered")
    assert argo["status"] == "error" and argo["tests"][0]["outcome"] == "error"
    assert argo["tests"][0]["message"] == "not verifiable: vars.yml names no Argo CD management cluster (argocd_context)"
    assert [(d["rule"], d["kind"], d["fix"]) for d in doc["not_judged"]] == [
        ("ADR-0002.operator-separate", "unreadable", "Run the suite on the site inside its repository."),
        ("ADR-0001.argocd-registered", "not-verifiable",
         "Set argocd_context in vars.yml (the management cluster's kubeconfig context) and rerun.")]
    assert doc["not_judged"][1]["fix_ko"] == "vars.yml에 argocd_context를 설정하고 다시 실행한다."
    assert doc["counts"]["error"] == 2 and "not-applicable" not in {r["status"] for r in doc["rules"]
                                                                    if r["id"] == "ADR-0001.argocd-registered"}
    junit = junit_statuses(pytester)
    assert junit["test_registered"] == ("error", "not verifiable: vars.yml names no Argo CD management cluster "
                                        "(argocd_context)\nfix: Set argocd_context in vars.yml (the management "
                                        "cluster's kubeconfig context) and rerun.")
    assert junit["test_driver"] == ("passed", None)


@pytest.mark.slow
def test_the_summary_lists_what_was_not_judged_apart_from_the_root_causes(pytester, suite):
    suite("all", NOT_VERIFIABLE)
    pytester.runpytest(*SITE_ARGS)
    html = next((pytester.path / "out" / "latest").glob("summary.html")).read_text()
    causes = html[html.index('id="root-causes"'):html.index('id="signoff"')]
    assert 'id="no-root-causes"' in causes and 'id="not-judged"' in causes
    argo = causes[causes.index('id="unjudged-ADR-0001.argocd-registered"'):]
    assert "not verifiable: vars.yml names no Argo CD management cluster (argocd_context)" in argo
    assert "Set argocd_context in vars.yml (the management cluster&#39;s kubeconfig context) and rerun." in argo
    assert 'id="cause-ADR-0001.argocd-registered"' not in causes
