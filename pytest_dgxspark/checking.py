"""What a check may say: a finding in its own words, or that its evidence could not be read (never a silent pass)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from pytest_dgxspark.outcome import UNREADABLE_FIX, UNREADABLE_FIX_KO, Finding, TargetError


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
    from pytest_dgxspark.connections import timed_out

    if timed_out(result) or result.rc == 255:
        unreadable(f"{target.where}: `{what or command_of(result)}` did not complete (exit {result.rc}"
                   + (f": {result.stderr.strip()[-200:]}" if (result.stderr or "").strip() else "")
                   + "), so what it reads cannot be judged")
    return result


def command_of(result: Any) -> str:
    """The command as the check wrote it (without the `timeout ... /bin/sh -c` wrapper the SSH backend adds)."""
    import shlex

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
