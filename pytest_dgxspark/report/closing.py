"""The run's last words on the terminal (verdict, scope, root causes with their fix, counts, bundle) and exit status."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.judge.status import Status

# The exit status follows the verdict (README "Exit status"); pytest's own codes stay for what pytest decides.
EXIT_ACCEPTED = 0
EXIT_REJECTED = 1
EXIT_INCOMPLETE = 8  # unused by pytest (0-5, and 6 for --max-warnings since pytest 9): never read as a pass
_VERDICT_EXIT = {"ACCEPTED": EXIT_ACCEPTED, "REJECTED": EXIT_REJECTED, "INCOMPLETE": EXIT_INCOMPLETE}
_PYTEST_KEEPS = (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR,
                 *(code for code in pytest.ExitCode if code.name == "MAX_WARNINGS_ERROR"))
_STATUS_ORDER = (Status.FAILED, Status.ERROR, Status.BLOCKED, Status.UNTESTED, Status.WAIVED, Status.PASSED,
                 Status.RECORDED, Status.NOT_APPLICABLE, Status.NOT_SELECTED)


def exit_status(verdict: str, pytest_status: int) -> int:
    """ACCEPTED 0, REJECTED 1, INCOMPLETE 8; interrupted (2), internal error (3), usage error (4) and pytest 9's
    too many warnings (6) stay."""
    if pytest_status in _PYTEST_KEEPS:
        return int(pytest_status)
    return _VERDICT_EXIT.get(verdict, EXIT_INCOMPLETE)


def block_lines(results: dict[str, Any], run_dir: Path | None) -> list[str]:
    """The closing block's lines."""
    scope = results.get("scope") or {}
    stamp = " (SIMULATED)" if results.get("run", {}).get("simulated") else ""
    lines = [f"dgxspark: {results['verdict']}, scope: {scope.get('name', 'full')}{stamp}{_waived_note(results)}"]
    lines.append(f"  lowest broken layer: {results.get('lowest_broken_layer') or 'none'}")
    details = results.get("root_cause_details") or []
    if details:
        lines.append("  root causes:")
        for detail in details:
            where = f", {detail['target']}" if detail.get("target") else ""
            lines.append(f"    {detail['rule']} ({detail['kind']}{where}): {_first_line(detail['message'])}")
            lines.append(f"      fix: {_first_line(detail['fix'])}")
    else:
        lines.append("  root causes: none")
    unjudged = results.get("not_judged") or []
    if unjudged:
        lines.append("  not judged (an error kept these rules from being judged; never a root cause):")
        for detail in unjudged:
            lines.append(f"    {detail['rule']} ({detail['kind']}): {_first_line(detail['message'])}")
            lines.append(f"      fix: {_first_line(detail['fix'])}")
    unverified = scope.get("unverified_prerequisites") or []
    if unverified:
        lines.append(f"  not verified by this selection (prerequisites): {', '.join(unverified)}")
    if results.get("verdict") == "INCOMPLETE" and results.get("verdict_reasons"):
        lines.append(f"  incomplete: {'; '.join(_short(r) for r in results['verdict_reasons'])}")
    drift = results.get("drift")
    if isinstance(drift, dict):
        elsewhere = drift.get("other_cluster")
        if elsewhere:
            lines.append(f"  drift: {elsewhere.get('message')}")
        lines.append(f"  drift: {len(drift.get('status_changes') or [])} status changes, "
                     f"{len(drift.get('provenance') or [])} provenance changes over "
                     f"{len(drift.get('compared_rules') or [])} rules judged in both runs")
        lines.extend(f"    {line}" for line in drift_lines(drift))
    lines.extend(_waiver_lines(results))
    counts = results.get("counts") or {}
    ordered = sorted(counts, key=lambda s: _STATUS_ORDER.index(s) if s in _STATUS_ORDER else len(_STATUS_ORDER))
    lines.append("  rules: " + ", ".join(f"{counts[s]} {s}" for s in ordered))
    lines.extend(forecast_lines(results))
    lines.append(f"  bundle: {run_dir}" if run_dir is not None else "  bundle: NOT WRITTEN (see above)")
    return lines


def forecast_lines(results: dict[str, Any]) -> list[str]:
    """The forecast section (results.json forecast[]): what will break next, advisory; none when nothing was advised."""
    entries = results.get("forecast") or []
    if not entries:
        return []
    enforced = results.get("forecast_mode") == "enforce"
    lines = ["  forecast (what will break next; " + ("enforced: rke2/vars.yml forecast: enforce)" if enforced
                                                     else "advisory, the verdict does not count it):")]
    for entry in entries:
        when = f", {entry['due']}" if entry.get("due") else ""
        where = f" ({entry['target']}{when})" if entry.get("target") else ""
        lines.append(f"    {entry['id']} [{entry['status']}]{where}: {_first_line(entry['message'])}")
        lines.append(f"      fix: {_first_line(entry['fix'])}")
    return lines


def write_block(tw: Any, results: dict[str, Any], run_dir: Path | None) -> None:
    """Print the closing block after pytest's own summary, the verdict line coloured."""
    colour = {"ACCEPTED": {"green": True}, "REJECTED": {"red": True}}.get(results["verdict"], {"yellow": True})
    lines = block_lines(results, run_dir)
    tw.line()
    tw.line(lines[0], bold=True, **colour)
    for line in lines[1:]:
        tw.line(line)


def _short(reason: str) -> str:
    """A verdict reason for the terminal: a long list of open rules becomes its count (results.json has them all)."""
    if reason.startswith("not passed: ") and reason.count(", ") >= 4:
        return f"{reason.count(', ') + 1} required rules not passed (see the counts below)"
    return reason


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= 240 else line[:237] + "..."


_OPEN = (Status.FAILED, Status.ERROR, Status.BLOCKED, Status.UNTESTED)


def _waived_note(results: dict[str, Any]) -> str:
    """What the verdict line says of waivers: that only waived rules did not pass, or that the open rules are only
    blocked by waived ones (a waiver accepts a failure, not the checks that failure keeps from running)."""
    rules = results.get("rules") or []
    waived = [r["id"] for r in rules if r.get("status") == Status.WAIVED]
    if not waived:
        return ""
    open_ = [r for r in rules if r.get("status") in _OPEN and r.get("kind") != "informational"]
    if not open_:
        return f" (only waived rules did not pass: {', '.join(waived)})"
    if all(r.get("status") == Status.BLOCKED and set(r.get("blocked_by") or ()) <= set(waived) for r in open_):
        return (f" (blocked only by waived rules: {', '.join(waived)}; a waiver accepts a failure, not the checks "
                "it keeps from running)")
    return ""


def _waiver_lines(results: dict[str, Any]) -> list[str]:
    """Each waiver of the site with its state: applied (approver, role, ticket, expiry), unused, expired or stale."""
    lines = []
    for rule in results.get("rules") or []:
        waiver = rule.get("waiver")
        if not waiver:
            continue
        state = waiver.get("state") or ("expired" if waiver.get("expired") else "applied")
        who = f"{waiver['approver']} ({waiver['role']}), ticket {waiver['ticket']}"
        if state == "applied":
            lines.append(f"  waived: {rule['id']} by {who}, until {waiver['expires']}")
        elif state == "unused":
            lines.append(f"  waiver unused: {rule['id']} ({who}): the rule is {rule['status']}, nothing to waive")
        elif state == "expired":
            lines.append(f"  waiver expired: {rule['id']} ({who}) expired on {waiver['expires']}: the rule stays failed")
        else:
            lines.append(f"  waiver stale: {rule['id']} ({who}) was granted against another site digest: the rule "
                         "stays failed")
    return lines


def drift_lines(drift: dict[str, Any]) -> list[str]:
    """Each change since the baseline, named: a rule's status (old -> new), a provenance value (what, old -> new,
    on which node or the cluster)."""
    lines = [f"{c['rule']}: {c.get('from')} -> {c.get('to')}" for c in drift.get("status_changes") or []]
    for change in drift.get("provenance") or []:
        where = change.get("node") or "cluster"
        lines.append(f"{where}: {change.get('key')}: {change.get('from')!s} -> {change.get('to')!s}")
    return lines
