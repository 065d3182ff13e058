"""One Status type: its values are results.json's contract words, they serialise as those words, and report and judge
write and compare them as Status members, never as bare words."""
from __future__ import annotations

import ast
import json
from pathlib import Path

from pytest_dgxspark.judge.status import Status, rule_status


def test_the_rule_statuses_of_the_contract_are_the_status_values():
    contract = {"passed", "failed", "blocked", "error", "not-applicable", "waived", "untested", "recorded"}
    assert contract <= {s.value for s in Status}


def test_a_status_is_its_word_in_json_in_text_and_in_comparisons():
    assert json.dumps({"status": Status.NOT_APPLICABLE}) == '{"status": "not-applicable"}'
    assert f"{Status.BLOCKED}" == str(Status.BLOCKED) == "blocked"
    assert Status.PASSED == "passed" and Status("failed") is Status.FAILED


def test_a_rule_takes_its_worst_test_outcome():
    assert rule_status(["passed", "error", "failed"]) is Status.FAILED
    assert rule_status(["passed", "skipped"]) is Status.UNTESTED
    assert rule_status(["not-applicable"]) is Status.NOT_APPLICABLE
    assert rule_status([]) is Status.UNTESTED


# The guard: report and judge write and compare statuses as Status members, never as bare words.
PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dgxspark"
GUARDED = ("report", "judge")
WORDS = frozenset(s.value for s in Status)
# (file, the module-level name or function, the use) -> why these words are not our statuses: another format's
# vocabulary, or a field named after a status. The use is how the guard met the word: compared, key, element or case.
NOT_STATUSES: dict[tuple[str, str, str], str] = {
    ("report/ctrf.py", "STATUSES", "element"): "CTRF's own statuses (passed, failed, skipped, pending, other)",
    ("report/junitagree.py", "OUTCOMES", "element"): "JUnit's outcome element names (failure, error, skipped)",
    ("report/junitagree.py", "disagreements", "element"): "a testsuite's JUnit count attributes and their elements",
    ("report/messages.py", "MESSAGES", "element"): "the English display words of the statuses, beside the Korean",
    ("report/matrix.py", "_groups", "key"): "a check group's count of passed tests (the summary's group.passed)",
    ("report/matrix.py", "rows", "key"): "a matrix row's count of passed tests (the summary's rule.passed)",
    ("report/summary.py", "_layer_rows", "key"): "a layer row's count of passed rules (the summary's layer.passed)",
}


def _where(statement: ast.stmt) -> str:
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return statement.name
    targets = statement.targets if isinstance(statement, ast.Assign) else \
        [statement.target] if isinstance(statement, ast.AnnAssign) else []
    return next((t.id for t in targets if isinstance(t, ast.Name)), f"line {statement.lineno}")


def _words(node: ast.AST | None) -> list[ast.Constant]:
    """The status words `node` is, or holds as the elements of a literal tuple, set, list or frozenset(...)/set(...)."""
    if isinstance(node, ast.Constant):
        return [node] if isinstance(node.value, str) and node.value in WORDS else []
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        return [c for element in node.elts for c in _words(element) if isinstance(element, ast.Constant)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1 \
            and node.func.id in ("frozenset", "set", "tuple"):
        return _words(node.args[0])
    return []


def bare_statuses(source: str, name: str) -> list[tuple[str, str, int, str]]:
    """(where, use, line, word) of each bare status word compared (==, !=, in, not in), used as a dict key or as an
    element of a set or tuple, or matched as a case, in the module `source`."""
    found: dict[int, tuple[str, str, int, str]] = {}
    for statement in ast.parse(source, name).body:
        where = _where(statement)
        for node in ast.walk(statement):
            use, hits = "", []
            if isinstance(node, ast.Compare):
                use, hits = "compared", [c for operand in (node.left, *node.comparators) for c in _words(operand)]
            elif isinstance(node, ast.Dict):
                use, hits = "key", [c for key in node.keys if isinstance(key, ast.Constant) for c in _words(key)]
            elif isinstance(node, (ast.Set, ast.Tuple)):
                use, hits = "element", _words(node)
            elif isinstance(node, ast.MatchValue):
                use, hits = "case", _words(node.value)
            for word in hits:  # a word compared within a tuple is met at its comparison first
                found.setdefault(id(word), (where, use, word.lineno, word.value))
    return sorted(found.values(), key=lambda hit: hit[2])


def _guarded() -> dict[str, list[tuple[str, str, int, str]]]:
    return {f"{layer}/{path.name}": bare_statuses(path.read_text(encoding="utf-8"), str(path))
            for layer in GUARDED for path in sorted((PACKAGE / layer).glob("*.py"))}


def test_report_and_judge_compare_and_key_statuses_by_status_never_by_bare_word():
    wrong = [f"pytest_dgxspark/{name}:{line}: {word!r} {use} in {where}: write Status.{Status(word).name}"
             for name, hits in _guarded().items() for where, use, line, word in hits
             if (name, where, use) not in NOT_STATUSES]
    assert wrong == []


def test_the_allow_list_holds_only_places_that_still_use_those_words():
    seen = {(name, where, use) for name, hits in _guarded().items() for where, use, _, _ in hits}
    assert sorted(set(NOT_STATUSES) - seen) == [], "remove these from NOT_STATUSES: no such word there any more"


def test_the_guard_itself_sees_bare_status_words():
    source = ('A = frozenset({"passed", Status.FAILED})\nB = {"error": 1, "x": "blocked"}\n'
              'def f(r):\n    if r["status"] != "waived" and r.get("s") in ("untested", "other"):\n'
              '        return "recorded", "R"\n    return r.get("status") or "not-selected"\n')
    assert bare_statuses(source, "sample.py") == [("A", "element", 1, "passed"), ("B", "key", 2, "error"),
                                                  ("f", "compared", 4, "waived"), ("f", "compared", 4, "untested"),
                                                  ("f", "element", 5, "recorded")]
