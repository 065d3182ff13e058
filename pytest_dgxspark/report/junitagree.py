"""junit.xml says what results.json says, in the common JUnit schema (Jenkins' junit-10.xsd, which pytest's xunit2
is checked against).

pytest's junitxml picks the element by phase (a target fault in a check's call phase is a <failure>, a fixture's own
judgement in setup an <error>, blocked and not-applicable both <skipped>), and writes per-testcase <properties> and
file/line attributes, which that schema refuses. Once the bundle has results.json, `agree` rewrites junit.xml:
each testcase gets the one outcome element its results.json status calls for (rows.py: the recorded or waived rule's
status, else the test's outcome), with `type` = that status and the check's own message (junit's 'failed on setup
with "..."' taken off), a <system-out> line `dgxspark status: <status>; rule <id>: <rule status>`; per-testcase
properties and attributes outside the schema are dropped; each testsuite's counts follow. `disagreements` reads a
junit.xml back against results.json.
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report import rows as rowmod
from pytest_dgxspark.report.results import write_atomic

JUNIT = "junit.xml"
# results.json status -> the junit element it is written as (none for passed and recorded)
ELEMENT = {Status.FAILED: "failure", Status.ERROR: "error", Status.BLOCKED: "skipped", Status.NOT_APPLICABLE: "skipped",
           Status.SKIPPED: "skipped", Status.UNTESTED: "skipped", Status.NOT_SELECTED: "skipped",
           Status.WAIVED: "skipped", "xfailed": "skipped"}
OUTCOMES = ("failure", "error", "skipped")
TESTCASE_ATTRIBUTES = frozenset({"name", "time", "classname", "group"})
STATUS_PREFIX = "dgxspark status: "
_SETUP_WORDS = ('failed on setup with "', 'failed on teardown with "')


def address(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a test as pytest's junitxml writes it: suites/x/test_y.py::C::t[p] -> suites.x.test_y.C, t[p]."""
    names = nodeid.split("::")
    path = names[0][:-3] if names[0].endswith(".py") else names[0]
    return ".".join([path.replace("/", "."), *names[1:-1]]), names[-1]


def _cases(root: ET.Element) -> list[tuple[ET.Element, ET.Element]]:
    return [(suite, case) for suite in root.iter("testsuite") for case in suite.findall("testcase")]


def _message(element: ET.Element) -> None:
    message = element.get("message") or ""
    for words in _SETUP_WORDS:
        if message.startswith(words) and message.endswith('"'):
            element.set("message", message[len(words):-1])


def _agree_case(case: ET.Element, row: rowmod.Row | None) -> None:
    for name in [n for n in case.attrib if n not in TESTCASE_ATTRIBUTES]:
        del case.attrib[name]
    for child in [c for c in case if c.tag == "properties"]:
        case.remove(child)
    if row is None:
        return
    for child in [c for c in case if c.tag == "system-out" and (c.text or "").startswith(STATUS_PREFIX)]:
        case.remove(child)
    want = ELEMENT.get(row.status)
    outcomes = [c for c in case if c.tag in OUTCOMES]
    if want is None:
        for child in outcomes:
            case.remove(child)
    else:
        for child in outcomes[1:]:
            case.remove(child)
        element = outcomes[0] if outcomes else ET.SubElement(case, want)
        if not outcomes:
            element.set("message", row.message)
            case.remove(element)
            case.insert(0, element)
        element.tag = want
        element.set("type", row.status)
        _message(element)
    out = ET.SubElement(case, "system-out")
    out.text = f"{STATUS_PREFIX}{row.status}; rule {row.rule}: {row.rule_status}"


def _recount(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    tally = {tag: sum(1 for c in cases if c.find(tag) is not None) for tag in OUTCOMES}
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(tally["failure"]))
    suite.set("errors", str(tally["error"]))
    suite.set("skipped", str(tally["skipped"]))


def agree(run_dir: Path) -> int:
    """Rewrite run_dir/junit.xml as described above; the number of testcases whose outcome element changed. Nothing
    happens without a junit.xml; ET.ParseError when it is not XML."""
    path = run_dir / JUNIT
    if not path.is_file():
        return 0
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    by_address = {address(nodeid): row for nodeid, row in rowmod.rows(results).items()}
    tree = ET.parse(path)
    root = tree.getroot()
    changed = 0
    seen = set()
    for suite, case in _cases(root):
        if case.get("classname") is None and case.get("name") is None:  # what an interrupt left half written
            suite.remove(case)
            changed += 1
            continue
        row = by_address.get((case.get("classname") or "", case.get("name") or ""))
        seen.add((case.get("classname") or "", case.get("name") or ""))
        before = [(c.tag, c.get("type")) for c in case if c.tag in OUTCOMES]
        _agree_case(case, row)
        changed += before != [(c.tag, c.get("type")) for c in case if c.tag in OUTCOMES]
    # the tests results.json holds that pytest never reported (an interrupted run's tests not run are errors there)
    suites = list(root.iter("testsuite")) or [root if root.tag == "testsuite" else ET.SubElement(root, "testsuite",
                                                                                                 name="pytest")]
    for (classname, name), row in by_address.items():
        if (classname, name) not in seen:
            case = ET.SubElement(suites[0], "testcase", classname=classname, name=name, time="0")
            _agree_case(case, row)
            changed += 1
    for suite in root.iter("testsuite"):
        _recount(suite)
    if root.tag == "testsuites":
        suites = list(root.iter("testsuite"))
        for key in ("tests", "failures", "errors"):
            if root.get(key) is not None:
                root.set(key, str(sum(int(s.get(key) or 0) for s in suites)))
    write_atomic(path, '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode"))
    return changed


def disagreements(run_dir: Path) -> list[str]:
    """Every way run_dir/junit.xml differs from results.json: a test missing or extra, a testcase's element, type
    or status line, a testsuite's counts (empty when they agree)."""
    path = run_dir / JUNIT
    try:
        root = ET.parse(path).getroot()
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, ET.ParseError) as exc:
        return [f"{path}: cannot be read against results.json ({exc})"]
    table = rowmod.rows(results)
    by_address = {address(nodeid): nodeid for nodeid in table}
    seen: set[str] = set()
    problems = []
    for suite, case in _cases(root):
        nodeid = by_address.get((case.get("classname") or "", case.get("name") or ""))
        if nodeid is None:
            problems.append(f"{path}: testcase {case.get('classname')}::{case.get('name')} is not a test of results.json")
            continue
        seen.add(nodeid)
        row = table[nodeid]
        outcomes = [(c.tag, c.get("type")) for c in case if c.tag in OUTCOMES]
        want = [] if ELEMENT.get(row.status) is None else [(ELEMENT[row.status], row.status)]
        if outcomes != want:
            problems.append(f"{path}: {nodeid}: outcome elements {outcomes or 'none'}, results.json ({row.status}) "
                            f"calls for {want or 'none'}")
        lines = [c.text for c in case if c.tag == "system-out" and (c.text or "").startswith(STATUS_PREFIX)]
        if lines != [f"{STATUS_PREFIX}{row.status}; rule {row.rule}: {row.rule_status}"]:
            problems.append(f"{path}: {nodeid}: status line {lines}, results.json says {row.status} "
                            f"(rule {row.rule}: {row.rule_status})")
    problems += [f"{path}: {nodeid}: no testcase (results.json: {table[nodeid].status})"
                 for nodeid in table if nodeid not in seen]
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        want_counts = {"tests": len(cases), **{key: sum(1 for c in cases if c.find(tag) is not None)
                                               for key, tag in (("failures", "failure"), ("errors", "error"),
                                                                ("skipped", "skipped"))}}
        for key, n in want_counts.items():
            if suite.get(key) != str(n):
                problems.append(f"{path}: testsuite {suite.get('name')}: {key}={suite.get(key)}, its testcases give {n}")
    if root.tag == "testsuites":  # pytest writes no counts here; a CI that reads them must find its suites' sums
        for key in ("tests", "failures", "errors", "skipped"):
            total = sum(int(s.get(key) or 0) for s in root.iter("testsuite") if (s.get(key) or "0").isdigit())
            if root.get(key) is not None and root.get(key) != str(total):
                problems.append(f"{path}: testsuites: {key}={root.get(key)}, its testsuites give {total}")
    return problems
