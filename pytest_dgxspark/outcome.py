"""Test outcomes as data: the item stash keys, not_applicable(), TargetError and one test's record."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

import pytest

NOT_APPLICABLE_PREFIX = "not applicable: "
BLOCKED_PREFIX = "blocked by "
BROKEN = frozenset({"failed", "error"})
# What to do about an error that kept a check from judging, when the check names nothing more precise.
UNREADABLE_FIX = "Read the error: make what the check could not read readable (see the message), and rerun."
UNREADABLE_FIX_KO = "오류 내용을 읽고 점검이 읽지 못한 것을 읽을 수 있게 한 뒤(메시지 참조) 다시 실행한다."

# State on the item, as pytest's skipping.py keeps xfail: the terminal, junit and results.json read these facts.
blocked_by_key = pytest.StashKey[tuple[str, ...]]()  # the broken rules this test depends on
not_applicable_key = pytest.StashKey[str]()  # why this check does not apply to the site
target_fault_key = pytest.StashKey["TargetFault"]()  # the target this test could not reach or read, and why
blocked_reason_key = pytest.StashKey[str]()  # why a test met a fault its target's owner already accounts for
finding_fix_key = pytest.StashKey[tuple[str, str]]()  # a finding's own fix (English, Korean), when the check named one


class TargetError(Exception):
    """The target could not be reached or did not answer (SSH, API, timeout): the test's outcome is `error`.

    `target` names it: `ssh:<inventory host>` or `api:<kubeconfig context>`; `cause` (a targets_conn.causes.Cause)
    says why, with its own fix.
    """

    def __init__(self, message: str, target: str | None = None, cause: Any = None) -> None:
        super().__init__(message)
        self.target = target
        self.cause = cause


class NotApplicable(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """Raised by not_applicable(): a skip whose reason the plugin reads from the exception, never from its text."""

    def __init__(self, reason: str) -> None:
        super().__init__(NOT_APPLICABLE_PREFIX + reason)
        self.reason = reason


def not_applicable(reason: str) -> None:
    """End the current check as not applicable to this site, with the reason."""
    raise NotApplicable(reason)


class Finding(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """A judged failure that knows its own fix: what was observed points at another layer than the rule's usual
    remediation (a CRD that is not served: the fix is whatever serves it, not re-applying what needs it)."""

    def __init__(self, message: str, fix: str | None = None, fix_ko: str | None = None) -> None:
        super().__init__(message, pytrace=False)
        self.fix, self.fix_ko = fix, fix_ko


@dataclass(frozen=True)
class TargetFault:
    """A failure to reach or read a target: which one, what was seen, and the cause's own fix."""

    target: str | None
    message: str
    cause: str | None = None  # the Cause kind, e.g. host-key-unknown
    fix: str | None = None
    fix_ko: str | None = None

    @classmethod
    def of(cls, error: TargetError) -> TargetFault:
        cause = getattr(error, "cause", None)
        return cls(error.target, str(error), getattr(cause, "kind", None), getattr(cause, "fix", None),
                   getattr(cause, "fix_ko", None))


@dataclass(frozen=True)
class TestRecord:
    nodeid: str
    rule: str
    outcome: str  # passed | failed | error | blocked | not-applicable | skipped
    duration: float = 0.0
    message: str = ""
    blocked_by: tuple[str, ...] = ()
    target: str | None = None  # the unreachable target of an `error` outcome
    fault: TargetFault | None = None  # the failure to reach or read it, when that is why the test is an error
    fix: tuple[str, str] | None = None  # a failed test's own fix (English, Korean), else its rule's remediation


@dataclass(frozen=True)
class Waiver:
    rule: str
    reason: str
    approver: str
    role: str
    ticket: str
    expires: date

    def expired(self, today: date) -> bool:
        return today > self.expires


def rule_status(outcomes: Iterable[str]) -> str:
    """One rule's status from its tests' outcomes (no tests: untested)."""
    seen = set(outcomes)
    for status in ("failed", "error", "blocked"):
        if status in seen:
            return status
    if "passed" in seen:
        return "untested" if "skipped" in seen else "passed"
    if seen and seen <= {"not-applicable"}:
        return "not-applicable"
    return "untested"
