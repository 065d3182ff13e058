"""pytest hooks of the handover bundle: options, pytest-html and JUnit wiring, drift, summary and manifest.

The options are resolved and checked with the rest of the run plan (plan.py); the hooks read the plan.
"""
from __future__ import annotations

import sys
from typing import Any

import pytest

from pytest_dgxspark.plan import plan_key
from pytest_dgxspark.report import htmlreport
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.drift import compute_drift
from pytest_dgxspark.report.messages import LANGS

bundle_key = pytest.StashKey[bool]()
# Options after which pytest does not run tests: no bundle then.
_NO_RUN_OPTIONS = ("help", "version", "collectonly", "markers", "showfixtures", "show_fixtures_per_test",
                   "dgxspark_rules")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dgxspark-report", "pytest-dgxspark handover bundle")
    group.addoption("--dgxspark-operator", metavar="NAME", default=None,
                    help="name of the engineer running the checks, shown in the summary and results.json")
    group.addoption("--dgxspark-lang", choices=LANGS, default="both",
                    help="language of summary.html: ko, en or both (default: both, bilingual)")
    group.addoption("--dgxspark-sign", metavar="KEY", default=None,
                    help="sign MANIFEST.sha256 with this SSH key (ssh-keygen -Y sign -n dgxspark-report)")
    group.addoption("--dgxspark-baseline", metavar="PATH", default=None,
                    help="an earlier results.json or bundle directory: add a drift section against it")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """In a dgxspark run, point pytest-html and junitxml into the run directory (before their configure runs)."""
    wanted = not hasattr(config, "workerinput") and not any(
        getattr(config.option, name, False) for name in _NO_RUN_OPTIONS
    )
    config.stash[bundle_key] = wanted
    if not wanted:
        return
    from pytest_dgxspark.plan import is_active, report_dir
    from pytest_dgxspark.report.results import report_dir_key, run_info

    if not is_active(config):
        config.stash[bundle_key] = False
        return
    config.stash[report_dir_key] = report_dir(config)  # before the plan: pytest-html and junit need the run dir now
    run_dir = run_info(config).dir
    if config.pluginmanager.has_plugin("html") and not getattr(config.option, "htmlpath", None):
        config.option.htmlpath = str(run_dir / "report.html")
        config.option.self_contained_html = True
    if not getattr(config.option, "xmlpath", None):
        config.option.xmlpath = str(run_dir / "junit.xml")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        htmlreport.add_rule_property(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    htmlreport.annotate_report(item, report)
    return report


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_header(cells: list[str]) -> None:
    htmlreport.add_header_cells(cells)


@pytest.hookimpl(optionalhook=True)
def pytest_html_results_table_row(report: pytest.TestReport, cells: list[str]) -> None:
    htmlreport.add_row_cells(report, cells)


@pytest.hookimpl(optionalhook=True)
def pytest_dgxspark_results(config: pytest.Config, results: dict[str, Any]) -> None:
    """Stamp the operator and language on the run and add drift against the baseline."""
    plan = config.stash[plan_key]
    run = results.setdefault("run", {})
    run["operator"] = plan.operator
    run["lang"] = plan.lang
    from pytest_dgxspark.report.inputs import identity, site_inputs

    results["site_inputs"] = site_inputs(plan.site.root)
    results["identity"] = identity(plan.site.root)
    results["drift"] = compute_drift(plan.baseline, results) if plan.baseline is not None else None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """With results.json, report.html and junit.xml written: summary.html, MANIFEST.sha256 and its signature."""
    if not config.stash.get(bundle_key, False):
        return
    from pytest_dgxspark.report.results import results_key, run_info

    if results_key not in config.stash or plan_key not in config.stash:
        return
    from pytest_dgxspark.judge import exitpath

    plan = config.stash[plan_key]
    outcome = finish_bundle(run_info(config).dir, plan.lang, plan.sign_key, stop=exitpath.pending)
    _say(config, f"dgxspark bundle: {outcome.run_dir} ({', '.join(outcome.written) or 'nothing written'})",
         red=False)
    for note in outcome.notes:
        _say(config, f"dgxspark bundle: {note}", red=False)
    for problem in outcome.problems:
        _say(config, f"dgxspark bundle ERROR: {problem}", red=True)
    if plan.sign_key is not None and outcome.unsigned is not None:
        _say(config, f"dgxspark: BUNDLE UNSIGNED: {outcome.unsigned}", red=True)
    if outcome.problems:
        # a file that could not be written is an error of the run, never "written": the last line and the exit say so
        verdict = config.stash[results_key].get("verdict", "INCOMPLETE")
        _say(config, f"dgxspark: {verdict} as judged, but the bundle is INCOMPLETE ON DISK: "
                     f"{len(outcome.problems)} file(s) not written ({'; '.join(outcome.problems)[:300]})", red=True)
        _bundle_failed(config)


def _bundle_failed(config: pytest.Config) -> None:
    """The run's exit status: INCOMPLETE (8), unless pytest's own (interrupted, internal or usage error) stands."""
    from pytest_dgxspark.judge import exitpath
    from pytest_dgxspark.report.bundleguard import session_key
    from pytest_dgxspark.report.closing import exit_status

    session = config.stash.get(session_key, None)
    if session is not None:
        interrupted = exitpath.pending() and exitpath.current().cause != "deadline"
        session.exitstatus = pytest.ExitCode.INTERRUPTED if interrupted else exit_status("INCOMPLETE", session.exitstatus)


def _say(config: pytest.Config, line: str, red: bool) -> None:
    try:
        config.get_terminal_writer().line(line, red=red, bold=red)
    except (AssertionError, AttributeError, ValueError):
        print(line, file=sys.stderr)
