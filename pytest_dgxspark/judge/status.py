"""Statuses as data: the one Status type, the item stash keys the plugin keeps them in, and a rule's status."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

import pytest

from pytest_dgxspark.checking import NOT_APPLICABLE_PREFIX
from pytest_dgxspark.judge.records import TargetFault

__all__ = ["BLOCKED_PREFIX", "BROKEN", "NOT_APPLICABLE_PREFIX", "Status", "rule_status"]


class Status(str, Enum):
    """A test's outcome or a rule's status, as results.json, junit and the terminal write it."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    BLOCKED = "blocked"
    NOT_APPLICABLE = "not-applicable"
    SKIPPED = "skipped"
    WAIVED = "waived"
    UNTESTED = "untested"
    RECORDED = "recorded"
    NOT_SELECTED = "not-selected"  # a rule the run's -m/-k left out (its scope)

    def __str__(self) -> str:
        return self.value


BLOCKED_PREFIX = "blocked by "
BROKEN = frozenset({Status.FAILED, Status.ERROR})

# State on the item, as pytest's skipping.py keeps xfail: the terminal, junit and results.json read these facts.
blocked_by_key = pytest.StashKey[tuple[str, ...]]()  # the broken rules this test depends on
not_applicable_key = pytest.StashKey[str]()  # why this check does not apply to the site
target_fault_key = pytest.StashKey[TargetFault]()  # the target this test could not reach or read, and why
blocked_reason_key = pytest.StashKey[str]()  # why a test met a fault its target's owner already accounts for
finding_fix_key = pytest.StashKey[tuple[str, str]]()  # a finding's own fix (English, Korean), when the check named one


def rule_status(outcomes: Iterable[str]) -> str:
    """One rule's status from its tests' outcomes (no tests: untested)."""
    seen = set(outcomes)
    for status in (Status.FAILED, Status.ERROR, Status.BLOCKED):
        if status in seen:
            return status
    if Status.PASSED in seen:
        return Status.UNTESTED if Status.SKIPPED in seen else Status.PASSED
    if seen and seen <= {Status.NOT_APPLICABLE}:
        return Status.NOT_APPLICABLE
    return Status.UNTESTED
