"""What one run knows: its catalog, site, targets and governance, and the outcome of each test so far."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_dgxspark.catalog.rules import Catalog, rule_of
from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.judge.records import TargetFault, TestRecord
from pytest_dgxspark.judge.status import (
    Status,
    blocked_by_key,
    blocked_reason_key,
    finding_fix_key,
    not_applicable_key,
    rule_status,
    target_fault_key,
)
from pytest_dgxspark.site.governance import ManualCheck, Waiver
from pytest_dgxspark.site.model import Site
from pytest_dgxspark.targets.selection import Targets, site_targets, testbed_targets

if TYPE_CHECKING:  # the plan is the face's: the run state only carries it
    from pytest_dgxspark.plan import RunPlan

state_key = pytest.StashKey["RunState"]()


@dataclass
class RunState:
    catalog: Catalog
    site: Site
    targets: Targets
    waivers: dict[str, Waiver]
    manual_checks: list[ManualCheck]
    plan: RunPlan
    items: list[pytest.Item] = field(default_factory=list)
    records: list[TestRecord] = field(default_factory=list)
    evidence: dict[str, list] = field(default_factory=dict)
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    deselected: list[pytest.Item] = field(default_factory=list)
    # Conditional rules whose applies_when the site does not meet, with the reason: decided once, at configure
    # time (the RunState is made in pytest_configure), before any blocking.
    inapplicable: dict[str, str] = field(default_factory=dict)
    forecast: list[Any] = field(default_factory=list)  # judge.forecast.ForecastRecord of each forecast test

    def __post_init__(self) -> None:
        reasons = {r.id: r.not_applicable_reason(self.site) for r in self.catalog.rules.values()}
        self.inapplicable = {rid: why for rid, why in reasons.items() if why}

    def not_applicable_rules(self) -> dict[str, str]:
        """Conditional rules whose applies_when the site does not meet, with the reason (decided before blocking)."""
        return dict(self.inapplicable)

    def statuses(self) -> dict[str, str]:
        outcomes: dict[str, list[str]] = {}
        for rec in self.records:
            outcomes.setdefault(rec.rule, []).append(rec.outcome)
        return {rid: rule_status(o) for rid, o in outcomes.items()}


def pending_rules(state: RunState) -> set[str]:
    """Rules with selected tests still to run (the running test's, not recorded yet, included)."""
    done: dict[str, int] = {}
    for rec in state.records:
        done[rec.rule] = done.get(rec.rule, 0) + 1
    total: dict[str, int] = {}
    for other in state.items:
        rid = item_rule(other) or ""
        total[rid] = total.get(rid, 0) + 1
    return {rid for rid, count in total.items() if done.get(rid, 0) < count}


def owner_of_fault(state: RunState, item: pytest.Item, fault: TargetFault) -> tuple[tuple[str, ...], str] | None:
    """(rules, blocked message) when `fault`'s target is already accounted for by another rule (attribution.target_owners
    over the records so far), else None: this test's error is then the target's own report."""
    from pytest_dgxspark.judge.attribution import ANSWERED_KINDS, blocked_message, target_owners

    if not fault.target or fault.cause in ANSWERED_KINDS:  # a 403 is this check's own error, never another's
        return None
    tgt = state.targets
    owners = target_owners(state.records, tgt.management_context, tgt.prerequisites(), pending_rules(state))
    owner, how = owners.get(fault.target, ((), ""))
    if not owner or item_rule(item) in owner:
        return None
    return owner, blocked_message(owner, how, fault.target, fault.message, tgt.management_context)


def item_rule(item: pytest.Item) -> str | None:
    """The rule id of a test item (rules.rule_of, the one lookup of plugin and report)."""
    return rule_of(item)


def in_suites(item: pytest.Item) -> bool:
    return "suites" in Path(str(item.path)).parts


def coverage_problems(catalog: Catalog, items: list[pytest.Item]) -> list[str]:
    """Tests under suites/ without exactly one known rule marker, and rule markers naming unknown ids."""
    problems = []
    for item in items:
        markers = list(item.iter_markers("rule"))
        ids = [m.args[0] if m.args else None for m in markers]
        advisory = [m.args[0] if m.args else None for m in item.iter_markers("forecast")]
        if advisory:  # a forecast check: exactly one known forecast rule, and no rule marker beside it
            if markers or len(advisory) != 1 or advisory[0] not in catalog.forecast:
                problems.append(f"{item.nodeid}: a forecast check has exactly one @pytest.mark.forecast(<id>) of "
                                f"catalog/beyond.yaml and no rule marker, got forecast {advisory} and rule {ids}")
            continue
        if not markers:
            if in_suites(item):
                problems.append(f"{item.nodeid}: no @pytest.mark.rule(<id>) marker")
            continue
        if len(markers) > 1 or any(len(m.args) != 1 for m in markers):
            problems.append(f"{item.nodeid}: expected exactly one rule id, got {ids}")
        for rid in ids:
            if rid not in catalog.rules:
                problems.append(f"{item.nodeid}: unknown rule id {rid!r} (see pytest --dgxspark-rules)")
    return problems


def load_run(plan: RunPlan, catalog: Catalog) -> RunState:
    """The run's state from its validated plan (nothing connects)."""
    if plan.testbed_ref:
        targets = testbed_targets(plan.site, plan.testbed_ref, plan.scenario)
    else:
        targets = site_targets(plan.site, plan.kubeconfig, plan.hosts)
    return RunState(catalog=catalog, site=plan.site, targets=targets, waivers=dict(plan.waivers),
                    manual_checks=list(plan.manual_checks), plan=plan)


def record_from_reports(item: pytest.Item, phases: dict[str, Any]) -> TestRecord:
    """One test's outcome from its setup/call/teardown reports and the facts on its stash (never from skip texts)."""
    rule = item_rule(item) or ""
    duration = sum(r.duration for r in phases.values())
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    blocked: tuple[str, ...] = ()
    outcome, message, fault = Status.PASSED, "", None
    for report in (setup, call):
        if report is None:
            continue
        if report.skipped:
            if blocked_by_key in item.stash:
                blocked = item.stash[blocked_by_key]
                outcome, message = Status.BLOCKED, item.stash.get(blocked_reason_key, f"blocked by {', '.join(blocked)}")
            elif not_applicable_key in item.stash:
                outcome, message = Status.NOT_APPLICABLE, item.stash[not_applicable_key]
            else:
                outcome, message = Status.SKIPPED, _skip_reason(report)
            break
        if report.failed:
            fault = item.stash.get(target_fault_key, None)
            judged = getattr(report, "dgxspark_judged", False)
            outcome = Status.ERROR if (report.when == "setup" and not judged) or fault is not None else Status.FAILED
            message = fault.message if fault is not None else failure_message(report)
            break
    else:
        if call is None:
            outcome, message = Status.ERROR, "the test did not run"
    if outcome == Status.PASSED and teardown is not None and teardown.failed:
        fault = item.stash.get(target_fault_key, None)
        outcome = Status.ERROR
        message = "teardown: " + (fault.message if fault is not None else failure_message(teardown))
    from pytest_dgxspark.judge.evidence import redact_text

    message = redact_text(message)
    own_fix = item.stash.get(finding_fix_key, None) if outcome == Status.FAILED else None
    return TestRecord(item.nodeid, rule, outcome, duration, message, blocked, fault.target if fault else None, fault,
                      own_fix)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    return str(longrepr or "")


def failure_message(report: pytest.TestReport) -> str:
    """The failure's own words, never pytest's assertion introspection (`assert 127 == 0 + where ...`)."""
    message = getattr(report, "dgxspark_message", None)
    if not message:
        text = report.longreprtext or ""
        lines = [ln[2:].rstrip() for ln in text.splitlines() if ln.startswith("E ")]
        message = "\n".join(check_words(lines)[:12]) or text[-2000:]
    return message


def check_words(lines: list[str]) -> list[str]:
    """A failure's 'E' lines up to pytest's rewritten `assert ...` explanation (kept only when there is nothing else)."""
    lines = [ln.strip() for ln in lines]
    if lines and lines[0].startswith("AssertionError: "):
        lines[0] = lines[0][len("AssertionError: "):]
    for index, line in enumerate(lines):
        if line.startswith("assert ") or line.startswith("+  where") or line.startswith("+ where"):
            return lines[:index] or lines[index:index + 1]
    return lines


def transport_fault(item: pytest.Item, error: BaseException, context: str) -> TargetFault | None:
    """The TargetFault of an exception that says the run could not reach or read a target, else None.

    A TargetError says so itself; a raw client exception that escaped a check (a refused connection, a reset, a
    5xx) is the site API's, never a finding.
    """
    if isinstance(error, TargetError):
        return TargetFault.of(error)
    from pytest_dgxspark.targets.causes import api_cause, is_transport_error, observed_status

    if not is_transport_error(error):
        return None
    cause = api_cause(error)
    status = getattr(error, "status", None)
    observed = observed_status(error) if status else f"{type(error).__name__}: {error}"
    observed = observed if len(observed) <= 300 else observed[:297] + "..."
    return TargetFault(f"api:{context}", f"Kubernetes API of context {context!r}: cannot read: {cause.meaning} "
                                          f"({observed})", cause.kind, cause.fix, cause.fix_ko)
