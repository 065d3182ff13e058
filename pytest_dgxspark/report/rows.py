"""One row per test as every derived file shows it: the status results.json gives a test in its rule's light."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_dgxspark.judge.status import Status

# A rule status that speaks for all of its tests: a recorded rule's checks only record (they pass), a waived rule's
# failures are waived. Every other rule's tests show their own outcome.
RULE_SPEAKS = frozenset({Status.RECORDED, Status.WAIVED})


@dataclass(frozen=True)
class Row:
    """A test of results.json: its rule, the rule's status, the test's own outcome and the status its row shows."""

    nodeid: str
    rule: str
    rule_status: str
    outcome: str
    message: str

    @property
    def status(self) -> str:
        return self.rule_status if self.rule_status in RULE_SPEAKS else self.outcome


def rows(results: dict[str, Any]) -> dict[str, Row]:
    """nodeid -> Row for every test of results.json (the first rule listing a nodeid keeps it)."""
    found: dict[str, Row] = {}
    for rule in results.get("rules") or []:
        if not isinstance(rule, dict):
            continue
        for test in rule.get("tests") or []:
            if isinstance(test, dict) and test.get("nodeid") and str(test["nodeid"]) not in found:
                found[str(test["nodeid"])] = Row(str(test["nodeid"]), str(rule.get("id")), str(rule.get("status")),
                                                 str(test.get("outcome")), str(test.get("message") or ""))
    # the forecast's checks (judge/forecast.py): pytest ran them, so junit.xml and report.html list them too; their
    # rule is advisory, so each row shows the test's own outcome (advised, passed, error, skipped)
    checked = results.get("forecast_checked") or {}
    for test in results.get("forecast_tests") or []:
        if isinstance(test, dict) and test.get("nodeid") and str(test["nodeid"]) not in found:
            found[str(test["nodeid"])] = Row(str(test["nodeid"]), str(test.get("rule")),
                                             f"forecast {checked.get(test.get('rule'), 'checked')}",
                                             str(test.get("outcome")), str(test.get("message") or ""))
    return found


def counts(table: dict[str, Row]) -> dict[str, int]:
    """Tests per row status."""
    tally: dict[str, int] = {}
    for row in table.values():
        tally[row.status] = tally.get(row.status, 0) + 1
    return tally


def word(status: str) -> str:
    """A status as a row's result word: 'not-applicable' -> 'Not-applicable'."""
    return status[:1].upper() + status[1:]
