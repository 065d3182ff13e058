"""attestation.intoto.json: a DSSE envelope (payloadType application/vnd.in-toto+json) holding an in-toto Statement
v1 with the test-result predicate; its subjects are the bundle's files and the site inputs the run tested (by digest),
its predicate holds the cluster's fingerprint; signed (DSSE PAE, ssh-keygen -Y sign) with the manifest's key."""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report.ctrf import tool_version
from pytest_dgxspark.report.manifest import bundle_files, sha256_file
from pytest_dgxspark.report.results import write_atomic

ATTESTATION = "attestation.intoto.json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
FINGERPRINT = "cluster-fingerprint"  # the configuration descriptor naming the cluster tested
SITE_PREFIX = "site:"  # subjects that are site inputs, not bundle files: site:<path in the site repository>
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://in-toto.io/attestation/test-result/v0.1"
RESULTS = ("PASSED", "WARNED", "FAILED")
CATALOG_DIR = Path(__file__).resolve().parents[1] / "catalog"
_HEX = re.compile(r"^[0-9a-f]{64}$")
# Rule statuses per predicate list; not-applicable, not-selected and recorded rules are in none of them.
_PASSED = frozenset({Status.PASSED})
_WARNED = frozenset({Status.WAIVED})
_FAILED = frozenset({Status.FAILED, Status.ERROR, Status.BLOCKED, Status.UNTESTED})


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
    cluster = fingerprint(results)
    descriptors.append({"name": FINGERPRINT, "uri": f"urn:dgxspark:cluster:{cluster['kubeSystemUid']}",
                        "annotations": cluster})
    return descriptors


def fingerprint(results: dict[str, Any]) -> dict[str, Any]:
    """What identifies the cluster tested: the kube-system namespace uid, each node's uid, each machine's serial."""
    provenance = results.get("provenance") or {}
    cluster = provenance.get("cluster") if isinstance(provenance.get("cluster"), dict) else {}
    hosts = provenance.get("hosts") if isinstance(provenance.get("hosts"), dict) else {}
    nodes = cluster.get("nodes") if isinstance(cluster.get("nodes"), dict) else {}
    return {
        "kubeSystemUid": cluster.get("cluster_uid") or cluster.get("uid"),
        "nodeUids": {name: (values or {}).get("uid") for name, values in sorted(nodes.items())},
        "machineSerials": {name: (values or {}).get("product_serial") for name, values in sorted(hosts.items())},
    }


def predicate(results: dict[str, Any]) -> dict[str, Any]:
    """The test-result predicate of results (the cluster's fingerprint is one of its configuration descriptors)."""
    return {"result": result_of(results), "configuration": configuration(results),
            "url": f"urn:dgxspark:run:{(results.get('run') or {}).get('id')}", **rule_lists(results)}


def site_subjects(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The site inputs the run read (results.json `site_inputs`), as subjects named site:<path>."""
    return [{"name": f"{SITE_PREFIX}{item.get('path')}", "digest": {"sha256": str(item.get("sha256"))}}
            for item in results.get("site_inputs") or [] if isinstance(item, dict)]


def subjects(run_dir: Path, results: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every bundle file but the manifest, its signature and the attestation itself, with its sha256; then the site
    inputs of results."""
    files = [{"name": rel, "digest": {"sha256": sha256_file(run_dir / rel)}}
             for rel in bundle_files(run_dir) if rel != ATTESTATION]
    return files + site_subjects(results or {})


def pae(payload: bytes, payload_type: str = PAYLOAD_TYPE) -> bytes:
    """DSSE's pre-authentication encoding: what a signature of the envelope signs."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def envelope(statement: dict[str, Any], signatures: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A DSSE envelope of statement (payload: its JSON bytes, base64)."""
    payload = json.dumps(statement, indent=2, ensure_ascii=False).encode("utf-8")
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode("ascii"),
            "signatures": signatures or []}


def armored(sig: str) -> str:
    """A DSSE signature's bytes (base64 of an SSHSIG blob) as the armored text ssh-keygen reads."""
    body = base64.b64encode(base64.b64decode(sig)).decode("ascii")
    lines = [body[i:i + 70] for i in range(0, len(body), 70)]
    return "-----BEGIN SSH SIGNATURE-----\n" + "\n".join(lines) + "\n-----END SSH SIGNATURE-----\n"


def dsse_signature(armored_sig: str, keyid: str) -> dict[str, str]:
    """The envelope's signature entry of an armored SSH signature: sig is the SSHSIG blob, base64."""
    body = "".join(line for line in armored_sig.strip().splitlines() if not line.startswith("-----"))
    return {"keyid": keyid, "sig": base64.b64encode(base64.b64decode(body)).decode("ascii")}


def read_envelope(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(envelope, statement) of run_dir's attestation; ValueError naming what is wrong."""
    path = run_dir / ATTESTATION
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or "payload" not in doc:
        raise ValueError(f"{path}: not a DSSE envelope (payloadType, payload, signatures)")
    if doc.get("payloadType") != PAYLOAD_TYPE:
        raise ValueError(f"{path}: payloadType is {doc.get('payloadType')!r}, expected {PAYLOAD_TYPE!r}")
    if not isinstance(doc.get("signatures"), list):
        raise ValueError(f"{path}: signatures must be a list")
    try:
        statement = json.loads(base64.b64decode(doc["payload"], validate=True))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: payload is not base64 of a JSON statement ({exc})") from exc
    return doc, statement


def write_attestation(run_dir: Path, keep_predicate: bool = False, sign: Any = None) -> Path:
    """(Re)write run_dir/attestation.intoto.json; keep_predicate re-attests new files under the run's own predicate.
    sign(pae_bytes) -> a DSSE signature entry (or None: unsigned); a SigningError it raises is the caller's.

    Written atomically: a full disk leaves the previous file or none, never a partial one.
    """
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    body = predicate(results)
    target = run_dir / ATTESTATION
    if keep_predicate and target.is_file():
        try:
            old = read_envelope(run_dir)[1]
        except (ValueError, OSError):
            old = None
        if isinstance(old, dict) and isinstance(old.get("predicate"), dict):
            body = old["predicate"]
    statement = {"_type": STATEMENT_TYPE, "subject": subjects(run_dir, results), "predicateType": PREDICATE_TYPE,
                 "predicate": body}
    doc = envelope(statement)
    if sign is not None:
        entry = sign(pae(base64.b64decode(doc["payload"])))
        if entry:
            doc["signatures"] = [entry]
    write_atomic(target, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
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
        doc = read_envelope(run_dir)[1]
    except OSError as exc:
        return [f"{path}: {exc}"]
    except ValueError as exc:
        return [str(exc) if str(exc).startswith(str(path)) else f"{path}: not JSON ({exc})"]
    problems = _shape_problems(doc, path)
    if problems:
        return problems
    named = {item["name"]: item["digest"]["sha256"] for item in doc["subject"]
             if not item["name"].startswith(SITE_PREFIX)}
    sites = [item for item in doc["subject"] if item["name"].startswith(SITE_PREFIX)]
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
    if sites != site_subjects(results):
        problems.append(f"{path}: its site subjects differ from the site inputs of results.json")
    shown = [c.get("annotations") for c in doc["predicate"]["configuration"] if c.get("name") == FINGERPRINT]
    if shown != [fingerprint(results)]:
        problems.append(f"{path}: its {FINGERPRINT} differs from the provenance of results.json")
    return problems
