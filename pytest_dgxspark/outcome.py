"""Rule statuses from test outcomes, BLOCKED propagation along the DAG, root causes and the verdict."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

import pytest

from pytest_dgxspark.rules import LAYERS, Catalog

NOT_APPLICABLE_PREFIX = "not applicable: "
BLOCKED_PREFIX = "blocked by "
BROKEN = frozenset({"failed", "error"})
# How bad a status is, for folding a layer's rules into one layer status.
_SEVERITY_ORDER = ("failed", "error", "blocked", "untested", "waived", "passed", "not-applicable")


class TargetError(Exception):
    """The target could not be reached or did not answer (SSH, API, timeout): the test's outcome is `error`.

    `target` names it: `ssh:<inventory host>` or `api:<kubeconfig context>`.
    """

    def __init__(self, message: str, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target


def not_applicable(reason: str) -> None:
    """End the current check as not applicable to this site, with the reason."""
    pytest.skip(NOT_APPLICABLE_PREFIX + reason)


@dataclass(frozen=True)
class TestRecord:
    nodeid: str
    rule: str
    outcome: str  # passed | failed | error | blocked | not-applicable | skipped
    duration: float = 0.0
    message: str = ""
    blocked_by: tuple[str, ...] = ()
    target: str | None = None  # the unreachable target of an `error` outcome


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


@dataclass(frozen=True)
class Fold:
    records: list[TestRecord]
    statuses: dict[str, str]
    blocked_by: dict[str, tuple[str, ...]]
    root_causes: tuple[str, ...]
    layers: dict[str, str]
    lowest_broken_layer: str | None
    verdict: str
    reasons: tuple[str, ...] = field(default=())


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


# The rule whose subject is reaching a kind of target: SSH to the inventory address, the site's API context.
CONNECTIVITY_RULES = {"ssh": "ADR-0002.host-static-ip", "api": "ADR-0001.kubeconfig-context"}


def connectivity_rule(target: str, management_context: str | None = None) -> str | None:
    """The rule that owns reaching `target`; None for targets no rule owns (e.g. the Argo CD cluster's API)."""
    kind, _, name = target.partition(":")
    if kind == "api" and management_context and name == management_context:
        return None
    return CONNECTIVITY_RULES.get(kind)


def attribute_unreachable(
    records: Iterable[TestRecord], management_context: str | None = None
) -> list[TestRecord]:
    """Errors caused only by a target whose connectivity rule already broke become `blocked` by that rule.

    An unreachable API makes every check that reads it error; the report names one root cause (the rule that
    owns reaching it) instead of one per layer.
    """
    records = list(records)
    broken_targets: dict[str, str] = {}
    for rec in records:
        if rec.outcome == "error" and rec.target:
            owner = connectivity_rule(rec.target, management_context)
            if owner is not None and rec.rule == owner:
                broken_targets[rec.target] = owner
    result = []
    for rec in records:
        owner = broken_targets.get(rec.target or "")
        if rec.outcome == "error" and owner and rec.rule != owner:
            rec = TestRecord(rec.nodeid, rec.rule, "blocked", rec.duration,
                             f"{BLOCKED_PREFIX}{owner} ({rec.target} unreachable): {rec.message}", (owner,), rec.target)
        result.append(rec)
    return result


def blocking_rules(catalog: Catalog, rule_id: str, statuses: Mapping[str, str]) -> tuple[str, ...]:
    """The rules `rule_id` depends on (transitively) that failed or errored so far."""
    return tuple(sorted(r for r in catalog.ancestors(rule_id) if statuses.get(r) in BROKEN))


def fold(
    catalog: Catalog,
    records: Iterable[TestRecord],
    *,
    waivers: Mapping[str, Waiver] | None = None,
    today: date | None = None,
    handover: bool = False,
    simulated: bool = False,
    unattested_manual: Iterable[str] = (),
    management_context: str | None = None,
) -> Fold:
    """Fold test records into rule and layer statuses, root causes and the verdict."""
    waivers = waivers or {}
    today = today or date.today()
    records = attribute_unreachable(records, management_context)
    by_rule: dict[str, list[TestRecord]] = {rid: [] for rid in catalog.rules}
    for rec in records:
        by_rule.setdefault(rec.rule, []).append(rec)
    raw = {rid: rule_status(r.outcome for r in by_rule[rid]) for rid in catalog.rules}
    blocked_by = {
        rid: tuple(sorted({b for r in by_rule[rid] for b in r.blocked_by})) for rid in catalog.rules
    }
    statuses = dict(raw)
    reasons: list[str] = []
    for rid, waiver in waivers.items():
        if raw.get(rid) != "failed":
            continue
        if waiver.expired(today):
            reasons.append(f"{rid}: waiver {waiver.ticket} expired on {waiver.expires.isoformat()}")
        else:
            statuses[rid] = "waived"
    root_causes = tuple(
        r.id for r in catalog.ordered()
        if statuses[r.id] in BROKEN and not any(statuses[a] in BROKEN for a in catalog.ancestors(r.id))
    )
    layers = {}
    for layer in LAYERS:
        members = [statuses[r.id] for r in catalog.rules.values() if r.layer == layer]
        layers[layer] = min(members, key=_SEVERITY_ORDER.index) if members else "not-applicable"
    lowest = min((catalog.rules[r].layer for r in root_causes), key=LAYERS.index, default=None)
    verdict = _verdict(catalog, statuses, reasons, handover, simulated, records_skipped(by_rule), unattested_manual)
    return Fold(records, statuses, blocked_by, root_causes, layers, lowest, verdict, tuple(reasons))


def records_skipped(by_rule: Mapping[str, list[TestRecord]]) -> list[str]:
    return [r.nodeid for recs in by_rule.values() for r in recs if r.outcome == "skipped"]


def _verdict(catalog, statuses, reasons, handover, simulated, skipped, unattested) -> str:
    considered = [r for r in catalog.rules.values() if r.kind != "informational"]
    failed = [r.id for r in considered if statuses[r.id] == "failed"]
    if failed:
        reasons.insert(0, "failed: " + ", ".join(failed))
        return "REJECTED"
    open_ = [r.id for r in considered if statuses[r.id] not in ("passed", "waived", "not-applicable")]
    if open_:
        reasons.append("not passed: " + ", ".join(f"{rid} ({statuses[rid]})" for rid in open_))
    if handover:
        if simulated:
            reasons.append("a simulated (testbed) run is never a handover acceptance")
        if skipped:
            reasons.append("skipped without a not-applicable reason: " + ", ".join(skipped))
        unattested = list(unattested)
        if unattested:
            reasons.append("manual checks without attestation: " + ", ".join(unattested))
    return "INCOMPLETE" if reasons else "ACCEPTED"
