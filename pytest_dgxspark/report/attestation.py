"""attestation.intoto.json: an in-toto Statement v1 with the test-result predicate over the bundle's files."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pytest_dgxspark.report.ctrf import tool_version
from pytest_dgxspark.report.manifest import bundle_files, sha256_file
from pytest_dgxspark.report.results import write_atomic

ATTESTATION = "attestation.intoto.json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RESULTS = ("PASSED", "WARNED", "FAILED")
CATALOG_DIR = Path(__file__).resolve().parents[1] / "catalog"
_HEX = re.compile(r"^[0-9a-f]{64}$")
# Rule statuses per predicate list; not-applicable, not-selected and recorded rules are in none of them.
_PASSED = frozenset({"passed"})
_WARNED = frozenset({"waived"})
_FAILED = frozenset({"failed", "error", "blocked", "untested"})


def rule_lists(results: dict[str, Any]) -> dict[str, list[str]]:
    """passedTests, warnedTests and failedTests: the rule ids (the public contract) by their status."""
    lists: dict[str, list[str]] = {"passedTests": [], "warnedTests": [], "failedTests": []}
    for rule in results.get("rules") or []:
        status = rule.get("status")
        for key, statuses in (("passedTests", _PASSED), ("warnedTests", _WARNED), ("failedTests", _FAILED)):
            if status in statuses:
                lists[key].append(str(rule.get("id")))
    return lists


def result_of(results: dict[str, Any]) -> str:
    """PASSED only for an ACCEPTED, unscoped, real run with nothing waived; FAILED for any other verdict.

    INCOMPLETE is FAILED (not every rule could be judged); an ACCEPTED run that is SIMULATED, scoped
    (`scope`), waived a rule or left a rule unjudged is WARNED, so no policy reads it as a full acceptance.
    """
    if results.get("verdict") != "ACCEPTED":
        return "FAILED"
    lists = rule_lists(results)
    if (results.get("run") or {}).get("simulated") or results.get("scope") or lists["warnedTests"] or lists["failedTests"]:
        return "WARNED"
    return "PASSED"


def configuration(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What the run was configured with: the rule catalog files (by digest) and the invocation."""
    version = tool_version()
    run = results.get("run") or {}
    descriptors: list[dict[str, Any]] = [
        {"name": f"pytest_dgxspark/catalog/{path.name}", "digest": {"sha256": sha256_file(path)},
         "annotations": {"tool": f"pytest-dgxspark {version}"}}
        for path in sorted(CATALOG_DIR.glob("*.yaml"))
    ]
    invocation = {key: run.get(key) for key in ("site", "context", "testbed", "simulated", "handover",
                                                "pytest_args", "markexpr") if key in run}
    if results.get("scope") is not None:
        invocation["scope"] = results["scope"]
    descriptors.append({"name": "invocation", "uri": f"urn:dgxspark:run:{run.get('id')}", "annotations": invocation})
    return descriptors


def predicate(results: dict[str, Any]) -> dict[str, Any]:
    """The test-result predicate of results."""
    return {"result": result_of(results), "configuration": configuration(results),
            "url": f"urn:dgxspark:run:{(results.get('run') or {}).get('id')}", **rule_lists(results)}


def subjects(run_dir: Path) -> list[dict[str, Any]]:
    """Every bundle file but the manifest, its signature and the attestation itself, with its sha256."""
    return [{"name": rel, "digest": {"sha256": sha256_file(run_dir / rel)}}
            for rel in bundle_files(run_dir) if rel != ATTESTATION]


def write_attestation(run_dir: Path, keep_predicate: bool = False) -> Path:
    """(Re)write run_dir/attestation.intoto.json; keep_predicate re-attests new files under the run's own predicate.

    Written atomically: a full disk leaves the previous file or none, never a partial one.
    """
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    body = predicate(results)
    target = run_dir / ATTESTATION
    if keep_predicate and target.is_file():
        try:
            old = json.loads(target.read_text(encoding="utf-8"))
        except ValueError:
            old = None
        if isinstance(old, dict) and isinstance(old.get("predicate"), dict):
            body = old["predicate"]
    statement = {"_type": STATEMENT_TYPE, "subject": subjects(run_dir), "predicateType": PREDICATE_TYPE,
                 "predicate": body}
    write_atomic(target, json.dumps(statement, indent=2, ensure_ascii=False) + "\n")
    return target


def _shape_problems(doc: Any, path: Path) -> list[str]:
    if not isinstance(doc, dict):
        return [f"{path}: not a JSON object"]
    problems = []
    if doc.get("_type") != STATEMENT_TYPE:
        problems.append(f"{path}: _type is {doc.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if doc.get("predicateType") != PREDICATE_TYPE:
        problems.append(f"{path}: predicateType is {doc.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subject = doc.get("subject")
    if not isinstance(subject, list) or not subject:
        problems.append(f"{path}: subject must be a non-empty list")
    else:
        for index, item in enumerate(subject):
            digest = item.get("digest") if isinstance(item, dict) else None
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(digest, dict) \
                    or not _HEX.match(str(digest.get("sha256", ""))):
                problems.append(f"{path}: subject[{index}] needs a name and a sha256 digest of 64 lowercase hex digits")
    body = doc.get("predicate")
    if not isinstance(body, dict):
        return [*problems, f"{path}: predicate must be an object"]
    if body.get("result") not in RESULTS:
        problems.append(f"{path}: predicate.result is {body.get('result')!r}, expected one of {', '.join(RESULTS)}")
    config = body.get("configuration")
    if not isinstance(config, list) or not config or not all(
            isinstance(c, dict) and any(c.get(k) for k in ("uri", "digest", "content")) for c in config):
        problems.append(f"{path}: predicate.configuration must be a non-empty list of resource descriptors "
                        "(each with a uri, digest or content)")
    for key in ("passedTests", "warnedTests", "failedTests"):
        if key in body and not (isinstance(body[key], list) and all(isinstance(v, str) for v in body[key])):
            problems.append(f"{path}: predicate.{key} must be a list of strings")
    if "url" in body and not isinstance(body["url"], str):
        problems.append(f"{path}: predicate.url must be a string")
    return problems


def check_attestation(run_dir: Path) -> list[str]:
    """Why run_dir's attestation does not hold: malformed, a subject's digest differs, a file not attested,
    or a result that is not its results.json's (empty when it holds)."""
    path = run_dir / ATTESTATION
    if not path.is_file():
        return [f"{path}: no {ATTESTATION} in this bundle"]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{path}: not JSON ({exc})"]
    problems = _shape_problems(doc, path)
    if problems:
        return problems
    named = {item["name"]: item["digest"]["sha256"] for item in doc["subject"]}
    present = {rel for rel in bundle_files(run_dir) if rel != ATTESTATION}
    for name in sorted(named):
        if name not in present:
            problems.append(f"{path}: removed: {name} (attested, no longer in the bundle)")
        elif sha256_file(run_dir / name) != named[name]:
            problems.append(f"{path}: changed: {name} (its sha256 differs from the attested digest)")
    problems += [f"{path}: not attested: {name}" for name in sorted(present - set(named))]
    try:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [*problems, f"{path}: cannot read its results.json ({exc})"]
    if doc["predicate"]["result"] != result_of(results):
        problems.append(f"{path}: predicate.result is {doc['predicate']['result']}, "
                        f"results.json (verdict {results.get('verdict')}) gives {result_of(results)}")
    for key, ids in rule_lists(results).items():
        if doc["predicate"].get(key, []) != ids:
            problems.append(f"{path}: predicate.{key} differs from the rules of results.json")
    return problems
