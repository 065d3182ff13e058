"""What a check may say: a finding in its own words, that it does not apply, or that its evidence could not be read
(never a silent pass); and the fault of a target that could not be reached or read."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

NOT_APPLICABLE_PREFIX = "not applicable: "
# What to do about an error that kept a check from judging, when the check names nothing more precise.
UNREADABLE_FIX = "Read the error: make what the check could not read readable (see the message), and rerun."
UNREADABLE_FIX_KO = "오류 내용을 읽고 점검이 읽지 못한 것을 읽을 수 있게 한 뒤(메시지 참조) 다시 실행한다."
# Exit status of a command the per-command limit (`timeout`) killed on the target.
TIMEOUT_EXIT = 124


class TargetError(Exception):
    """The target could not be reached or did not answer (SSH, API, timeout): the test's outcome is `error`.

    `target` names it: `ssh:<inventory host>` or `api:<kubeconfig context>`; `cause` (a targets.causes.Cause)
    says why, with its own fix.
    """

    def __init__(self, message: str, target: str | None = None, cause: Any = None) -> None:
        super().__init__(message)
        self.target = target
        self.cause = cause

class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined]
    """Raised by not_applicable(): a skip whose reason the plugin reads from the exception, never from its text."""

    def __init__(self, reason: str) -> None:
        super().__init__(NOT_APPLICABLE_PREFIX + reason)
        self.reason = reason

def not_applicable(reason: str) -> None:
    """End the current check as not applicable to this site, with the reason."""
    raise NotApplicable(reason)

class Finding(pytest.fail.Exception):  # type: ignore[name-defined]
    """A judged failure that knows its own fix: what was observed points at another layer than the rule's usual
    remediation (a CRD that is not served: the fix is whatever serves it, not re-applying what needs it)."""

    def __init__(self, message: str, fix: str | None = None, fix_ko: str | None = None) -> None:
        super().__init__(message, pytrace=False)
        self.fix, self.fix_ko = fix, fix_ko



class CheckHung(pytest.fail.Exception):  # type: ignore[name-defined]
    """The check did not end within the test's limit (pytest-timeout's, whose timer the plugin sets): the target
    stopped answering, which is a fault of the target, never a finding."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Timeout (>{seconds}s) from pytest-timeout.", pytrace=False)
        self.seconds = seconds

def timed_out(result: Any) -> bool:
    """Whether a command was killed by the per-command timeout on the target."""
    return result.rc in (TIMEOUT_EXIT, 128 + 9, 137)


def require(condition: object, message: str) -> None:
    """Unless `condition` holds, the check fails with `message` alone: no assertion introspection, no object reprs.

    The message is the finding as results.json, junit and the summary show it: what must hold, what was observed on
    which target, and the fix at the right layer.
    """
    if not condition:
        pytest.fail(message, pytrace=False)


def finding(message: str, fix: str | None = None, fix_ko: str | None = None) -> NoReturn:
    """The check fails with `message`: what must hold, what was observed where, and the fix. `fix`/`fix_ko` (both)
    replace the rule's remediation as the root cause's fix when what was observed needs another one."""
    if fix and fix_ko:
        raise Finding(message, fix, fix_ko)
    pytest.fail(message, pytrace=False)


@dataclass(frozen=True)
class Unjudged:
    """Why a check could not judge, shaped like a connectivity Cause: `kind` unreadable | not-verifiable, its fix."""

    kind: str
    meaning: str
    fix: str
    fix_ko: str


def unreadable(message: str, target: str | None = None, fix: str | None = None, fix_ko: str | None = None) -> NoReturn:
    """Evidence that was read but cannot be understood (unparsable output, a missing input) is no finding: the
    check ends as `error` with `message` (what could not be read) and `fix` (what to do); the run cannot be ACCEPTED
    on it, and it is never a root cause (results.json `not_judged`)."""
    raise TargetError(message, target=target, cause=Unjudged(
        "unreadable", "the check could not read its evidence", fix or UNREADABLE_FIX, fix_ko or UNREADABLE_FIX_KO))


def not_verifiable(reason: str, fix: str, fix_ko: str) -> NoReturn:
    """A required rule the run was given no way to check (e.g. no management cluster named): never not-applicable,
    never a pass. The check ends as `error` "not verifiable: <reason>" with `fix`; never a root cause."""
    raise TargetError(f"not verifiable: {reason}", cause=Unjudged(
        "not-verifiable", "the run was given no way to check this required rule", fix, fix_ko))


def completed(result: Any, target: Any, what: str | None = None) -> Any:
    """`result` of a command on `target` that ran to its end; a command killed by the per-command timeout (exit
    124/137) or whose SSH session failed (255) says nothing about the host: the check ends as `error`."""
    if timed_out(result) or result.rc == 255:
        unreadable(f"{target.where}: `{what or command_of(result)}` did not complete (exit {result.rc}"
                   + (f": {result.stderr.strip()[-200:]}" if (result.stderr or "").strip() else "")
                   + "), so what it reads cannot be judged")
    return result


def command_of(result: Any) -> str:
    """The command as the check wrote it (without the `timeout ... /bin/sh -c` wrapper the SSH backend adds)."""
    command = getattr(result, "command", b"") or b""
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    try:
        words = shlex.split(text)
    except ValueError:
        return text[:160]
    if len(words) >= 3 and words[0] == "timeout" and words[-2] == "-c":
        return words[-1][:160]
    return text[:160]


def host_answers(target: Any, after: str) -> None:
    """After a command timed out: a host that does not run `true` within 15 s is not answering at all, so the
    timeout is no finding about `after` (the check ends as `error`)."""
    probe = target.run("true", timeout=15)
    if probe.rc != 0:
        unreadable(f"{target.where}: {after} timed out and the host does not answer a plain `true` either (exit "
                   f"{probe.rc}): the host, not {after.split(' ')[0]}, stopped answering")
