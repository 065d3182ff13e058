"""The traceability view of results.json rules: the compact matrix (failures and waivers first) and its detail."""
from __future__ import annotations

import re
from typing import Any

from pytest_dgxspark.catalog.rules import LAYERS
from pytest_dgxspark.judge.status import BROKEN, Status

_EVIDENCE = re.compile(r"^evidence/[A-Za-z0-9][A-Za-z0-9._\-]*\.json$")
_PARAM = re.compile(r"^(?P<base>.+?)\[(?P<param>.*)\]$")
# Matrix order: what an auditor must look at first; every other status follows, bottom-up by layer.
_RANK: dict[str, int] = {Status.FAILED: 0, Status.ERROR: 0, Status.BLOCKED: 1, Status.WAIVED: 2}


def evidence_href(value: Any) -> str | None:
    """value when it is a bundle evidence path (evidence/<name>.json), else None: nothing else becomes a link."""
    return value if isinstance(value, str) and _EVIDENCE.match(value) else None


def css_status(status: Any) -> str:
    """A status as a CSS class suffix: any string renders, unknown characters become '-'."""
    return re.sub(r"[^a-z0-9-]", "-", str(status).lower()) or "unknown"


def ordered_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed and error rules first, then blocked, then waived, then the rest; each group bottom-up by layer."""
    layer = {name: index for index, name in enumerate(LAYERS)}
    indexed = list(enumerate(rules))
    indexed.sort(key=lambda pair: (_RANK.get(str(pair[1].get("status")), 3),
                                   layer.get(pair[1].get("layer"), len(LAYERS)), pair[0]))
    return [rule for _, rule in indexed]


def _groups(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tests grouped by their node id without the parameter (one line per check, its nodes as links)."""
    groups: dict[str, dict[str, Any]] = {}
    for test in tests:
        nodeid = str(test.get("nodeid") or "—")
        match = _PARAM.match(nodeid)
        base, param = (match.group("base"), match.group("param")) if match else (nodeid, None)
        group = groups.setdefault(base, {"base": base, "members": [], "passed": 0, "total": 0})
        outcome = str(test.get("outcome") or "—")
        group["members"].append({
            "param": param, "outcome": outcome, "css": css_status(outcome),
            "href": evidence_href(test.get("evidence")),
            "message": str(test.get("message") or "") if outcome != Status.PASSED else "",
        })
        group["total"] += 1
        group["passed"] += outcome == Status.PASSED
    for group in groups.values():
        outcomes = {m["outcome"] for m in group["members"]}
        group["outcome"] = outcomes.pop() if len(outcomes) == 1 else "mixed"
        group["css"] = css_status(group["outcome"])
    return list(groups.values())


def rows(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One matrix row per rule: id, ADR section, status, tests passed/total, evidence links; plus its detail."""
    result = []
    for rule in ordered_rules(rules):
        tests = [t for t in rule.get("tests") or [] if isinstance(t, dict)]
        links = [{"n": i + 1, "href": href} for i, href in
                 enumerate(evidence_href(t.get("evidence")) for t in tests) if href]
        result.append({
            **rule,
            "status": str(rule.get("status")),
            "css": css_status(rule.get("status")),
            "passed": sum(1 for t in tests if t.get("outcome") == Status.PASSED),
            "total": len(tests),
            "links": links,
            "groups": _groups(tests),
        })
    return result


def not_judged(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rules an error kept from being judged (results.json `not_judged`): what could not be read and what to do.
    Never root causes; shown apart from them."""
    by_id = {r.get("id"): r for r in results.get("rules") or [] if isinstance(r, dict)}
    return [{**by_id[d["rule"]], "css": css_status(by_id[d["rule"]].get("status")), "observed": str(d.get("message") or ""),
             "kind": d.get("kind"), "target": d.get("target"), "cause": None,
             "remediation": d.get("fix") or "", "remediation_ko": d.get("fix_ko") or ""}
            for d in results.get("not_judged") or [] if isinstance(d, dict) and d.get("rule") in by_id]


def root_causes(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The root-cause rules (results.json root_causes; without them, the lowest broken layer's broken rules).

    With results.json `root_cause_details` (rule, kind, message, fix, fix_ko, target, cause), a cause shows
    its own message and fix: for a target the run could not read, the fix is the connection's, not the rule's.
    """
    by_id = {r.get("id"): r for r in results.get("rules") or [] if isinstance(r, dict)}
    details = {d.get("rule"): d for d in results.get("root_cause_details") or [] if isinstance(d, dict)}
    chosen = [by_id[i] for i in results.get("root_causes") or [] if i in by_id]
    lowest = results.get("lowest_broken_layer")
    if not chosen and lowest:
        chosen = [r for r in by_id.values() if r.get("layer") == lowest and r.get("status") in BROKEN]
    causes = []
    for rule in chosen:
        detail = details.get(rule.get("id"), {})
        observed = detail.get("message") or next(
            (str(t.get("message")) for t in rule.get("tests") or []
             if isinstance(t, dict) and t.get("outcome") != Status.PASSED and t.get("message")), "")
        # an unreachable target's cause shows the target's layer (detail), not the layer of the check that met it
        causes.append({**rule, "layer": detail.get("layer") or rule.get("layer"),
                       "css": css_status(rule.get("status")), "observed": str(observed),
                       "kind": detail.get("kind"), "target": detail.get("target"), "cause": detail.get("cause"),
                       "remediation": detail.get("fix") or rule.get("remediation") or "",
                       "remediation_ko": detail.get("fix_ko") or rule.get("remediation_ko") or ""})
    return causes
