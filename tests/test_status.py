"""One Status type: its values are results.json's contract words, and they serialise as those words."""
from __future__ import annotations

import json

from pytest_dgxspark.judge.status import Status, rule_status


def test_the_rule_statuses_of_the_contract_are_the_status_values():
    contract = {"passed", "failed", "blocked", "error", "not-applicable", "waived", "untested", "recorded"}
    assert contract <= {s.value for s in Status}


def test_a_status_is_its_word_in_json_in_text_and_in_comparisons():
    assert json.dumps({"status": Status.NOT_APPLICABLE}) == '{"status": "not-applicable"}'
    assert f"{Status.BLOCKED}" == str(Status.BLOCKED) == "blocked"
    assert Status.PASSED == "passed" and Status("failed") is Status.FAILED


def test_a_rule_takes_its_worst_test_outcome():
    assert rule_status(["passed", "error", "failed"]) is Status.FAILED
    assert rule_status(["passed", "skipped"]) is Status.UNTESTED
    assert rule_status(["not-applicable"]) is Status.NOT_APPLICABLE
    assert rule_status([]) is Status.UNTESTED
