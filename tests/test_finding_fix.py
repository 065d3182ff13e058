"""A finding that names its own fix (checking.finding(message, fix, fix_ko)) is the root cause with that fix, in the
closing block and results.json; without one, the rule's remediation stays."""
from __future__ import annotations

import json

import pytest

from tests.pytester_args import SITE_ARGS

SUITE = (
    "from pytest_dgxspark.checking import finding\n\n"
    "@pytest.mark.rule('ADR-0002.helmchart-live')\ndef test_live():\n"
    "    finding('GET /apis/helm.cattle.io/v1/helmcharts answered 404', 'Check rke2-server.', 'rke2-server를 확인한다.')\n\n"
    "@pytest.mark.rule('ADR-0001.cni-cilium')\ndef test_cni():\n    finding('the CNI is canal')\n"
)


@pytest.mark.slow
def test_a_finding_with_its_own_fix_is_the_root_cause_with_that_fix(pytester, suite):
    from pytest_dgxspark.catalog.rules import load_catalog

    suite("all", SUITE)
    result = pytester.runpytest(*SITE_ARGS)
    doc = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    fixes = {d["rule"]: (d["kind"], d["fix"], d["fix_ko"]) for d in doc["root_cause_details"]}
    assert fixes["ADR-0002.helmchart-live"] == ("finding", "Check rke2-server.", "rke2-server를 확인한다.")
    cni = load_catalog().rules["ADR-0001.cni-cilium"]
    assert fixes["ADR-0001.cni-cilium"] == ("finding", cni.remediation, cni.remediation_ko)
    result.stdout.fnmatch_lines(["    ADR-0002.helmchart-live (finding): GET /apis/helm.cattle.io/v1/helmcharts answered 404",
                                 "      fix: Check rke2-server."])
