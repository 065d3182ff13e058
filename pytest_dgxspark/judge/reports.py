"""What each phase's test report says, as results.json will say it: not applicable, blocked (by a broken prerequisite,
the owner of a target's fault, or a symptom's cause), a target's fault (never a check's FAILED), recorded; redacted;
and the test's record, kept at teardown. The plugin's makereport hook only calls `judge_phase`."""
from __future__ import annotations

import signal
import threading
from datetime import date
from typing import Any

import pytest

from pytest_dgxspark.checking import CheckHung, Finding, NotApplicable
from pytest_dgxspark.judge.attribution import symptom_causes, symptom_message
from pytest_dgxspark.judge.evidence import evidence_key, redact_text
from pytest_dgxspark.judge.forecast import ADVISED
from pytest_dgxspark.judge.records import TargetFault
from pytest_dgxspark.judge.runstate import (
    RunState,
    failure_message,
    item_rule,
    owner_of_fault,
    record_from_reports,
    transport_fault,
)
from pytest_dgxspark.judge.status import (
    Status,
    blocked_by_key,
    blocked_reason_key,
    finding_fix_key,
    not_applicable_key,
    target_fault_key,
)

TARGET_ERROR = "target-error"  # a phase that could not reach or read its target: shown as ERROR, never FAILED
# category, letter, word: the terminal, its summary line and -r read the same fact as results.json
TESTSTATUS = {
    Status.BLOCKED: (Status.BLOCKED, "B", "BLOCKED"),
    Status.NOT_APPLICABLE: (Status.NOT_APPLICABLE, "N", "N/A"),
    Status.RECORDED: (Status.RECORDED, "R", "RECORDED"),
    ADVISED: (ADVISED, "A", "ADVISED"),
    TARGET_ERROR: (Status.ERROR, "E", "ERROR"),
}


def judge_phase(state: RunState, item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """Read one phase's outcome into the item's stash and the report (outcome, longrepr, dgxspark_status)."""
    error = call.excinfo.value if call.excinfo is not None else None
    if report.skipped and isinstance(error, NotApplicable):
        item.stash[not_applicable_key] = error.reason
    if report.failed and isinstance(error, Finding) and error.fix:
        item.stash[finding_fix_key] = (error.fix, error.fix_ko or error.fix)
    if report.failed and error is not None:
        _read_failure(state, item, report, error)
    _block_symptom(item, report, state)
    # read back by pytest_report_teststatus, as pytest's skipping.py sets report.wasxfail
    report.dgxspark_status = _status_of(item, report, state)  # type: ignore[attr-defined]
    if report.failed:
        _redact_longrepr(report)
    phases = state.phases.setdefault(item.nodeid, {})
    phases[report.when] = report
    if report.when == "teardown":
        record = record_from_reports(item, phases)
        state.records.append(record)
        # junit.xml reads a testcase's properties from its teardown report: the status results.json gives the test
        report.user_properties.append(("dgxspark_status", record.outcome))
        items = item.stash.get(evidence_key, None)
        if items:
            state.evidence[item.nodeid] = items


def _read_failure(state: RunState, item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """A failed phase: a target's fault (owned by another rule: blocked; else this test's error), a hung check, or a
    fixture's own judgement."""
    fault = transport_fault(item, error, state.targets.context)
    owned = owner_of_fault(state, item, fault) \
        if fault is not None and report.when != "teardown" and not state.plan.no_block else None
    if owned is not None:
        # the fault of a target another rule already accounts for (its connectivity rule, a failed prerequisite, the
        # first error on it): BLOCKED as it happens, as results.json has it, never a second ERROR
        item.stash[blocked_by_key], item.stash[blocked_reason_key] = owned
        _show_as_skipped(item, report, redact_text(owned[1]))
    elif fault is not None:
        item.stash[target_fault_key] = fault
        # not a check's failure: the fault in the check's words and its fix, no traceback through transports
        report.longrepr = f"{fault.message}\nfix: {fault.fix}" if fault.fix else fault.message
    elif isinstance(error, CheckHung):
        item.stash[target_fault_key] = TargetFault(None, f"the check hung: {error} (the target did not answer)")
    elif report.when == "setup" and isinstance(error, pytest.fail.Exception):
        report.dgxspark_judged = True  # type: ignore[attr-defined]  # a fixture's own pytest.fail is a judgement (e.g. no Node for the host)


def _block_symptom(item: pytest.Item, report: pytest.TestReport, state: RunState) -> None:
    """A judged failure under a failed `symptom_of` rule on the same host is its symptom: BLOCKED as it happens (the
    fold's attribute_symptoms, applied to the records so far), as results.json has it, never FAILED."""
    judged = report.failed and target_fault_key not in item.stash and blocked_by_key not in item.stash \
        and (report.when == "call" or getattr(report, "dgxspark_judged", False))
    causes = symptom_causes(state.catalog, item_rule(item) or "", item.nodeid, state.records) \
        if judged and not state.plan.no_block else ()
    if causes:
        message = symptom_message(causes, redact_text(failure_message(report)))
        item.stash[blocked_by_key], item.stash[blocked_reason_key] = causes, message
        _show_as_skipped(item, report, message)


def _show_as_skipped(item: pytest.Item, report: pytest.TestReport, message: str) -> None:
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {message}")


def _status_of(item: pytest.Item, report: pytest.TestReport, state: RunState) -> str | None:
    """The dgxspark status this phase's report shows (read by pytest_report_teststatus), from the item's stash."""
    if report.skipped and blocked_by_key in item.stash:
        return Status.BLOCKED
    if report.skipped and not_applicable_key in item.stash:
        return Status.NOT_APPLICABLE
    if report.failed and report.when == "call" and target_fault_key in item.stash:
        return TARGET_ERROR  # the run could not reach or read a target: never shown as a check's FAILED
    if report.passed and report.when == "call" and state.catalog.rules[item_rule(item) or ""].kind == "informational":
        return Status.RECORDED
    waiver = state.waivers.get(item_rule(item) or "")
    if report.failed and report.when == "call" and waiver is not None \
            and waiver.state(Status.FAILED, date.today(), state.plan.site_digest) == "applied":
        # a failure a listed approver accepted: W / "WAIVED by <approver> until <date>" (results.json: waived)
        report.dgxspark_waiver = f"WAIVED by {waiver.approver} until {waiver.expires.isoformat()}"  # type: ignore[attr-defined]
        return Status.WAIVED
    return None


def teststatus(report: pytest.TestReport) -> tuple[str, str, str] | None:
    """pytest_report_teststatus's answer for a dgxspark phase report, None for pytest's own."""
    if getattr(report, "dgxspark_status", None) == Status.WAIVED:
        return Status.WAIVED, "W", getattr(report, "dgxspark_waiver", "WAIVED")
    return TESTSTATUS.get(getattr(report, "dgxspark_status", None) or "")


def _redact_longrepr(report: pytest.TestReport) -> None:
    """A failure's text goes to junit.xml and report.html as it is: no secret may ride along."""
    text = report.longreprtext
    redacted = redact_text(text)
    if redacted != text:
        report.longrepr = redacted


def set_check_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method with CheckHung as what it raises (same words as pytest-timeout's own); None
    (pytest-timeout's own timer) for its thread method, or off the main thread."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None

    def expire(signum: int, frame: Any) -> None:
        __tracebackhide__ = True
        raise CheckHung(settings.timeout)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's cancel hook calls it
    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
