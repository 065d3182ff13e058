"""pytest hooks of the handover bundle: options, pytest-html and JUnit wiring, drift, summary and manifest."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.report import htmlreport
from pytest_dgxspark.report.bundle import finish_bundle
from pytest_dgxspark.report.drift import Baseline, BaselineError, compute_drift, load_baseline
from pytest_dgxspark.report.messages import LANGS
from pytest_dgxspark.report.signing import key_problem

baseline_key = pytest.StashKey[Baseline]()
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
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Validate the key and the baseline before anything runs; one UsageError lists every problem."""
    problems = []
    key = config.getoption("dgxspark_sign")
    if key:
        problem = key_problem(Path(key).expanduser())
        if problem:
            problems.append(problem)
    baseline = config.getoption("dgxspark_baseline")
    if baseline:
        try:
            config.stash[baseline_key] = load_baseline(Path(baseline).expanduser())
        except BaselineError as exc:
            problems.append(str(exc))
    if problems:
        raise pytest.UsageError(*problems)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """In a dgxspark run, point pytest-html and junitxml into the run directory (before their configure runs)."""
    wanted = not hasattr(config, "workerinput") and not any(
        getattr(config.option, name, False) for name in _NO_RUN_OPTIONS
    )
    config.stash[bundle_key] = wanted
    if not wanted:
        return
    try:
        from pytest_dgxspark.results import run_info
        from pytest_dgxspark.runstate import is_active
    except ImportError:
        config.stash[bundle_key] = False
        return
    if not is_active(config):
        config.stash[bundle_key] = False
        return
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
    run = results.setdefault("run", {})
    run["operator"] = config.getoption("dgxspark_operator")
    run["lang"] = config.getoption("dgxspark_lang")
    baseline = config.stash.get(baseline_key, None)
    results["drift"] = compute_drift(baseline, results) if baseline is not None else None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """With results.json, report.html and junit.xml written: summary.html, MANIFEST.sha256 and its signature."""
    if not config.stash.get(bundle_key, False):
        return
    from pytest_dgxspark.results import results_key, run_info

    if results_key not in config.stash:
        return
    key = config.getoption("dgxspark_sign")
    outcome = finish_bundle(run_info(config).dir, config.getoption("dgxspark_lang"),
                            Path(key).expanduser() if key else None)
    _say(config, f"dgxspark bundle: {outcome.run_dir} ({', '.join(outcome.written) or 'nothing written'})",
         red=False)
    for note in outcome.notes:
        _say(config, f"dgxspark bundle: {note}", red=False)
    for problem in outcome.problems:
        _say(config, f"dgxspark bundle ERROR: {problem}", red=True)


def _say(config: pytest.Config, line: str, red: bool) -> None:
    try:
        config.get_terminal_writer().line(line, red=red, bold=red)
    except (AssertionError, AttributeError, ValueError):
        print(line, file=sys.stderr)
