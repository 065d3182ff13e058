"""The run's identity and results.json: <report-dir>/<run-id>/, with `latest` pointing at it."""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.catalog.rules import LAYERS, Catalog
from pytest_dgxspark.judge.fold import Fold
from pytest_dgxspark.judge.records import TestRecord

SCHEMA = "pytest-dgxspark/results/v1"
run_key = pytest.StashKey["RunInfo"]()
results_key = pytest.StashKey[dict]()


@dataclass(frozen=True)
class RunInfo:
    id: str
    dir: Path
    started: datetime
    report_dir: Path


report_dir_key = pytest.StashKey[Path]()  # where runs write their bundles: the run plan sets it


def run_info(config: pytest.Config) -> RunInfo:
    """This run's id and directory, made once per run in the report directory the run plan resolved (the directory
    is created when results are written)."""
    if run_key not in config.stash:
        if report_dir_key not in config.stash:
            raise pytest.UsageError("pytest-dgxspark: no run plan, so no report directory (--site or --testbed)")
        report_dir = config.stash[report_dir_key]
        started = datetime.now(timezone.utc)
        run_id = f"{started:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        config.stash[run_key] = RunInfo(run_id, report_dir / run_id, started, report_dir)
    return config.stash[run_key]


def evidence_name(index: int, nodeid: str) -> str:
    """A file name for one test's evidence: its position and a readable, safe form of its node id."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1]).strip("_")[:80]
    return f"evidence/{index:03d}-{safe}.json"


def build_results(
    *,
    info: RunInfo,
    catalog: Catalog,
    fold: Fold,
    records: list[TestRecord],
    evidence: dict[str, list],
    run: dict[str, Any],
    waivers: dict,
    manual_checks: list,
    site_digest: str | None = None,
) -> dict[str, Any]:
    """The results.json document (DESIGN.md keys plus the bundle's extras)."""
    finished = datetime.now(timezone.utc)
    tests_by_rule: dict[str, list[dict]] = {rid: [] for rid in catalog.rules}
    for index, rec in enumerate(records):
        tests_by_rule.setdefault(rec.rule, []).append({
            "nodeid": rec.nodeid,
            "outcome": rec.outcome,
            "duration": round(rec.duration, 3),
            "message": rec.message,
            "blocked_by": list(rec.blocked_by),
            "target": rec.target,
            "cause": rec.fault.cause if rec.fault else None,
            "evidence": evidence_name(index, rec.nodeid) if rec.nodeid in evidence else None,
        })
    rules = []
    for rule in catalog.ordered():
        waiver = waivers.get(rule.id)
        rules.append({
            "id": rule.id, "adr": rule.adr, "section": rule.section, "statement_ko": rule.statement_ko,
            "title": rule.title, "layer": rule.layer, "kind": rule.kind, "severity": rule.severity,
            "gpu": rule.gpu, "depends_on": list(rule.depends_on), "remediation": rule.remediation,
            "remediation_ko": rule.remediation_ko, "applies_when": list(rule.applies_when),
            "status": fold.statuses[rule.id], "blocked_by": list(fold.blocked_by.get(rule.id, ())),
            "waiver": None if waiver is None else {
                "rule": waiver.rule, "reason": waiver.reason, "approver": waiver.approver, "role": waiver.role,
                "ticket": waiver.ticket, "expires": waiver.expires.isoformat(),
                "expired": waiver.expired(finished.date()), "site_digest": waiver.site_digest,
                # applied, expired, stale (another site digest) or unused (the rule did not fail)
                "state": waiver.state(fold.statuses[rule.id], finished.date(), site_digest),
            },
            "tests": tests_by_rule.get(rule.id, []),
        })
    counts: dict[str, int] = {}
    for status in fold.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    per_layer: dict[str, float] = {layer: 0.0 for layer in LAYERS}
    for rec in records:
        if rec.rule in catalog.rules:
            per_layer[catalog.rules[rec.rule].layer] += rec.duration
    return {
        "schema": SCHEMA,
        "run": {
            "id": info.id,
            "started": info.started.isoformat(timespec="seconds"),
            "finished": finished.isoformat(timespec="seconds"),
            "hostname_of_runner": socket.gethostname(),
            **run,
        },
        "verdict": fold.verdict,
        "verdict_reasons": list(fold.reasons),
        "root_causes": list(fold.root_causes),
        "root_cause_details": [d.as_dict() for d in fold.details],
        "not_judged": [d.as_dict() for d in fold.not_judged],
        "scope": fold.scope.as_dict() if fold.scope is not None else None,
        "lowest_broken_layer": fold.lowest_broken_layer,
        "layers": [
            {"name": layer, "status": fold.layers[layer],
             "rules": [r.id for r in catalog.ordered() if r.layer == layer]}
            for layer in LAYERS
        ],
        "rules": rules,
        "counts": counts,
        "provenance": {},
        "waivers": [r["waiver"] for r in rules if r["waiver"]],
        "manual_checks": [
            {"id": m.id, "title_en": m.title_en, "title_ko": m.title_ko, "attester": m.attester,
             "date": m.date, "note": m.note, "attested": m.attested}
            for m in manual_checks
        ],
        "timings": {
            "total_s": round((finished - info.started).total_seconds(), 3),
            "per_layer_s": {k: round(v, 3) for k, v in per_layer.items()},
        },
    }


DIR_MODE = 0o750
FILE_MODE = 0o640


class ResultsNotWritten(Exception):
    """results.json could not be written: the message names the file and the cause; the verdict is still printed."""


@dataclass(frozen=True)
class Written:
    """What write_results kept: results.json (always, else ResultsNotWritten), evidence files, and every problem."""

    path: Path
    kept: tuple[str, ...]
    problems: tuple[str, ...]


_one_sync: list[bool] = []  # inside `one_sync()`: the files are made durable together at its end


def write_atomic(path: Path, text: str) -> None:
    """Write text to path through a temp file in the same directory and a rename; mode 0640; no partial file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            if not _one_sync:
                os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def one_sync(directory: Path) -> Iterator[None]:
    """The write_atomic calls inside skip their own fsync; at the end one sync of the directory's filesystem
    (syncfs, else sync) makes them durable together: 400 evidence files cost one flush, not 400 (about 0.3 s at 16
    nodes). They are sealed later by MANIFEST.sha256, written after this flush."""
    _one_sync.append(True)
    try:
        yield
    finally:
        _one_sync.pop()
        _sync_filesystem(directory)


def _sync_filesystem(directory: Path) -> None:
    import ctypes

    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        os.sync()
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if getattr(libc, "syncfs", None) is None or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def make_dir(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)


def write_results(info: RunInfo, results: dict[str, Any], records: list[TestRecord], evidence: dict[str, list]) -> Written:
    """results.json first (atomic, once the verdict is known), then evidence/, then the `latest` link.

    A failure writing results.json raises ResultsNotWritten; later failures are returned, naming what was kept."""
    target = info.dir / "results.json"
    try:
        make_dir(info.dir)
        write_atomic(target, json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n")
    except OSError as exc:
        raise ResultsNotWritten(f"{target}: not written ({exc.strerror or exc}); nothing of this run was kept "
                                "on disk: the verdict printed here is the only record") from None
    kept, problems = ["results.json"], []
    wanted = [(index, rec) for index, rec in enumerate(records) if rec.nodeid in evidence]
    with one_sync(info.dir):
        for index, rec in wanted:
            name = evidence_name(index, rec.nodeid)
            doc = {"nodeid": rec.nodeid, "rule": rec.rule, "items": evidence[rec.nodeid]}
            try:
                make_dir((info.dir / name).parent)
                write_atomic(info.dir / name, json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
            except OSError as exc:
                problems.append(f"{info.dir / name}: not written ({exc.strerror or exc})")
                continue
            kept.append(name)
    if problems:
        problems = [f"evidence: {len(kept) - 1} of {len(wanted)} files written; kept results.json and those; "
                    f"first failure: {problems[0]}"]
    link_problem = point_latest(info)
    if link_problem:
        problems.append(link_problem)
    return Written(target, tuple(kept), tuple(problems))


def point_latest(info: RunInfo) -> str | None:
    """Replace <report-dir>/latest atomically (a new symlink renamed over the old one); a problem or None."""
    latest = info.report_dir / "latest"
    link = info.report_dir / f".latest-{info.id}"
    try:
        link.unlink(missing_ok=True)
        link.symlink_to(info.id, target_is_directory=True)
        os.replace(link, latest)
    except OSError as exc:
        link.unlink(missing_ok=True)
        return f"{latest}: not pointed at {info.id} ({exc.strerror or exc}); the bundle is {info.dir}"
    return None
