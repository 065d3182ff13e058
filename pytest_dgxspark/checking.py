"""What a check may say: a finding in its own words, or that its evidence could not be read (never a silent pass)."""

from __future__ import annotations

from typing import NoReturn

import pytest

from pytest_dgxspark.outcome import TargetError


def require(condition: object, message: str) -> None:
    """Unless `condition` holds, the check fails with `message` alone: no assertion introspection, no object reprs.

    The message is the finding as results.json, junit and the summary show it: what must hold, what was observed on
    which target, and the fix at the right layer.
    """
    if not condition:
        pytest.fail(message, pytrace=False)


def finding(message: str) -> NoReturn:
    """The check fails with `message`: what must hold, what was observed where, and the fix."""
    pytest.fail(message, pytrace=False)


def unreadable(message: str, target: str | None = None) -> NoReturn:
    """Evidence that was read but cannot be understood (unparsable output, a missing input) is no finding: the
    check ends as `error` with `message`, and the run cannot be ACCEPTED on it."""
    raise TargetError(message, target=target)
