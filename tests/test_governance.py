"""Waivers name an approver the site lists (with a key), carry the site digest they were granted against, show on the
terminal with approver and expiry, and one on a rule that did not fail is reported unused."""
from __future__ import annotations

import json

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from tests.conftest import APPROVER_KEY, grant_waiver
from tests.pytester_args import SITE_ARGS


def _all_rules(body_for: dict[str, str]) -> str:
    parts = []
    for i, rule in enumerate(load_catalog().ordered()):
        body = body_for.get(rule.id, "pass")
        parts.append(f"@pytest.mark.rule('{rule.id}')\ndef test_{i}():\n    {body}\n")
    return "\n".join(parts)


HUBBLE = {"ADR-0001.cilium-settings": "assert False, 'hubble on'", "ADR-0002.image-mirror": "not_applicable('x')"}


def _results(pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


@pytest.mark.slow
def test_a_waived_failure_shows_on_the_terminal_with_approver_and_expiry_and_the_verdict_says_so(pytester, suite):
    suite("all", _all_rules(HUBBLE))
    grant_waiver(pytester.path / "sites" / "tirosh-home", "ADR-0001.cilium-settings", expires="2999-01-31")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "*::test_* WAIVED by Kim until 2999-01-31*",
        "dgxspark: ACCEPTED, scope: full (only waived rules did not pass: ADR-0001.cilium-settings)",
        "  waived: ADR-0001.cilium-settings by Kim (security officer), ticket SEC-12, until 2999-01-31",
    ])
    waiver = _results(pytester)["waivers"][0]
    assert waiver["state"] == "applied" and waiver["site_digest"].startswith("sha256:")


@pytest.mark.slow
def test_a_waiver_on_a_passing_rule_is_reported_unused_never_as_in_force(pytester, suite):
    suite("all", _all_rules({"ADR-0002.image-mirror": "not_applicable('x')"}))
    grant_waiver(pytester.path / "sites" / "tirosh-home", "ADR-0001.cilium-settings")
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines(["dgxspark: ACCEPTED, scope: full",
                                 "  waiver unused: ADR-0001.cilium-settings (Kim (security officer), ticket SEC-12): "
                                 "the rule is passed, nothing to waive"])
    doc = _results(pytester)
    assert doc["waivers"][0]["state"] == "unused"
    assert {r["id"]: r["status"] for r in doc["rules"]}["ADR-0001.cilium-settings"] == "passed"


@pytest.mark.slow
def test_a_waiver_granted_against_another_site_digest_does_not_apply(pytester, suite):
    suite("all", _all_rules(HUBBLE))
    site = pytester.path / "sites" / "tirosh-home"
    grant_waiver(site, "ADR-0001.cilium-settings")
    vars_file = site / "rke2" / "vars.yml"
    vars_file.write_text(vars_file.read_text() + "# changed after the waiver was granted\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["  waiver stale: ADR-0001.cilium-settings (Kim*) was granted against another site "
                                 "digest: the rule stays failed"])
    doc = _results(pytester)
    assert doc["verdict"] == "REJECTED" and doc["waivers"][0]["state"] == "stale"
    assert any("was granted against site digest sha256:" in r for r in doc["verdict_reasons"])


@pytest.mark.slow
def test_a_waived_lower_rule_says_why_the_rules_it_blocks_leave_the_run_incomplete(pytester, suite):
    suite("all", _all_rules({"ADR-0002.host-driver": "assert False, 'no module'",
                             "ADR-0002.image-mirror": "not_applicable('x')"}))
    grant_waiver(pytester.path / "sites" / "tirosh-home", "ADR-0002.host-driver")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == 8
    result.stdout.fnmatch_lines(["dgxspark: INCOMPLETE, scope: full (blocked only by waived rules: ADR-0002.host-driver; "
                                 "a waiver accepts a failure, not the checks it keeps from running)"])


def test_an_approver_the_site_does_not_list_is_a_usage_error_naming_file_entry_and_key(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched')\n")
    site = pytester.path / "sites" / "tirosh-home"
    grant_waiver(site, "ADR-0002.host-driver", approver="Someone Else")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["sites/tirosh-home/waivers.yml: waivers.0 (ADR-0002.host-driver).approver: 'Someone Else' "
                                 "is not listed in sites/tirosh-home/approvers.yml (listed: Kim); a waiver names an approver the site "
                                 "lists, with their key (docs/governance.md)"])


@pytest.mark.slow
@pytest.mark.parametrize(("approvers", "message"), [
    ("approvers:\n  - name: Kim\n    role: r\n    key: not-a-key\n",
     "*approvers.yml: approvers.0 (Kim).key: not an SSH public key; expected '<type> <base64> ?comment?'*"),
    (f"approvers:\n  - name: Kim\n    role: r\n    key: {APPROVER_KEY}\n  - name: Kim\n    role: r\n    key: {APPROVER_KEY}\n",
     "*approvers.yml: approvers.1 (Kim).name: listed twice"),
    ("approvers:\n  - name: Kim\n    key: x\n", "*approvers.yml: approvers.0: 'role' is a required property"),
])
def test_a_bad_approvers_file_is_a_usage_error_naming_entry_and_key(pytester, suite, approvers, message):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    (pytester.path / "sites" / "tirosh-home" / "approvers.yml").write_text(approvers)
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_waiver_without_a_site_digest_is_a_usage_error(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    site = pytester.path / "sites" / "tirosh-home"
    path = grant_waiver(site, "ADR-0002.host-driver")
    path.write_text("\n".join(line for line in path.read_text().splitlines() if "site_digest" not in line) + "\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*waivers.yml: waivers.0: 'site_digest' is a required property"])
