"""What one run knows: its catalog, site, targets and governance, and the outcome of each test so far."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.governance import ManualCheck
from pytest_dgxspark.outcome import (
    BLOCKED_PREFIX, NOT_APPLICABLE_PREFIX, TargetError, TestRecord, Waiver, rule_status,
)
from pytest_dgxspark.plan import RunPlan, is_active  # noqa: F401 - is_active is imported from here too
from pytest_dgxspark.rules import Catalog
from pytest_dgxspark.site import Site
from pytest_dgxspark.targets import Targets, site_targets, testbed_targets

state_key = pytest.StashKey["RunState"]()


@dataclass
class RunState:
    catalog: Catalog
    site: Site
    targets: Targets
    waivers: dict[str, Waiver]
    manual_checks: list[ManualCheck]
    plan: RunPlan | None = None
    items: list[pytest.Item] = field(default_factory=list)
    records: list[TestRecord] = field(default_factory=list)
    evidence: dict[str, list] = field(default_factory=dict)
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)

    def statuses(self) -> dict[str, str]:
        outcomes: dict[str, list[str]] = {}
        for rec in self.records:
            outcomes.setdefault(rec.rule, []).append(rec.outcome)
        return {rid: rule_status(o) for rid, o in outcomes.items()}


def item_rule(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("rule")
    return str(marker.args[0]) if marker and marker.args else None


def in_suites(item: pytest.Item) -> bool:
    return "suites" in Path(str(item.path)).parts


def coverage_problems(catalog: Catalog, items: list[pytest.Item]) -> list[str]:
    """Tests under suites/ without exactly one known rule marker, and rule markers naming unknown ids."""
    problems = []
    for item in items:
        markers = list(item.iter_markers("rule"))
        ids = [m.args[0] if m.args else None for m in markers]
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
    """One test's outcome from its setup/call/teardown reports."""
    rule = item_rule(item) or ""
    duration = sum(r.duration for r in phases.values())
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    outcome, message, blocked, target = "passed", "", (), None
    for report in (setup, call):
        if report is None:
            continue
        if report.skipped:
            reason = _skip_reason(report)
            if reason.startswith(BLOCKED_PREFIX):
                outcome, message = "blocked", reason
                blocked = tuple(r.strip() for r in reason[len(BLOCKED_PREFIX):].split(","))
            elif reason.startswith(NOT_APPLICABLE_PREFIX):
                outcome, message = "not-applicable", reason[len(NOT_APPLICABLE_PREFIX):]
            else:
                outcome, message = "skipped", reason
            break
        if report.failed:
            target = getattr(report, "dgxspark_target", None)
            is_target = getattr(report, "dgxspark_target_error", False)
            judged = getattr(report, "dgxspark_judged", False)
            outcome = "error" if (report.when == "setup" and not judged) or is_target else "failed"
            message = _failure_message(report)
            break
    else:
        if call is None:
            outcome, message = "error", "the test did not run"
    if outcome == "passed" and teardown is not None and teardown.failed:
        outcome, message = "error", "teardown: " + _failure_message(teardown)
    return TestRecord(item.nodeid, rule, outcome, duration, message, blocked, target)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        return text[len("Skipped: "):] if text.startswith("Skipped: ") else text
    return str(longrepr or "")


def _failure_message(report: pytest.TestReport) -> str:
    """The failure's own words (assertion message), redacted: they reach results.json and the summary."""
    from pytest_dgxspark.evidence import redact_text

    message = getattr(report, "dgxspark_message", None)
    if not message:
        text = report.longreprtext or ""
        lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
        message = "\n".join(ln[2:].strip() for ln in lines[:12]) or text[-2000:]
    return redact_text(message)


def exception_is_target_error(excinfo: pytest.ExceptionInfo | None) -> bool:
    return excinfo is not None and excinfo.errisinstance(TargetError)
