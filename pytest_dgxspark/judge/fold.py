"""Rule statuses from test records (attributed by attribution.py), root causes with their fix, the verdict."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

from pytest_dgxspark.catalog.rules import LAYERS, Catalog
from pytest_dgxspark.checking import UNREADABLE_FIX, UNREADABLE_FIX_KO
from pytest_dgxspark.judge.attribution import attribute_symptoms, attribute_unreachable, breaks, connectivity_rule
from pytest_dgxspark.judge.records import TargetFault, TestRecord
from pytest_dgxspark.judge.scope import Scope
from pytest_dgxspark.judge.status import BROKEN, Status, rule_status
from pytest_dgxspark.site.governance import Waiver

# How bad a status is, for folding a layer's rules into one layer status.
_SEVERITY_ORDER = (Status.FAILED, Status.ERROR, Status.BLOCKED, Status.UNTESTED, Status.WAIVED, Status.PASSED,
                   Status.RECORDED, Status.NOT_APPLICABLE, Status.NOT_SELECTED)
# Statuses that leave a selected, required rule unproven.
_DONE = frozenset({Status.PASSED, Status.WAIVED, Status.NOT_APPLICABLE, Status.RECORDED, Status.NOT_SELECTED})

@dataclass(frozen=True)
class RootCause:
    """What broke a rule, with what was seen and the fix: a judged failure (kind `finding`) or a target the run could
    not reach (`unreachable`) is a root cause; a required rule the run was given no way to verify (`not-verifiable`)
    or evidence a check could not read (`unreadable`) is listed apart as not judged."""

    rule: str
    kind: str
    layer: str
    message: str
    fix: str
    fix_ko: str
    target: str | None = None
    cause: str | None = None

    def as_dict(self) -> dict:
        return {"rule": self.rule, "kind": self.kind, "layer": self.layer, "message": self.message,
                "fix": self.fix, "fix_ko": self.fix_ko, "target": self.target, "cause": self.cause}


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
    details: tuple[RootCause, ...] = field(default=())
    scope: Scope | None = None
    not_judged: tuple[RootCause, ...] = field(default=())  # broken by an error that judged nothing: never a cause


def _not_verifiable(catalog: Catalog, by_rule: Mapping[str, list[TestRecord]]) -> set[str]:
    """Required rules whose every test is not applicable: a required rule can never be not applicable, so the rule is
    `error` (not verifiable); its tests keep their own outcome (N/A), as the terminal and junit show them."""
    return {rid for rid, recs in by_rule.items()
            if rid in catalog.rules and catalog.rules[rid].kind == "required"
            and rule_status(r.outcome for r in recs) == Status.NOT_APPLICABLE}


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
    prerequisites: Mapping[str, tuple[tuple[str, str | None], ...]] | None = None,
    not_applicable: Mapping[str, str] | None = None,
    scope: Scope | None = None,
    reaches: Mapping[str, frozenset[str]] | None = None,
    site_digest: str | None = None,
) -> Fold:
    """Fold test records into rule and layer statuses, root causes and the verdict.

    `reaches`: rule -> the targets its tests reach (`ssh:<host>`, `api:*`); a rule broken by an SSH fault of a host is
    no broken ancestor of a rule whose tests do not reach that host (see `breaks`)."""
    waivers = waivers or {}
    today = today or date.today()
    records = attribute_symptoms(catalog, attribute_unreachable(records, management_context, prerequisites))
    by_rule: dict[str, list[TestRecord]] = {rid: [] for rid in catalog.rules}
    for rec in records:
        by_rule.setdefault(rec.rule, []).append(rec)
    raw = {rid: rule_status(r.outcome for r in by_rule[rid]) for rid in catalog.rules}
    raw.update({rid: Status.ERROR for rid in _not_verifiable(catalog, by_rule)})
    for rid, status in raw.items():
        rule = catalog.rules[rid]
        if status == Status.UNTESTED and not by_rule[rid]:
            if rid in (not_applicable or {}):
                raw[rid] = Status.NOT_APPLICABLE
            elif scope is not None and rid in scope.not_selected:
                raw[rid] = Status.NOT_SELECTED
        if raw[rid] == Status.PASSED and rule.kind == "informational":
            raw[rid] = Status.RECORDED  # an informational rule reads and records; it never passes a requirement
    blocked_by = {rid: tuple(sorted({b for r in by_rule[rid] for b in r.blocked_by})) for rid in catalog.rules}
    statuses = dict(raw)
    reasons: list[str] = []
    for rid, waiver in waivers.items():
        if raw.get(rid) != Status.FAILED:
            continue
        state = waiver.state(Status.FAILED, today, site_digest)
        if state == "expired":
            reasons.append(f"{rid}: waiver {waiver.ticket} expired on {waiver.expires.isoformat()}")
        elif state == "stale":
            reasons.append(f"{rid}: waiver {waiver.ticket} was granted against site digest {waiver.site_digest}, the "
                           f"site is now {site_digest}: grant it again for this site")
        else:
            statuses[rid] = Status.WAIVED
    first_broken = [
        r.id for r in catalog.ordered()
        if r.kind != "informational" and statuses[r.id] in BROKEN
        and not any(statuses[a] in BROKEN and breaks(by_rule[a], (reaches or {}).get(r.id))
                    for a in catalog.ancestors(r.id))
    ]
    broken = [_detail(catalog, rid, statuses[rid], by_rule[rid], management_context) for rid in first_broken]
    # An error that is not a judged failure and had nothing unreachable behind it is never a root cause: it is
    # listed apart (not_judged) with what could not be read and what to do.
    details = tuple(d for d in broken if d.kind in ROOT_CAUSE_KINDS)
    not_judged = tuple(d for d in broken if d.kind not in ROOT_CAUSE_KINDS)
    root_causes = tuple(d.rule for d in details)
    layers = {}
    for layer in LAYERS:
        members = [statuses[r.id] for r in catalog.rules.values() if r.layer == layer]
        layers[layer] = min(members, key=_SEVERITY_ORDER.index) if members else Status.NOT_APPLICABLE
    # The lowest broken layer comes only from judged failures: a target the run could not read says nothing
    # about the layer it would have judged.
    lowest = min((d.layer for d in details if d.kind == "finding"), key=LAYERS.index, default=None)
    verdict = _verdict(catalog, statuses, reasons, handover, simulated, records_skipped(by_rule), unattested_manual,
                       scope)
    return Fold(records, statuses, blocked_by, root_causes, layers, lowest, verdict, tuple(reasons), details, scope,
                not_judged)


# Errors that kept a rule from being judged, with nothing unreachable behind them: never a root cause.
# A 403 ("forbidden") is one of them: the run's identity may not read something, which says nothing about the site.
UNJUDGED_KINDS = frozenset({"unreadable", "not-verifiable", "forbidden"})
# Root causes: judged failures, and targets the run could not reach (their connectivity cause and its own fix).
ROOT_CAUSE_KINDS = frozenset({"finding", "unreachable"})
NOT_VERIFIABLE_FIX = ("The ADR requires this rule: give the run what it needs to check it (the message says what is "
                      "missing), and rerun.")
NOT_VERIFIABLE_FIX_KO = "ADR이 요구하는 규칙이다: 점검에 필요한 것(메시지 참조)을 실행에 주고 다시 실행한다."


def _detail(catalog: Catalog, rid: str, status: str, records: list[TestRecord],
            management_context: str | None = None) -> RootCause:
    """What broke a rule: a judged failure (`finding`), a target it could not reach (`unreachable`), else why it
    could not be judged (`not-verifiable`, `unreadable`: a check's own error, a hang, a test that did not run).

    An unreachable target's layer is the layer of the rule that owns reaching it (the site's API: rke2, through
    kubeconfig-context; a host's SSH: host), not the layer of the check that happened to meet the fault first."""
    rule = catalog.rules[rid]
    if status == Status.FAILED:
        failed = next(r for r in records if r.outcome == Status.FAILED)
        fix, fix_ko = failed.fix or (rule.remediation, rule.remediation_ko)  # the finding's own fix, when it named one
        return RootCause(rid, "finding", rule.layer, failed.message, fix, fix_ko)
    errored = [r for r in records if r.outcome == Status.ERROR]
    reached = next((r for r in errored if r.fault is not None and r.fault.target
                    and r.fault.cause not in UNJUDGED_KINDS), None)
    fault: TargetFault | None
    if reached is not None and reached.fault is not None:
        fault = reached.fault
        owner = connectivity_rule(fault.target, management_context) if fault.target else None
        layer = catalog.rules[owner].layer if owner is not None and owner in catalog.rules else rule.layer
        return RootCause(rid, "unreachable", layer, fault.message,
                         fault.fix or "Make the target reachable and rerun.",
                         fault.fix_ko or "대상에 접속할 수 있게 한 뒤 다시 실행한다.", fault.target, fault.cause)
    if not errored and any(r.outcome == Status.NOT_APPLICABLE for r in records):  # every test of a required rule N/A
        reason = next(r.message for r in records if r.outcome == Status.NOT_APPLICABLE)
        return RootCause(rid, "not-verifiable", rule.layer, f"not verifiable: {reason} (the ADR requires this rule; it "
                         "cannot be not applicable)", NOT_VERIFIABLE_FIX, NOT_VERIFIABLE_FIX_KO, None, "not-verifiable")
    first = next((r for r in errored if r.fault is not None), errored[0] if errored else None)
    fault = first.fault if first is not None else None
    message = first.message if first is not None else "error"
    if message.startswith("not verifiable: ") or (fault is not None and fault.cause == "not-verifiable"):
        return RootCause(rid, "not-verifiable", rule.layer, message,
                         (fault.fix if fault is not None and fault.fix else None) or NOT_VERIFIABLE_FIX,
                         (fault.fix_ko if fault is not None and fault.fix_ko else None) or NOT_VERIFIABLE_FIX_KO,
                         first.target if first is not None else None, "not-verifiable")
    return RootCause(rid, "unreadable", rule.layer, message,
                     (fault.fix if fault is not None and fault.fix else None) or UNREADABLE_FIX,
                     (fault.fix_ko if fault is not None and fault.fix_ko else None) or UNREADABLE_FIX_KO,
                     first.target if first is not None else None, fault.cause if fault is not None else None)


def records_skipped(by_rule: Mapping[str, list[TestRecord]]) -> list[str]:
    return [r.nodeid for recs in by_rule.values() for r in recs if r.outcome == Status.SKIPPED]


def _verdict(catalog, statuses, reasons, handover, simulated, skipped, unattested, scope) -> str:
    considered = [r for r in catalog.rules.values() if r.kind != "informational"]
    failed = [r.id for r in considered if statuses[r.id] == Status.FAILED]
    if failed:
        reasons.insert(0, "failed: " + ", ".join(failed))
        return "REJECTED"
    open_ = [r.id for r in considered if statuses[r.id] not in _DONE]
    if open_:
        reasons.append("not passed: " + ", ".join(f"{rid} ({statuses[rid]})" for rid in open_))
    if handover:
        if simulated:
            reasons.append("a simulated (testbed) run is never a handover acceptance")
        if scope is not None and not scope.full:
            reasons.append(f"a selection (scope: {scope.name}) is never a handover acceptance")
        if skipped:
            reasons.append("skipped without a not-applicable reason: " + ", ".join(skipped))
        unattested = list(unattested)
        if unattested:
            reasons.append("manual checks without attestation: " + ", ".join(unattested))
    return "INCOMPLETE" if reasons else "ACCEPTED"
