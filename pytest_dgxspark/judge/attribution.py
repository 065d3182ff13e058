"""Who accounts for a fault: the rule owning a target, a failed prerequisite, a symptom's cause; and which broken
rules block which checks (a rule blocks another only when its failure makes the other's evidence unobtainable)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from pytest_dgxspark.catalog.rules import Catalog, reaching_owner
from pytest_dgxspark.judge.records import TestRecord
from pytest_dgxspark.judge.status import BLOCKED_PREFIX, BROKEN, Status

# Faults that are the target's answer, not a failure to reach it (a 403: RBAC denies this identity one request).
ANSWERED_KINDS = frozenset({"forbidden"})


def connectivity_rule(target: str, management_context: str | None = None) -> str | None:
    """The rule that owns reaching `target`; None for targets no rule owns (e.g. the Argo CD cluster's API)."""
    kind, _, name = target.partition(":")
    if kind == "api" and management_context and name == management_context:
        return None
    return reaching_owner(kind) if kind in ("ssh", "api") else None


def target_owners(
    records: Iterable[TestRecord],
    management_context: str | None = None,
    prerequisites: Mapping[str, tuple[tuple[str, str | None], ...]] | None = None,
    pending: Iterable[str] = (),
) -> dict[str, tuple[tuple[str, ...], str]]:
    """target -> (the rules that account for its fault, how): `prerequisite` (a failed prerequisite, e.g. the API of
    a single-server site -> rke2-service on that server), `connectivity` (the connectivity rule's own error on it) or
    `first` (without that, the first error on the target, after the connectivity rule had reached it) or `not-run`
    (the first error, the connectivity rule not having run: not selected, or no tests).

    `pending`: rules with tests still to run; a target whose connectivity rule is pending gets no `first` owner yet
    (that rule may still report the fault itself).
    """
    # A 403 is an answer: the API was reached, this identity may not do one thing there. It owns no target.
    records = [r for r in records if not (r.fault is not None and r.fault.cause in ANSWERED_KINDS)]
    pending = set(pending)
    ran = {r.rule for r in records}
    owners: dict[str, tuple[tuple[str, ...], str]] = {}
    for target, needs in (prerequisites or {}).items():
        broken = tuple(sorted({rule for rule, host in needs for r in records
                               if r.rule == rule and r.outcome == Status.FAILED
                               and (host is None or r.nodeid.endswith(f"[{host}]"))}))
        if broken:
            owners[target] = (broken, "prerequisite")
    for rec in records:
        if rec.outcome == Status.ERROR and rec.target and rec.target not in owners:
            owner = connectivity_rule(rec.target, management_context)
            if owner is not None and rec.rule == owner:
                owners[rec.target] = ((owner,), "connectivity")
    # Without its connectivity rule's own error (not selected, or its check read the target before the fault), the
    # first error on a target is the target's connectivity finding: later errors on it are blocked by that one.
    for rec in records:
        owner = connectivity_rule(rec.target, management_context) if rec.target else None
        if rec.outcome == Status.ERROR and rec.target and rec.target not in owners and owner is not None \
                and owner not in pending:
            owners[rec.target] = ((rec.rule,), "first" if owner in ran else "not-run")
    return owners


def blocked_message(owner: tuple[str, ...], how: str, target: str, message: str,
                    management_context: str | None = None) -> str:
    """A test blocked by the fault of `target` that `owner` accounts for, in words."""
    if how in ("first", "not-run"):
        rule = connectivity_rule(target, management_context)
        clause = "did not run" if how == "not-run" else "had reached it before the fault"
        return (f"{BLOCKED_PREFIX}{', '.join(owner)} ({target} unreachable: the same fault, which {owner[0]} met "
                f"first; {rule}, which owns reaching it, {clause}): {message}")
    return f"{BLOCKED_PREFIX}{', '.join(owner)} ({target} unreachable): {message}"


def attribute_unreachable(
    records: Iterable[TestRecord],
    management_context: str | None = None,
    prerequisites: Mapping[str, tuple[tuple[str, str | None], ...]] | None = None,

) -> list[TestRecord]:
    """Errors caused only by a target that is already accounted for (target_owners) become `blocked`: the report
    names one cause instead of one per layer. Most are blocked as they happen (the plugin's makereport); this
    folds the rest, e.g. an error met before the connectivity rule reported the same fault."""
    records = list(records)
    owners = target_owners(records, management_context, prerequisites)
    result = []
    for rec in records:
        owner, how = owners.get(rec.target or "", ((), ""))
        if rec.outcome == Status.ERROR and owner and rec.rule not in owner:
            rec = replace(rec, outcome=Status.BLOCKED, blocked_by=owner,
                          message=blocked_message(owner, how, rec.target or "", rec.message, management_context))
        result.append(rec)
    return result


def _host_of(nodeid: str) -> str | None:
    """The host parameter of a per-host test id (`...::test_x[gpu-01]`), else None."""
    return nodeid[nodeid.rindex("[") + 1:-1] if nodeid.endswith("]") and "[" in nodeid else None


def symptom_causes(catalog: Catalog, rule_id: str, nodeid: str, records: Iterable[TestRecord]) -> tuple[str, ...]:
    """The failed `symptom_of` rules (on the same host) whose symptom a failure of `rule_id` in `nodeid` is."""
    rule = catalog.rules.get(rule_id)
    if rule is None or not rule.symptom_of:
        return ()
    failed_on: dict[str, set[str | None]] = {}
    for rec in records:
        if rec.outcome == Status.FAILED:
            failed_on.setdefault(rec.rule, set()).add(_host_of(rec.nodeid))
    host = _host_of(nodeid)
    return tuple(sorted(c for c in rule.symptom_of if c in failed_on
                        and (host is None or None in failed_on[c] or host in failed_on[c])))


def symptom_message(causes: tuple[str, ...], message: str) -> str:
    return f"{BLOCKED_PREFIX}{', '.join(causes)} (its symptom): {message}"


def attribute_symptoms(catalog: Catalog, records: list[TestRecord]) -> list[TestRecord]:
    """A failure of a rule under a failed `symptom_of` rule (on the same host) is that rule's symptom: blocked."""
    result = []
    for rec in records:
        if rec.outcome == Status.FAILED:
            causes = symptom_causes(catalog, rec.rule, rec.nodeid, records)
            if causes:
                rec = replace(rec, outcome=Status.BLOCKED, blocked_by=causes,
                              message=symptom_message(causes, rec.message))
        result.append(rec)
    return result


def breaks(records: Iterable[TestRecord], reaches: Iterable[str] | None) -> bool:
    """Whether a broken rule (its `records`) makes the evidence of checks that reach `reaches` (targets: `ssh:<host>`,
    `api:...`; None: unknown) unobtainable or meaningless. A judged failure or an error without a target always does;
    an SSH fault of a host only for checks that reach that host (an API-side check of its Node is still judged)."""
    broken = [r for r in records if r.outcome in BROKEN]
    if reaches is None or any(r.outcome == Status.FAILED or not r.target for r in broken):
        return True
    wanted = set(reaches)
    return any(not r.target.startswith("ssh:") or r.target in wanted for r in broken if r.target)
