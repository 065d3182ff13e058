"""dgxspark-report show DIR: a saved bundle printed again, as the run's closing block had it, with the rule table."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pytest_dgxspark.report.closing import block_lines, drift_lines

OK, FAILED = 0, 1


def rule_table(results: dict[str, Any]) -> list[str]:
    """One line per rule: id, layer, status and what blocked it (or the waiver that accepted it)."""
    rules = results.get("rules") or []
    width = max((len(r.get("id", "")) for r in rules), default=10)
    lines = [f"  {'rule':{width}}  {'layer':13} status"]
    for rule in rules:
        extra = ""
        if rule.get("blocked_by"):
            extra = f"  blocked by {', '.join(rule['blocked_by'])}"
        elif (rule.get("waiver") or {}).get("state") == "applied":
            extra = f"  waived by {rule['waiver']['approver']} until {rule['waiver']['expires']}"
        lines.append(f"  {rule.get('id', ''):{width}}  {rule.get('layer', ''):13} {rule.get('status')}{extra}")
    return lines


def show(directory: Path) -> int:
    """Print the bundle's verdict, root causes, rule table and drift from its results.json; 0 when it could be read."""
    path = directory / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(results, dict) or "verdict" not in results:
            raise ValueError("not a results.json of pytest-dgxspark (no verdict)")
        run = results.get("run") or {}
        print(f"run {run.get('id')} of site {run.get('site')}, started {run.get('started')}"
              f"{' (SIMULATED: ' + str(run.get('testbed')) + ')' if run.get('simulated') else ''}")
        for line in block_lines(results, directory):
            print(line)
        print("rules:")
        for line in rule_table(results):
            print(line)
        drift = results.get("drift")
        if isinstance(drift, dict):
            print(f"drift since {(drift.get('baseline') or {}).get('run_id')}:")
            for line in drift_lines(drift) or ["no change"]:
                print(f"  {line}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"FAILED: {path}: {exc}", file=sys.stderr)
        return FAILED
    return OK
