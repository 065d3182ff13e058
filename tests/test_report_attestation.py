"""attestation.intoto.json: an in-toto Statement v1 (test-result v0.1) over every bundle file, checked by verify."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dgxspark.report import bundle as bundle_module
from pytest_dgxspark.report import cli
from pytest_dgxspark.report.attestation import (
    CATALOG_DIR,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    check_attestation,
    envelope,
    read_envelope,
    result_of,
    rule_lists,
    write_attestation,
)
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.example import example_results, write_example_bundle, write_pytest_files
from pytest_dgxspark.report.manifest import bundle_files, sha256_file, write_manifest

FAULT = {"ADR-0002.host-nvml": "failed", "ADR-0002.allocatable": "blocked", "ADR-0002.image-mirror": "waived"}


@pytest.fixture
def finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)
    run_dir = write_example_bundle(tmp_path / "20260105T010203Z-0a1b", example_results(statuses=FAULT))
    write_pytest_files(run_dir, example_results(statuses=FAULT))
    assert finish_bundle(run_dir, "both").problems == ()
    return run_dir


def _statement(run_dir: Path) -> dict:
    return read_envelope(run_dir)[1]


def test_the_statement_names_every_bundle_file_with_its_sha256_and_the_test_result_predicate(finished: Path) -> None:
    statement = _statement(finished)
    assert statement["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE == "https://in-toto.io/attestation/test-result/v0.1"
    names = [s["name"] for s in statement["subject"]]
    assert names == [f for f in bundle_files(finished) if f != "attestation.intoto.json"]
    assert {"results.json", "summary.html", "ctrf.json", "junit.xml"} <= set(names)
    for subject in statement["subject"]:
        assert subject["digest"] == {"sha256": sha256_file(finished / subject["name"])}
    predicate = statement["predicate"]
    assert predicate["result"] == "FAILED"
    assert predicate["failedTests"] == ["ADR-0002.host-nvml", "ADR-0002.allocatable"]
    assert predicate["warnedTests"] == ["ADR-0002.image-mirror"]
    assert len(predicate["passedTests"]) == 27 and "ADR-0001.node-ready" in predicate["passedTests"]
    assert predicate["url"] == "urn:dgxspark:run:20260105T010203Z-0a1b"
    catalog = [c for c in predicate["configuration"] if c["name"].startswith("pytest_dgxspark/catalog/")]
    assert [c["name"] for c in catalog] == [f"pytest_dgxspark/catalog/{p.name}" for p in sorted(CATALOG_DIR.glob("*.yaml"))]
    assert {"pytest_dgxspark/catalog/adr-0001.yaml", "pytest_dgxspark/catalog/adr-0002.yaml"} <= {c["name"] for c in catalog}
    assert all(len(c["digest"]["sha256"]) == 64 for c in catalog)
    invocation = predicate["configuration"][-2]
    assert invocation["name"] == "invocation" and invocation["annotations"]["site"] == "tirosh-home"
    assert invocation["annotations"]["simulated"] is True


def test_the_in_toto_projects_own_bindings_parse_the_statement_and_its_predicate(finished: Path) -> None:
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0 import test_result_pb2
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement

    doc = _statement(finished)
    proto = json_format.ParseDict(doc, statement_pb2.Statement(), ignore_unknown_fields=False)
    Statement.copy_from_pb(proto).validate()  # type, subjects with digests, predicate type and object
    result = json_format.ParseDict(doc["predicate"], test_result_pb2.TestResult(), ignore_unknown_fields=False)
    assert result.result == "FAILED" and list(result.failed_tests) == ["ADR-0002.host-nvml", "ADR-0002.allocatable"]
    # the catalog's files, the invocation, the cluster's fingerprint
    assert len(result.configuration) == len(list(CATALOG_DIR.glob("*.yaml"))) + 2


@pytest.mark.parametrize(("verdict", "simulated", "changes", "expected"), [
    ("ACCEPTED", False, {}, "PASSED"),
    ("ACCEPTED", True, {}, "WARNED"),  # a testbed run is never a handover acceptance
    ("ACCEPTED", False, {"scope": {"label": "GPU chain"}}, "WARNED"),
    ("ACCEPTED", False, {"waived": "ADR-0002.image-mirror"}, "WARNED"),
    ("REJECTED", False, {}, "FAILED"),
    ("INCOMPLETE", False, {}, "FAILED"),  # not every rule could be judged
    ("SOMETHING-NEW", False, {}, "FAILED"),
])
def test_the_result_follows_the_verdict_and_never_claims_more(verdict: str, simulated: bool, changes: dict,
                                                             expected: str) -> None:
    results = example_results(simulated=simulated,
                              statuses={changes["waived"]: "waived"} if "waived" in changes else None)
    results["verdict"] = verdict
    if "scope" in changes:
        results["scope"] = changes["scope"]
    assert result_of(results) == expected


def test_recorded_not_applicable_and_not_selected_rules_are_in_no_list() -> None:
    results = example_results(statuses={"ADR-0001.hardening-baseline": "recorded", "ADR-0002.image-mirror":
                                        "not-applicable", "ADR-0001.argocd-registered": "not-selected"})
    lists = rule_lists(results)
    listed = {*lists["passedTests"], *lists["warnedTests"], *lists["failedTests"]}
    assert len(listed) == 27 and not {"ADR-0001.hardening-baseline", "ADR-0002.image-mirror",
                                      "ADR-0001.argocd-registered"} & listed


def test_verify_fails_on_a_changed_file_even_when_the_manifest_was_rewritten(
    finished: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (finished / "junit.xml").write_text("<testsuites tests='0'/>", encoding="utf-8")
    write_manifest(finished)
    assert cli.main(["verify", str(finished)]) == 1
    err = capsys.readouterr().err
    assert f"  {finished / 'attestation.intoto.json'}: changed: junit.xml (its sha256 differs from the attested digest)" in err


def test_check_names_unattested_and_removed_files_and_a_result_that_is_not_the_verdicts(finished: Path) -> None:
    path = finished / "attestation.intoto.json"
    (finished / "notes.txt").write_text("x", encoding="utf-8")
    (finished / "junit.xml").unlink()
    statement = _statement(finished)
    statement["predicate"]["result"] = "PASSED"
    path.write_text(json.dumps(envelope(statement)), encoding="utf-8")
    assert check_attestation(finished) == [
        f"{path}: removed: junit.xml (attested, no longer in the bundle)",
        f"{path}: not attested: notes.txt",
        f"{path}: predicate.result is PASSED, results.json (verdict REJECTED) gives FAILED",
    ]


def test_check_refuses_a_malformed_statement_naming_each_problem(finished: Path) -> None:
    path = finished / "attestation.intoto.json"
    path.write_text(json.dumps(envelope({"_type": "https://in-toto.io/Statement/v0.1", "subject": [{"name": "x", "digest": {"sha256": "ABC"}}],
                                "predicateType": PREDICATE_TYPE,
                                "predicate": {"result": "pass", "configuration": [], "failedTests": "all"}})),
                    encoding="utf-8")
    assert check_attestation(finished) == [
        f"{path}: _type is 'https://in-toto.io/Statement/v0.1', expected 'https://in-toto.io/Statement/v1'",
        f"{path}: subject[0] needs a name and a sha256 digest of 64 lowercase hex digits",
        f"{path}: predicate.result is 'pass', expected one of PASSED, WARNED, FAILED",
        f"{path}: predicate.configuration must be a non-empty list of resource descriptors (each with a uri, digest or content)",
        f"{path}: predicate.failedTests must be a list of strings",
    ]
    path.unlink()
    assert check_attestation(finished) == [f"{path}: no attestation.intoto.json in this bundle"]


def test_re_attesting_keeps_the_runs_predicate_and_covers_new_files(finished: Path) -> None:
    before = _statement(finished)
    (finished / "summary.pdf").write_bytes(b"%PDF-1.4 test")
    write_attestation(finished, keep_predicate=True)
    after = _statement(finished)
    assert after["predicate"] == before["predicate"]
    assert "summary.pdf" in [s["name"] for s in after["subject"]]


def test_the_attestation_is_a_dsse_envelope_the_in_toto_package_loads(finished: Path) -> None:
    from in_toto.models.metadata import Envelope, Metadata

    loaded = Metadata.load(str(finished / "attestation.intoto.json"))
    assert isinstance(loaded, Envelope) and loaded.payload_type == "application/vnd.in-toto+json"
    assert json.loads(loaded.payload) == _statement(finished)
    assert loaded.signatures == {}  # an unsigned bundle: the envelope carries no signature


def test_the_subjects_hold_the_site_inputs_and_the_predicate_the_clusters_fingerprint(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_module, "chromium", lambda: None)
    results = example_results()
    results["site_inputs"] = [{"path": "tirosh-home/inventory.yml", "sha256": "a" * 64}]
    results["provenance"]["cluster"]["nodes"] = {"gpu-01": {"uid": "node-uid-1"}}
    results["provenance"]["hosts"] = {"gpu-01": {"product_serial": "1234-SERIAL"}}
    run_dir = write_example_bundle(tmp_path / "run", results)
    write_pytest_files(run_dir, results)
    assert finish_bundle(run_dir, "en").problems == ()
    statement = _statement(run_dir)
    assert statement["subject"][-1] == {"name": "site:tirosh-home/inventory.yml", "digest": {"sha256": "a" * 64}}
    cluster = statement["predicate"]["configuration"][-1]
    assert cluster == {"name": "cluster-fingerprint", "uri": "urn:dgxspark:cluster:5a1c2d3e-0000-4000-8000-00000000c1d5",
                       "annotations": {"kubeSystemUid": "5a1c2d3e-0000-4000-8000-00000000c1d5",
                                       "nodeUids": {"gpu-01": "node-uid-1"},
                                       "machineSerials": {"gpu-01": "1234-SERIAL"}}}
    assert check_attestation(run_dir) == []
    results["site_inputs"][0]["sha256"] = "b" * 64  # results.json now names another inventory than was attested
    (run_dir / "results.json").write_text(json.dumps(results), encoding="utf-8")
    assert f"{run_dir / 'attestation.intoto.json'}: its site subjects differ from the site inputs of results.json" \
        in check_attestation(run_dir)
