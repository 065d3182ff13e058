"""ctrf.json: the run's tests in the Common Test Report Format (CTRF spec 0.0.0), derived from results.json."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report.matrix import evidence_href
from pytest_dgxspark.report.results import write_atomic

CTRF = "ctrf.json"
SPEC_VERSION = "0.0.0"
STATUSES = ("passed", "failed", "skipped", "pending", "other")
# Our test outcomes as CTRF statuses; the outcome itself is kept as rawStatus.
_STATUS = {Status.PASSED: "passed", Status.FAILED: "failed", Status.ERROR: "failed", Status.BLOCKED: "skipped",
           Status.NOT_APPLICABLE: "skipped", Status.NOT_SELECTED: "skipped", Status.SKIPPED: "skipped",
           Status.UNTESTED: "skipped", "xfailed": "skipped"}
_NAMESPACE = uuid.UUID("6f1c3a52-8d1e-4c4e-9a57-0d6b2f1e5a10")  # reportId = uuid5(this, run id): stable


class CtrfError(Exception):
    """results.json lacks what ctrf.json needs."""


def tool_version() -> str:
    try:
        return metadata.version("pytest-dgxspark")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _millis(value: Any) -> int:
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return 0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _test(rule: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    outcome = str(test.get("outcome") or Status.UNTESTED)
    nodeid = str(test.get("nodeid") or rule.get("id"))
    entry: dict[str, Any] = {
        "name": nodeid,
        "status": _STATUS.get(outcome, "other"),
        "duration": max(0, round(float(test.get("duration") or 0) * 1000)),
        "suite": [str(rule.get("layer") or "—"), str(rule.get("id"))],
        "rawStatus": outcome,
        "tags": [str(rule.get("id")), str(rule.get("layer"))],
        "labels": {"rule": str(rule.get("id")), "layer": str(rule.get("layer")), "adr": str(rule.get("adr")),
                   "section": str(rule.get("section")), "severity": str(rule.get("severity")),
                   "kind": str(rule.get("kind")), "ruleStatus": str(rule.get("status"))},
        "filePath": nodeid.split("::", 1)[0],
    }
    if test.get("message"):
        entry["message"] = str(test["message"])
    href = evidence_href(test.get("evidence"))
    if href:
        entry["attachments"] = [{"name": "evidence", "contentType": "application/json", "path": href}]
    extra = {k: test[k] for k in ("blocked_by",) if test.get(k)}
    if rule.get("waiver"):
        extra["waiver"] = rule["waiver"]
    if extra:
        entry["extra"] = extra
    return entry


def tests_of(results: dict[str, Any]) -> list[dict[str, Any]]:
    """A CTRF test per test of every rule; a rule no test ran for gets one entry of its own (status skipped)."""
    tests = []
    for rule in results.get("rules") or []:
        ran = [t for t in rule.get("tests") or [] if isinstance(t, dict)]
        if not ran:
            ran = [{"nodeid": f"{rule.get('id')} (no test ran)", "outcome": str(rule.get("status") or Status.UNTESTED),
                    "duration": 0, "message": ""}]
        tests.extend(_test(rule, test) for test in ran)
    return tests


def build_ctrf(results: dict[str, Any]) -> dict[str, Any]:
    """The CTRF document of results (deterministic: the same results give the same document)."""
    missing = [key for key in ("run", "verdict", "rules") if key not in results]
    if missing:
        raise CtrfError(f"results.json lacks {', '.join(missing)}; ctrf.json needs run, verdict and rules")
    run = results["run"] or {}
    tests = tests_of(results)
    start, stop = _millis(run.get("started")), _millis(run.get("finished"))
    summary = {status: sum(1 for t in tests if t["status"] == status) for status in STATUSES}
    version = tool_version()
    if run.get("simulated"):
        target = f"testbed:{run['testbed']}" if run.get("testbed") else "testbed (SIMULATED)"
    else:
        target = f"site:{run.get('site')}"
    stamp = {"timestamp": str(run.get("finished") or run.get("started"))} if start else {}
    return {
        "reportFormat": "CTRF",
        "specVersion": SPEC_VERSION,
        "reportId": str(uuid.uuid5(_NAMESPACE, str(run.get("id")))),
        **stamp,
        "generatedBy": f"pytest-dgxspark {version}",
        "results": {
            "tool": {"name": "pytest-dgxspark", "version": version},
            "summary": {"tests": len(tests), **summary, "start": start, "stop": stop,
                        "duration": max(0, stop - start),
                        "extra": {"verdict": str(results["verdict"]), "simulated": bool(run.get("simulated")),
                                  "root_causes": list(results.get("root_causes") or []),
                                  "lowest_broken_layer": results.get("lowest_broken_layer"),
                                  "scope": results.get("scope"), "rules": dict(results.get("counts") or {})}},
            "tests": tests,
            "environment": {"reportName": f"DGX Spark handover {run.get('site')} {run.get('id')}",
                            "appName": str(run.get("site") or ""), "testEnvironment": target,
                            "extra": {"run_id": run.get("id"), "context": run.get("context"),
                                      "simulated": bool(run.get("simulated"))}},
        },
    }


def write_ctrf(run_dir: Path) -> Path:
    """(Re)write run_dir/ctrf.json from run_dir/results.json, atomically (a full disk leaves no partial file)."""
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    target = run_dir / CTRF
    write_atomic(target, json.dumps(build_ctrf(results), indent=2, ensure_ascii=False) + "\n")
    return target


def check_ctrf(run_dir: Path) -> list[str]:
    """Why run_dir/ctrf.json is not the CTRF of its results.json (empty when it is)."""
    path = run_dir / CTRF
    if not path.is_file():
        return [f"{path}: no {CTRF} in this bundle"]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{path}: cannot be read as JSON with its results.json ({exc})"]
    if not isinstance(doc, dict) or doc.get("reportFormat") != "CTRF" or not isinstance(doc.get("results"), dict):
        return [f"{path}: not a CTRF document (reportFormat 'CTRF' and results expected)"]
    problems = []
    tests = doc["results"].get("tests")
    summary = doc["results"].get("summary") or {}
    if not isinstance(tests, list) or any(not isinstance(t, dict) or t.get("status") not in STATUSES for t in tests):
        return [f"{path}: results.tests must be a list of tests with a status in {', '.join(STATUSES)}"]
    for status in STATUSES:
        if summary.get(status) != sum(1 for t in tests if t.get("status") == status):
            problems.append(f"{path}: summary.{status} is {summary.get(status)!r}, the tests count "
                            f"{sum(1 for t in tests if t.get('status') == status)}")
    try:
        expected = build_ctrf(results)
    except CtrfError as exc:
        return [*problems, f"{path}: {exc}"]
    if [t["name"] for t in tests] != [t["name"] for t in expected["results"]["tests"]]:
        problems.append(f"{path}: its tests are not the tests of results.json")
    elif [t["status"] for t in tests] != [t["status"] for t in expected["results"]["tests"]]:
        problems.append(f"{path}: its test statuses differ from results.json")
    made_by = str((doc["results"].get("tool") or {}).get("version"))
    if made_by == tool_version():  # the same writer: the whole document is the one results.json gives
        differing = _differences(doc, expected)
    else:  # another version's writer may word its document otherwise; the facts are the same in any version
        facts = (("results", "summary", "extra", "verdict"), ("results", "summary", "extra", "simulated"),
                 ("results", "summary", "extra", "root_causes"), ("results", "summary", "extra", "lowest_broken_layer"),
                 ("results", "environment", "testEnvironment"), ("results", "environment", "extra", "simulated"))
        differing = [".".join(keys) for keys in facts if _at(doc, keys) != _at(expected, keys)]
        differing += [f"results.tests[{i}].rawStatus" for i, (got, want) in
                      enumerate(zip(tests, expected["results"]["tests"])) if got.get("rawStatus") != want.get("rawStatus")]
    if differing and not problems:  # what is wrong is said above already
        problems.append(f"{path}: not the CTRF of its results.json (made by pytest-dgxspark {made_by}) at "
                        f"{', '.join(differing[:8])}{' ...' if len(differing) > 8 else ''}")
    return problems


def _at(doc: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _differences(got: Any, want: Any, where: str = "") -> list[str]:
    """The paths at which two JSON documents differ (a key missing on either side, a value, a list's length)."""
    if isinstance(got, dict) and isinstance(want, dict):
        return [d for key in sorted(set(got) | set(want), key=str)
                for d in _differences(got.get(key), want.get(key), f"{where}.{key}" if where else str(key))]
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if got == want and type(got) is type(want) else [where or "(the document)"]
