"""The forecast: advisory findings of the rules beyond the ADRs (catalog/beyond.yaml, kind forecast), what will break
next. A forecast check advises (`Forecast.advise`); its findings go to results.json `forecast[]`, the terminal's
forecast section and the summary's page 1, never to `rules[]`; the verdict changes only where the site enforces
them (rke2/vars.yml `forecast: enforce`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_dgxspark.catalog.rules import Catalog
from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.data.redact import redact_text
from pytest_dgxspark.judge.evidence import evidence_key
from pytest_dgxspark.judge.runstate import RunState
from pytest_dgxspark.judge.status import BLOCKED_PREFIX, BROKEN, Status

forecast_key = pytest.StashKey[list]()  # the advice one forecast test gave (item stash)
MARKER = "forecast"
ADVISED = "advised"  # a forecast test that advised: the terminal's A/ADVISED
SILENT = "silent"  # a forecast test that read its target and had nothing to advise (its row: passed)
ENFORCE = "enforce"


def forecast_of(item: pytest.Item) -> str | None:
    """The forecast rule id of a test item (its `forecast` marker), or None."""
    marker = item.get_closest_marker(MARKER)
    return str(marker.args[0]) if marker is not None and marker.args else None


@dataclass(frozen=True)
class Advice:
    """One advisory finding: what will break, where it was seen, and the fix (en, ko)."""

    message: str
    target: str | None = None
    fix: str | None = None
    fix_ko: str | None = None
    due: str | None = None  # when it breaks, where known (a date, or "at the next reboot")


class Forecast:
    """The recorder a forecast check advises through (the `forecast` fixture); nothing it says fails the test."""

    def __init__(self, store: list[Advice]) -> None:
        self._store = store

    def advise(self, message: str, *, target: str | None = None, fix: str | None = None, fix_ko: str | None = None,
               due: str | None = None) -> None:
        """Say what will break next (`message`: what must hold, what was seen where); `fix`/`fix_ko` replace the rule's
        remediation when what was seen needs another one."""
        self._store.append(Advice(redact_text(message), target, fix and redact_text(fix), fix_ko and redact_text(fix_ko),
                                  due))


@dataclass
class ForecastRecord:
    """What one forecast test ended with: `advised` (with its advice), `silent`, `error` (could not read) or
    `blocked`/`not-applicable` (the rule it depends on broke; the host has no GPU)."""

    nodeid: str
    rule: str
    outcome: str
    advice: list[Advice] = field(default_factory=list)
    message: str = ""
    evidence: list[Any] = field(default_factory=list)  # what the check recorded (already redacted)


def outcome_of(advice: list[Advice], report: pytest.TestReport) -> str:
    """A forecast test's outcome from its call report and its advice."""
    if report.skipped:
        return Status.SKIPPED
    if report.failed:
        return Status.ERROR
    return ADVISED if advice else SILENT


def entries(catalog: Catalog, records: list[ForecastRecord]) -> list[dict[str, Any]]:
    """results.json `forecast[]`: one entry per advice (status advised) and per test that could not read its target
    (status unreadable), each with its rule's layer, title and fix."""
    found: list[dict[str, Any]] = []
    for record in records:
        rule = catalog.forecast.get(record.rule)
        if rule is None:
            continue
        base = {"id": rule.id, "layer": rule.layer, "severity": rule.severity, "title": rule.title,
                "nodeid": record.nodeid, "evidence": record.evidence}
        for advice in record.advice:
            found.append({**base, "status": "advised", "target": advice.target, "message": advice.message,
                          "due": advice.due, "fix": advice.fix or rule.remediation,
                          "fix_ko": advice.fix_ko or rule.remediation_ko})
        if record.outcome == Status.ERROR:
            found.append({**base, "status": "unreadable", "target": None, "message": record.message, "due": None,
                          "fix": "Make the target readable and rerun; until then this forecast is unknown.",
                          "fix_ko": "대상을 읽을 수 있게 한 뒤 다시 실행한다. 그때까지 이 예보는 알 수 없다."})
    return found


# a forecast test's outcome as results.json `forecast_tests[]` (and so junit.xml and report.html) show it
_SHOWN = {ADVISED: ADVISED, SILENT: Status.PASSED, Status.ERROR: Status.ERROR, Status.SKIPPED: Status.SKIPPED}


def tests(records: list[ForecastRecord]) -> list[dict[str, Any]]:
    """results.json `forecast_tests[]`: every forecast test (nodeid, rule, outcome, message), so that junit.xml and
    report.html, which list every test pytest ran, agree with results.json (report/rows.py)."""
    return [{"nodeid": r.nodeid, "rule": r.rule, "outcome": _SHOWN.get(r.outcome, r.outcome), "message": r.message}
            for r in records]


def checked(records: list[ForecastRecord]) -> dict[str, str]:
    """Forecast rule -> what its tests ended with overall (advised, error, silent, skipped), for results.json."""
    order = (ADVISED, Status.ERROR, SILENT, Status.SKIPPED)
    outcome: dict[str, str] = {}
    for record in records:
        prior = outcome.get(record.rule)
        if prior is None or order.index(record.outcome) < order.index(prior):
            outcome[record.rule] = record.outcome
    return outcome


def enforce(results: dict[str, Any], site_vars: Mapping[str, Any]) -> None:
    """With `forecast: enforce` in the site's vars, an advised forecast rejects an otherwise accepted run."""
    results["forecast_mode"] = site_vars.get("forecast", "advise")
    advised = sorted({e["id"] for e in results.get("forecast", []) if e["status"] == "advised"})
    if results["forecast_mode"] != ENFORCE or not advised:
        return
    if results.get("verdict") == "ACCEPTED":
        results["verdict"] = "REJECTED"
    results.setdefault("verdict_reasons", []).append(
        f"forecast: enforce (rke2/vars.yml) and the forecast advises {', '.join(advised)}")


def forecast_setup(state: RunState, item: pytest.Item, not_a_gpu_host: str | None) -> None:
    """A forecast check is skipped on a host without a GPU (gpu_host) and under a broken rule it depends on."""
    if not_a_gpu_host:
        pytest.skip(not_a_gpu_host)
    rule = state.catalog.forecast[forecast_of(item) or ""]
    statuses = state.statuses()
    broken = sorted(r for r in rule.depends_on if statuses.get(r) in BROKEN)
    if broken:
        pytest.skip(BLOCKED_PREFIX + ", ".join(broken))


def forecast_phase(state: RunState, item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """A forecast check's phase: advice shows as ADVISED, a failure as ERROR (it could not read its target, never a
    FAILED check: the fault in its own words and fix, no traceback through transports); its teardown records what it
    ended with (state.forecast)."""
    advice = item.stash.get(forecast_key, [])
    if report.when == "call" and report.passed and advice:
        report.dgxspark_status = ADVISED  # type: ignore[attr-defined]
    elif report.failed:
        report.dgxspark_status = "target-error"  # type: ignore[attr-defined]
        error = call.excinfo.value if call.excinfo is not None else None
        if isinstance(error, TargetError):
            fix = getattr(error.cause, "fix", None)
            report.longrepr = redact_text(f"{error}\nfix: {fix}" if fix else str(error))
    phases = state.phases.setdefault(item.nodeid, {})
    phases[report.when] = report
    if report.when == "teardown":
        ran = phases.get("call") or phases.get("setup") or report
        first = next((r for r in phases.values() if r.failed or r.skipped), ran)
        message = _last_line(first.longreprtext) if first.failed or first.skipped else ""
        evidence: list[Any] = item.stash.get(evidence_key, [])
        state.forecast.append(ForecastRecord(item.nodeid, forecast_of(item) or "", outcome_of(advice, first),
                                             list(advice), message, list(evidence)))


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return redact_text(lines[-1] if lines else "")[:400]
