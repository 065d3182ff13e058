"""One test's record and the fault of a target it met: what fold, attribution and the report read."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_dgxspark.checking import TargetError


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
