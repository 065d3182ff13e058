"""junit.xml's outcome elements say what results.json says: <error> for an error, <failure> for a failed check.

pytest's junitxml picks the element by phase: a fault of a target met in a check's call phase becomes <failure>
(results.json: error), a fixture's own judgement in setup becomes <error> (results.json: failed). Every testcase
carries its results.json status as the `dgxspark_status` property (plugin.py); once junit.xml is written, the one
outcome element of a testcase whose status disagrees is renamed, and each testsuite's failures/errors counts follow;
every outcome element's message is the check's own (junit's 'failed on setup with "..."' wording is taken off).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_dgxspark.report.results import write_atomic

# results.json status -> the junit element it is written as (blocked and not-applicable are <skipped> already)
ELEMENT = {"error": "error", "failed": "failure"}
_COUNT = {"error": "errors", "failure": "failures"}
_SETUP_WORDS = ('failed on setup with "', 'failed on teardown with "')


def agree(path: Path) -> int:
    """Rename the outcome elements of junit.xml at `path` that disagree with their dgxspark_status, and give each its
    check's own message (without junit's 'failed on setup with "..."'); returns how many testcases changed. The file
    is rewritten atomically, and only when something changed."""
    if not path.is_file():
        return 0
    tree = ET.parse(path)
    renamed = 0
    for suite in tree.getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            renamed += _agree_case(suite, case)
    if renamed:
        text = ET.tostring(tree.getroot(), encoding="unicode")
        write_atomic(path, f'<?xml version="1.0" encoding="utf-8"?>{text}')
    return renamed


def _agree_case(suite: ET.Element, case: ET.Element) -> int:
    status = next((p.get("value") for p in case.iter("property") if p.get("name") == "dgxspark_status"), None)
    want = ELEMENT.get(status or "")
    outcomes = [child for child in case if child.tag in _COUNT]
    if want is None or len(outcomes) != 1:
        return 0
    element, changed = outcomes[0], 0
    if element.tag != want:
        _bump(suite, _COUNT[element.tag], -1)
        _bump(suite, _COUNT[want], +1)
        element.tag, changed = want, 1
    message = element.get("message") or ""
    for words in _SETUP_WORDS:  # junit's phase wording around the check's message ("failed" for an error too)
        if message.startswith(words) and message.endswith('"'):
            element.set("message", message[len(words):-1])
            changed = 1
    return changed


def _bump(suite: ET.Element, attribute: str, by: int) -> None:
    if suite.get(attribute) is not None:
        suite.set(attribute, str(max(0, int(suite.get(attribute) or 0) + by)))
