"""report.html says what results.json says: each row's result and the header's counts are the run's own statuses.

pytest-html knows pytest's outcomes only: a blocked or not-applicable check is 'Skipped', a recorded rule's check
'Passed', a target fault met in a check's call phase 'Failed', and its header counts those. Once it has written
report.html, `agree` rewrites each row's result (its data and its result cell) to the status results.json gives the
test (rows.py: a recorded or waived rule's status, else the test's outcome), the header's filters to one count per
status, the page's filter list to know those statuses, and puts the rules' counts (as summary.html shows them) above.
`disagreements` reads a report.html back and names every row and count that differs from results.json.
"""
from __future__ import annotations

import html
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from markupsafe import escape

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report import rows as rowmod
from pytest_dgxspark.report.htmlreport import add_row_cells, layer_sort_key
from pytest_dgxspark.report.results import write_atomic

REPORT = "report.html"
_BLOB = re.compile(r'data-jsonblob="(?P<blob>[^"]*)"')
_FILTERS = re.compile(r'<div class="filters">.*?</div>', re.S)
_POSSIBLE = re.compile(r"const possibleFilters = \[[^\]]*\]")
_PREFIX = '<div class="additional-summary prefix">'
_COUNT = re.compile(r'<span class="(?P<status>[a-z-]+)">(?P<n>\d+) (?P<label>[^<,]*),?</span>')
_RESULT_CELL = re.compile(r'^<td class="col-result">[^<]*</td>$')
_MARK = '<style id="dgxspark-statuses">'
# Header order: what an auditor looks at first; every status the run has is shown, these always.
ORDER = (Status.FAILED, Status.ERROR, Status.BLOCKED, Status.UNTESTED, Status.WAIVED, Status.PASSED, Status.RECORDED,
         Status.NOT_APPLICABLE, Status.NOT_SELECTED)
_COLOURS: dict[str, str] = {
    Status.FAILED: "#b71c1c", Status.ERROR: "#b71c1c", Status.BLOCKED: "#e65100", Status.UNTESTED: "#555",
    Status.WAIVED: "#8d6e00", Status.PASSED: "#1b5e20", Status.RECORDED: "#0d47a1", Status.NOT_APPLICABLE: "#555",
    Status.NOT_SELECTED: "#555"}


class ReportHtmlError(Exception):
    """report.html is not the page pytest-html writes (no data blob)."""


def _load(text: str, path: Path) -> dict[str, Any]:
    match = _BLOB.search(text)
    if not match:
        raise ReportHtmlError(f"{path}: no data-jsonblob (is it pytest-html's report.html?)")
    try:
        return json.loads(html.unescape(match.group("blob")))
    except ValueError as exc:
        raise ReportHtmlError(f"{path}: its data-jsonblob is not JSON ({exc})") from exc


def _statuses(table: dict[str, rowmod.Row]) -> list[str]:
    seen = {row.status for row in table.values()}
    return [*ORDER, *sorted(seen - set(ORDER))]


def _filters(table: dict[str, rowmod.Row]) -> str:
    tally = rowmod.counts(table)
    parts = ['<div class="filters">']
    for status in _statuses(table):
        n = tally.get(status, 0)
        parts.append(f'<input checked="true" class="filter" name="filter_checkbox" type="checkbox" '
                     f'data-test-result="{status}"{" disabled" if n == 0 else ""}>'
                     f'<span class="{status}">{n} {rowmod.word(status)},</span>')
    parts.append("</div>")
    return "".join(parts)


def _rules_line(results: dict[str, Any]) -> str:
    counts = results.get("counts") or {}
    listed = ", ".join(f"{status} {counts[status]}" for status in [*ORDER, *sorted(set(counts) - set(ORDER))]
                       if counts.get(status))
    return (f'<p class="dgxspark-rules" data-verdict="{escape(str(results.get("verdict")))}"><b>Verdict '
            f'{escape(str(results.get("verdict")))}</b> · rules by status (results.json, as in summary.html): '
            f'{escape(listed) or "none"} · the counts and rows below are tests, each with the status results.json '
            "gives it (a recorded or waived rule's status for its tests)</p>")


def _style(statuses: list[str]) -> str:
    rules = "".join(f"span.{s}, .{s} .col-result {{ color: {_COLOURS.get(s, '#555')}; }}" for s in statuses)
    return f"{_MARK}{rules}</style>"


def _entry(row: rowmod.Row, rule: dict[str, Any]) -> dict[str, Any]:
    """A report.html row for a test pytest did not report, with the cells pytest-html and htmlreport.py give one."""
    word = rowmod.word(row.status)
    shown = SimpleNamespace(dgxspark_rule=row.rule, dgxspark_layer=str(rule.get("layer") or ""),
                            dgxspark_severity=str(rule.get("severity") or ""))
    cells = [f'<td class="col-result">{word}</td>', f'<td class="col-testId">{escape(row.nodeid)}</td>',
             '<td class="col-duration">0 ms</td>', '<td class="col-links"></td>']
    add_row_cells(shown, cells)  # rule, layer and severity, as every other row has them
    return {"extras": [], "result": word, "testId": row.nodeid, "rule": row.rule,
            "layer": layer_sort_key(shown.dgxspark_layer), "severity": shown.dgxspark_severity, "duration": "0 ms",
            "log": row.message or "the test did not run", "resultsTableRow": cells}


def agree(run_dir: Path) -> int:
    """Rewrite run_dir/report.html so that its rows and header follow run_dir/results.json; the number of rows whose
    result changed. Nothing is written when there is no report.html; ReportHtmlError when it is not pytest-html's."""
    path = run_dir / REPORT
    if not path.is_file():
        return 0
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    text = path.read_text(encoding="utf-8")
    blob = _load(text, path)
    table = rowmod.rows(results)
    changed = 0
    tests = blob.setdefault("tests", {})
    rules = {str(r.get("id")): r for r in results.get("rules") or [] if isinstance(r, dict)}
    for nodeid, row in table.items():  # the tests results.json holds that pytest never reported (not run: errors)
        if nodeid not in tests:
            tests[nodeid] = [_entry(row, rules.get(row.rule) or {})]
            changed += 1
    for nodeid, entries in tests.items():
        row = table.get(nodeid)
        if row is None:
            continue
        for entry in entries:
            want = rowmod.word(row.status)
            if entry.get("result") != want:
                changed += 1
            entry["result"] = want
            cells = entry.get("resultsTableRow") or []
            if cells and _RESULT_CELL.match(cells[0]):
                cells[0] = f'<td class="col-result">{want}</td>'
    statuses = _statuses(table)
    text = _BLOB.sub(lambda _m: f'data-jsonblob="{escape(json.dumps(blob))}"', text, count=1)
    text = _FILTERS.sub(lambda _m: _filters(table), text, count=1)
    text = _POSSIBLE.sub(lambda _m: "const possibleFilters = [" + ", ".join(f"'{s}'" for s in statuses) + "]", text,
                         count=1)
    text = re.sub(r'<p class="dgxspark-rules".*?</p>', "", text, flags=re.S)
    text = text.replace(_PREFIX, _PREFIX + _rules_line(results), 1)
    text = re.sub(re.escape(_MARK) + r".*?</style>", "", text, flags=re.S)
    text = text.replace("</head>", _style(statuses) + "</head>", 1)
    write_atomic(path, text)
    return changed


def disagreements(run_dir: Path) -> list[str]:
    """Every way run_dir/report.html differs from results.json: a test missing or extra, a row's result or rule, a
    header count (empty when they agree)."""
    path = run_dir / REPORT
    try:
        text = path.read_text(encoding="utf-8")
        blob = _load(text, path)
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ReportHtmlError) as exc:
        return [f"{path}: cannot be read against results.json ({exc})"]
    table = rowmod.rows(results)
    tests = blob.get("tests") or {}
    problems = [f"{path}: {nodeid}: not in report.html (results.json: {table[nodeid].status})"
                for nodeid in table if nodeid not in tests]
    problems += [f"{path}: {nodeid}: in report.html, not a test of results.json" for nodeid in tests if nodeid not in table]
    for nodeid, entries in tests.items():
        row = table.get(nodeid)
        if row is None:
            continue
        for entry in entries:
            shown = str(entry.get("result", "")).lower()
            cells = entry.get("resultsTableRow") or [""]
            if shown != row.status or cells[0] != f'<td class="col-result">{rowmod.word(row.status)}</td>':
                problems.append(f"{path}: {entry.get('testId', nodeid)}: shown as {entry.get('result')!r}, "
                                f"results.json says {row.status}")
            if entry.get("rule") not in (None, row.rule):
                problems.append(f"{path}: {nodeid}: rule {entry.get('rule')!r}, results.json says {row.rule}")
    # one page: the data pytest-html's script renders is the data-container's (a decoy blob before it was read here
    # while the page showed another), with one header of counts and one rules line
    blobs, headers, lines = text.count("data-jsonblob"), text.count('class="filters"'), text.count(_PREFIX)
    if blobs != 1 or '<div id="data-container" data-jsonblob="' not in text:
        problems.append(f"{path}: {blobs} data blobs; a report.html has one, on its data-container")
    if headers != 1 or lines != 1 or text.count(_rules_line(results)) > 1:
        problems.append(f"{path}: {headers} headers of counts and {lines} rules lines; a report.html has one of each")
    filters = _FILTERS.search(text)
    shown_counts = {m.group("status"): int(m.group("n")) for m in _COUNT.finditer(filters.group(0))} if filters else {}
    want = rowmod.counts(table)
    for status in sorted(set(shown_counts) | set(want)):
        if shown_counts.get(status, 0) != want.get(status, 0):
            problems.append(f"{path}: header counts {shown_counts.get(status, 0)} {status}, results.json has "
                            f"{want.get(status, 0)} such tests")
    if _rules_line(results) not in text:
        problems.append(f"{path}: its header does not give the verdict ({results.get('verdict')}) and rule counts of "
                        "results.json")
    return problems
