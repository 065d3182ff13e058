"""Hooks that keep secrets out of the bundle: reports, captured logs and metadata redacted; the written bundle scanned."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.data import redact as redaction
from pytest_dgxspark.data.redact import REDACTED, SECRET_KEY, redact_args, redact_text, remember_secrets
from pytest_dgxspark.report.closing import (
    EXIT_INCOMPLETE,  # the exit status of an INCOMPLETE run (README "Exit status")
)
from pytest_dgxspark.report.results import DIR_MODE, FILE_MODE, write_atomic
from pytest_dgxspark.report.secretscan import Leak, scan_bundle, scrub_document

session_key = pytest.StashKey[pytest.Session]()
leaks_key = pytest.StashKey[list]()
umask_key = pytest.StashKey[int]()
BUNDLE_UMASK = 0o027  # files 0640, directories 0750, also those pytest-html, junitxml and the summary write


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    redaction.reset()  # a run starts with an empty redaction log (pytester runs many in one process)


@pytest.hookimpl(optionalhook=True, trylast=True)
def pytest_metadata(metadata: dict[str, Any], config: pytest.Config) -> None:
    """pytest-metadata's environment table (CI variables, --metadata) goes to report.html: redact it in place."""
    _redact_mapping(metadata, "pytest-metadata")


def _redact_mapping(mapping: dict[str, Any] | list[Any], where: str) -> None:
    for key in (list(mapping) if isinstance(mapping, dict) else range(len(mapping))):
        value = mapping[key]  # type: ignore[index]
        secret = isinstance(key, str) and bool(SECRET_KEY.search(key))
        if isinstance(value, (dict, list)):  # a list's strings too: {"deploy": ["password=x", "token: y"]}
            if secret and isinstance(value, list):  # api_keys: ["a", "b"]: each one a secret
                for index, item in enumerate(value):
                    if isinstance(item, str) and item and item != REDACTED:
                        redaction.LOG.note("secret-key-value", f"{where}.{key}", item, remember=True)
                        value[index] = REDACTED
            _redact_mapping(value, f"{where}.{key}")
        elif isinstance(value, str) and secret and value and value != REDACTED:
            redaction.LOG.note("secret-key-value", f"{where}.{key}", value, remember=True)
            mapping[key] = REDACTED  # type: ignore[index]
        elif isinstance(value, str):
            mapping[key] = redact_text(value, f"{where}.{key}", remember=True)  # type: ignore[index]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_dgxspark.plan import plan_key

    plan = config.stash.get(plan_key, None)
    if plan is None:
        return
    config.stash[umask_key] = os.umask(BUNDLE_UMASK)
    remember_plan_secrets(plan)
    config.add_cleanup(lambda: _final_scan(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(umask_key, None)
    if previous is not None:
        os.umask(previous)


def remember_plan_secrets(plan: Any) -> None:
    """Secret values the run read from its input files: the byte scan looks for each of them in the bundle."""
    site = plan.site
    remember_secrets(dict(site.vars), f"{site.root}/rke2/vars.yml")
    remember_secrets(dict(site.helmchart), f"{site.root}/rke2/gpu-operator.helmchart.yaml")
    remember_secrets(dict(site.inventory or {}), f"{site.root}/inventory.yml")
    for host in plan.hosts:
        remember_secrets(dict(host.vars), f"inventory host {host.name}")

    if plan.kubeconfig is not None:
        try:
            from pytest_dgxspark.data.yamlload import load_yaml

            remember_secrets(load_yaml(plan.kubeconfig), str(plan.kubeconfig))
        except ValueError:
            pass  # the plan validated it; a file changed since is read by the client, which reports it


def remember_file_secrets(path: Path, source: str) -> None:
    """A testbed's own kubeconfig and inventory (written after the plan): their secrets are scanned for too."""
    try:
        from pytest_dgxspark.data.yamlload import load_yaml

        remember_secrets(load_yaml(path), source)
    except ValueError:
        pass


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    redact_report(report, item.nodeid)
    return report


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if report.failed:
        redact_report(report, report.nodeid)
    return report


def redact_report(report: Any, nodeid: str) -> None:
    """A report's failure text and captured output/logs, redacted: junit.xml and report.html write them as they are."""
    where = f"{nodeid} ({getattr(report, 'when', 'collect')})"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        report.longrepr = (longrepr[0], longrepr[1], redact_text(str(longrepr[2]), where))
    elif longrepr is not None:
        text = report.longreprtext
        clean = redact_text(text, where)
        if clean != text:
            report.longrepr = clean
    report.sections = [(title, redact_text(body, f"{where} {title}")) for title, body in report.sections]


@pytest.hookimpl(optionalhook=True, trylast=True)
def pytest_dgxspark_results(config: pytest.Config, results: dict[str, Any]) -> None:
    """Last pass over results.json before it is written: the redaction log, and known secrets scrubbed by value."""
    run = results.get("run") or {}
    if isinstance(run.get("pytest_args"), list):
        run["pytest_args"] = redact_args(run["pytest_args"])
    clean, found = scrub_document(results, redaction.LOG.secrets())
    clean = _redact_strings(clean)  # shapes and URL credentials in free text (notes, messages) too
    results.clear()
    results.update(clean)
    if found:
        leaks = [Leak("results.json", kind, source) for kind, source in found]
        _mark_incomplete(config, results, leaks, removed=False)
    results["redactions"], _ = scrub_document(redaction.LOG.entries(), redaction.LOG.secrets())


def _redact_strings(doc: Any, where: str = "results.json") -> Any:
    """doc with every string through the redaction layer (keys kept)."""
    if isinstance(doc, dict):
        return {k: _redact_strings(v, where) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact_strings(v, where) for v in doc]
    if isinstance(doc, str):
        return redact_text(doc, where)
    return doc


def _mark_incomplete(config: pytest.Config, results: dict[str, Any], leaks: list[Leak], removed: bool) -> None:
    results["verdict"] = "INCOMPLETE"
    reasons = results.setdefault("verdict_reasons", [])
    for leak in leaks:
        what = "the file was removed" if removed else "the value was removed"
        reason = (f"a secret ({leak.kind}, read from {leak.source}) reached {leak.file}: {what}; "
                  "the redaction layer missed it, report this")
        if reason not in reasons:
            reasons.append(reason)
    results.setdefault("secret_leaks", []).extend(leak.as_dict() for leak in leaks)
    config.stash.setdefault(leaks_key, []).extend(leaks)
    session = config.stash.get(session_key, None)
    if session is not None:
        session.exitstatus = EXIT_INCOMPLETE


class RedactingFilter(logging.Filter):
    """Every log record (testinfra's commands and outputs, urllib3's URLs, the kubernetes client's bodies) through
    the redaction layer before pytest's handlers keep it: the message, its traceback and stack are replaced by their
    redacted text, so report.html, junit.xml and -rA sections never see the raw record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "dgxspark_redacted", False):
            return True
        where = f"log record of {record.name}"
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record whose arguments do not format: keep its template only
            message = str(record.msg)
        record.msg, record.args = redact_text(message, where), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, where)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info, where)
        record.dgxspark_redacted = True
        return True


REDACTING_FILTER = RedactingFilter()
_LOG_HANDLERS = ("caplog_handler", "report_handler", "log_file_handler", "log_cli_handler")


def install_log_redaction(config: pytest.Config) -> list[logging.Handler]:
    """The redacting filter on each of pytest's logging handlers (captured sections, caplog, --log-file, live log)."""
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    handlers = [h for h in (getattr(plugin, name, None) for name in _LOG_HANDLERS) if isinstance(h, logging.Handler)]
    for handler in handlers:
        if REDACTING_FILTER not in handler.filters:
            handler.addFilter(REDACTING_FILTER)
    return handlers


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[session_key] = session
    install_log_redaction(session.config)


def scan_written(config: pytest.Config) -> None:
    """Scan the bundle as written so far (results.json, evidence, junit.xml, report.html); a leak removes the file,
    makes the verdict INCOMPLETE and is said loudly on the terminal."""
    from pytest_dgxspark.report.results import results_key, run_info

    run_dir = run_info(config).dir
    results_path = run_dir / "results.json"
    if results_key not in config.stash or not results_path.is_file():
        return
    leaks = scan_bundle(run_dir, redaction.LOG.secrets())
    if not leaks:
        _fix_modes(run_dir)
        return
    results = json.loads(results_path.read_text(encoding="utf-8"))
    results, _ = scrub_document(results, redaction.LOG.secrets())
    for leak in leaks:
        if leak.file != "results.json":
            (run_dir / leak.file).unlink(missing_ok=True)
    _mark_incomplete(config, results, leaks, removed=True)
    write_atomic(results_path, json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n")
    config.stash[results_key] = results
    for leak in leaks:
        _say(config, f"dgxspark: SECRET LEAK: {leak.file} held a {leak.kind} read from {leak.source}: "
                     f"{'scrubbed' if leak.file == 'results.json' else 'file removed'}; the run is INCOMPLETE")
    _fix_modes(run_dir)


# How a complete junit.xml and report.html end: a file that does not is the part a full disk left.
_COMPLETE_END = {"junit.xml": b"</testsuites>", "report.html": b"</html>"}


def reports_not_written(config: pytest.Config, exc: OSError) -> None:
    """junit.xml or report.html could not be written: name it, remove what is left of it, say what was kept."""
    from pytest_dgxspark.report.results import run_info

    run_dir = run_info(config).dir
    named = [exc.filename] if exc.filename else []
    for name, end in _COMPLETE_END.items():
        path = run_dir / name
        if path.is_file() and not path.read_bytes().rstrip().endswith(end):
            path.unlink()
            named.append(f"{name} (partial, removed)")
    kept = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()) if run_dir.is_dir() else []
    _say(config, f"dgxspark: BUNDLE INCOMPLETE ON DISK: {', '.join(named) or 'junit.xml or report.html'}: not written "
                 f"({exc.strerror or exc}); kept: {', '.join(kept) or 'nothing'}")


def _final_scan(config: pytest.Config) -> None:
    """After the summary and manifest: the same scan once more, over everything the bundle holds."""
    try:
        scan_written(config)
    except Exception as exc:  # noqa: BLE001 - the scan must never cost the report; it says it could not run
        _say(config, f"dgxspark: the bundle's secret scan could not run: {type(exc).__name__}: {exc}")
        session = config.stash.get(session_key, None)
        if session is not None:
            session.exitstatus = EXIT_INCOMPLETE


def _fix_modes(run_dir: Path) -> None:
    for root, dirs, files in os.walk(run_dir):
        os.chmod(root, DIR_MODE)
        for file in files:
            path = Path(root) / file
            if not path.is_symlink():
                os.chmod(path, FILE_MODE)


def _say(config: pytest.Config, line: str) -> None:
    try:
        config.get_terminal_writer().line(line, red=True, bold=True)
    except (AssertionError, AttributeError, ValueError):
        print(line, file=sys.stderr)
