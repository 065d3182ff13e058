"""ctrf.json: valid against the CTRF JSON schema, one entry per test, statuses mapped, checked by verify."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pytest_dgxspark.report.ctrf import CtrfError, build_ctrf, check_ctrf, write_ctrf
from pytest_dgxspark.report.example import example_results, write_example_bundle

_STATUS = {"enum": ["passed", "failed", "skipped", "pending", "other"]}
_OBJECT = {"type": "object"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_ATTACHMENT = {"type": "object", "required": ["name", "contentType", "path"], "additionalProperties": False,
               "properties": {"name": {"type": "string"}, "contentType": {"type": "string"},
                              "path": {"type": "string"}, "extra": _OBJECT}}
_PRIMITIVE = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
# The CTRF JSON schema (draft-07) as published by the CTRF project for specVersion 0.0.0, written out here
# for the parts a report uses (root, results, tool, summary, tests, environment); insights and baseline
# are not written by us and are only declared. Every object is closed (additionalProperties: false), as there.
CTRF_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["results", "reportFormat", "specVersion"],
    "additionalProperties": False,
    "properties": {
        "reportFormat": {"const": "CTRF"},
        "specVersion": {"type": "string", "pattern": r"^[0-9]+\.[0-9]+\.[0-9]+$"},
        "reportId": {"type": "string", "format": "uuid"},
        "timestamp": {"type": "string", "format": "date-time"},
        "generatedBy": {"type": "string"},
        "extra": _OBJECT, "insights": _OBJECT, "baseline": _OBJECT,
        "results": {
            "type": "object", "required": ["tool", "summary", "tests"], "additionalProperties": False,
            "properties": {
                "tool": {"type": "object", "required": ["name"], "additionalProperties": False,
                         "properties": {"name": {"type": "string", "minLength": 1}, "version": {"type": "string"},
                                        "extra": _OBJECT}},
                "summary": {
                    "type": "object", "additionalProperties": False,
                    "required": ["tests", "passed", "failed", "skipped", "pending", "other", "start", "stop"],
                    "properties": {**{k: {"type": "integer"} for k in ("tests", "passed", "failed", "skipped", "pending",
                                                                      "other", "flaky", "suites", "start", "stop",
                                                                      "duration")},
                                   "extra": _OBJECT},
                },
                "tests": {"type": "array", "items": {
                    "type": "object", "required": ["name", "status", "duration"], "additionalProperties": False,
                    "properties": {
                        "id": {"type": "string", "format": "uuid"}, "name": {"type": "string", "minLength": 1},
                        "status": _STATUS, "duration": {"type": "integer"}, "start": {"type": "integer"},
                        "stop": {"type": "integer"}, "suite": {**_STRINGS, "minItems": 1},
                        "message": {"type": "string"}, "trace": {"type": "string"}, "snippet": {"type": "string"},
                        "ai": {"type": "string"}, "line": {"type": "integer"}, "rawStatus": {"type": "string"},
                        "tags": _STRINGS, "type": {"type": "string"}, "filePath": {"type": "string"},
                        "retries": {"type": "integer"}, "flaky": {"type": "boolean"}, "stdout": _STRINGS,
                        "stderr": _STRINGS, "threadId": {"type": "string"}, "browser": {"type": "string"},
                        "device": {"type": "string"}, "screenshot": {"type": "string"},
                        "attachments": {"type": "array", "items": _ATTACHMENT}, "parameters": _OBJECT,
                        "labels": {"type": "object", "additionalProperties": {"anyOf": [
                            *_PRIMITIVE["anyOf"], {"type": "array", "minItems": 1, "items": _PRIMITIVE}]}},
                        "retryAttempts": {"type": "array"}, "steps": {"type": "array"}, "insights": _OBJECT,
                        "extra": _OBJECT,
                    },
                }},
                "environment": {"type": "object", "additionalProperties": False, "properties": {
                    **{k: {"type": "string"} for k in (
                        "reportName", "appName", "appVersion", "buildId", "buildName", "buildUrl", "repositoryName",
                        "repositoryUrl", "commit", "branchName", "osPlatform", "osRelease", "osVersion",
                        "testEnvironment")},
                    "buildNumber": {"type": "integer"}, "healthy": {"type": "boolean"}, "extra": _OBJECT}},
                "extra": _OBJECT,
            },
        },
    },
}
FAULT = {"ADR-0002.host-nvml": "failed", "ADR-0002.allocatable": "blocked", "ADR-0001.node-ready": "error",
         "ADR-0002.image-mirror": "not-applicable"}


def _validate(doc: dict) -> None:
    jsonschema.Draft7Validator(CTRF_SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)


def test_the_ctrf_document_of_a_run_is_valid_against_the_ctrf_schema() -> None:
    doc = build_ctrf(example_results(statuses=FAULT, nodes=3))
    _validate(doc)
    assert (doc["reportFormat"], doc["specVersion"]) == ("CTRF", "0.0.0")
    assert doc["results"]["tool"]["name"] == "pytest-dgxspark"
    assert doc["timestamp"] == "2026-01-05T01:04:09+00:00"


def test_the_schema_here_rejects_what_ctrf_rejects() -> None:
    doc = build_ctrf(example_results())
    for broken in ({**doc, "reportFormat": "JUnit"}, {**doc, "unknown": 1},
                   {**doc, "results": {**doc["results"], "tests": [{"name": "x", "status": "blocked", "duration": 0}]}},
                   {**doc, "results": {**doc["results"], "summary": {"tests": 1}}}):
        with pytest.raises(jsonschema.ValidationError):
            _validate(broken)


def test_every_test_is_an_entry_with_its_rule_and_our_outcome_kept_as_raw_status() -> None:
    results = example_results(statuses=FAULT)
    doc = build_ctrf(results)
    tests = {t["name"]: t for t in doc["results"]["tests"]}
    assert len(tests) == sum(len(r["tests"]) for r in results["rules"]) == 30
    nvml = tests["suites/host/test_host.py::test_host_nvml"]
    assert nvml["status"] == "failed" and nvml["rawStatus"] == "failed"
    assert nvml["message"] == "ADR-0002.host-nvml did not hold"
    assert nvml["suite"] == ["host", "ADR-0002.host-nvml"] and nvml["labels"]["rule"] == "ADR-0002.host-nvml"
    assert nvml["attachments"] == [{"name": "evidence", "contentType": "application/json",
                                    "path": "evidence/host-host_nvml.json"}]
    assert nvml["duration"] == 30 and nvml["filePath"] == "suites/host/test_host.py"
    statuses = {t["rawStatus"]: t["status"] for t in tests.values()}
    assert statuses == {"passed": "passed", "failed": "failed", "error": "failed", "blocked": "skipped",
                        "not-applicable": "skipped"}
    summary = doc["results"]["summary"]
    assert (summary["tests"], summary["passed"], summary["failed"], summary["skipped"], summary["other"]) == (30, 26, 2, 2, 0)
    assert summary["duration"] == summary["stop"] - summary["start"] == 126_000
    assert summary["extra"]["verdict"] == "REJECTED" and summary["extra"]["simulated"] is True


def test_a_rule_no_test_ran_for_still_appears_and_unknown_outcomes_are_other() -> None:
    results = example_results()
    results["rules"][0]["tests"] = []
    results["rules"][0]["status"] = "untested"
    results["rules"][1]["tests"][0]["outcome"] = "recorded"
    tests = build_ctrf(results)["results"]["tests"]
    assert tests[0]["name"] == "ADR-0001.site-layout (no test ran)" and tests[0]["status"] == "skipped"
    assert (tests[1]["status"], tests[1]["rawStatus"]) == ("other", "recorded")
    _validate(build_ctrf(results))


def test_the_environment_names_the_site_or_the_testbed() -> None:
    assert build_ctrf(example_results(simulated=False))["results"]["environment"]["testEnvironment"] == "site:tirosh-home"
    assert build_ctrf(example_results())["results"]["environment"]["testEnvironment"] == "testbed:healthy"
    results = example_results()
    results["run"]["testbed"] = None  # SIMULATED because the target said so, not through --testbed
    assert build_ctrf(results)["results"]["environment"]["testEnvironment"] == "testbed (SIMULATED)"


def test_the_document_is_deterministic_and_refuses_incomplete_results() -> None:
    results = example_results(statuses=FAULT)
    assert build_ctrf(results) == build_ctrf(results)
    with pytest.raises(CtrfError, match="results.json lacks verdict, rules; ctrf.json needs run, verdict and rules"):
        build_ctrf({"run": {}})


def test_check_finds_a_ctrf_that_no_longer_matches_its_results(tmp_path: Path) -> None:
    run_dir = write_example_bundle(tmp_path, example_results(statuses=FAULT))
    assert check_ctrf(run_dir) == [f"{run_dir / 'ctrf.json'}: no ctrf.json in this bundle"]
    write_ctrf(run_dir)
    assert check_ctrf(run_dir) == []
    doc = json.loads((run_dir / "ctrf.json").read_text(encoding="utf-8"))
    doc["results"]["tests"][6]["status"] = "passed"  # host-nvml's failure hidden
    (run_dir / "ctrf.json").write_text(json.dumps(doc), encoding="utf-8")
    assert check_ctrf(run_dir) == [
        f"{run_dir / 'ctrf.json'}: summary.passed is 26, the tests count 27",
        f"{run_dir / 'ctrf.json'}: summary.failed is 2, the tests count 1",
        f"{run_dir / 'ctrf.json'}: its test statuses differ from results.json",
    ]
