"""pytest hooks of pytest-dgxspark: options, markers, the coverage gate, layered execution and results.json."""
from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import hookspecs
from pytest_dgxspark.catalog.rules import LAYERS, CatalogError, catalog_key, load_catalog
from pytest_dgxspark.checking import Finding, NotApplicable
from pytest_dgxspark.judge import identity
from pytest_dgxspark.judge import order as runorder
from pytest_dgxspark.judge.attribution import breaks, symptom_causes, symptom_message
from pytest_dgxspark.judge.fold import blocking_rules, fold
from pytest_dgxspark.judge.runstate import (
    RunState,
    coverage_problems,
    item_rule,
    load_run,
    owner_of_fault,
    record_from_reports,
    state_key,
    transport_fault,
)
from pytest_dgxspark.judge.scope import scope_of
from pytest_dgxspark.judge.status import (
    BLOCKED_PREFIX,
    blocked_by_key,
    blocked_reason_key,
    finding_fix_key,
    not_applicable_key,
    target_fault_key,
)
from pytest_dgxspark.plan import is_active, listing_rules, plan_key, resolve
from pytest_dgxspark.report import closing
from pytest_dgxspark.report.results import ResultsNotWritten, build_results, results_key, run_info, write_results
from pytest_dgxspark.targets.selection import targets_key

# the redaction of every report, log and metadata bound for the bundle, and the bundle's byte scan
pytest_plugins = ["pytest_dgxspark.report.bundleguard"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dgxspark", "DGX Spark conformance (pytest-dgxspark)")
    group.addoption("--site", dest="dgxspark_site", metavar="DIR",
                    help="site directory sites/<name> (default: ini dgxspark_site, else sites/tirosh-home)")
    group.addoption("--testbed", dest="dgxspark_testbed", metavar="NAME|PATH",
                    help="run against a simulated DGX Spark scenario instead of the site's real targets")
    group.addoption("--report-dir", dest="dgxspark_report_dir", metavar="DIR",
                    help="where each run writes <run-id>/ and the `latest` link (default: reports/)")
    group.addoption("--dgxspark-rules", action="store_true", dest="dgxspark_rules",
                    help="print the rule catalog with the number of tests per rule, and exit")
    group.addoption("--dgxspark-no-block", action="store_true", dest="dgxspark_no_block",
                    help="run tests even when a rule they depend on failed (default: report them blocked)")
    group.addoption("--dgxspark-handover", action="store_true", dest="dgxspark_handover",
                    help="strict handover mode: only a complete, real, attested run can be ACCEPTED")
    group.addoption("--dgxspark-kubeconfig", dest="dgxspark_kubeconfig", metavar="FILE",
                    help="kubeconfig of the site (default: sites/<site>/rke2/kubeconfig.yml, $KUBECONFIG, ~/.kube/config)")
    group.addoption("--dgxspark-inventory", dest="dgxspark_inventory", metavar="FILE",
                    help="an Ansible YAML inventory to use instead of the site's inventory.yml")
    group.addoption("--dgxspark-ssh-config", dest="dgxspark_ssh_config", metavar="FILE",
                    help="an OpenSSH client config for the hosts (bastions, keys, known_hosts)")
    group.addoption("--dgxspark-baseline-force", action="store_true", dest="dgxspark_baseline_force",
                    help="compare with a --dgxspark-baseline of another site or results schema anyway")
    parser.addini("dgxspark_site", "default site directory", default="")
    parser.addini("dgxspark_report_dir", "default report directory", default="reports")


# A check that hangs somewhere no timeout of its own covers becomes an `error`, never a hung run (pytest-timeout).
DEFAULT_TEST_TIMEOUT_S = 900


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(id): the ADR rule this test verifies, e.g. "
                            "@pytest.mark.rule('ADR-0002.allocatable'); exactly one per test under suites/")
    for layer in LAYERS:
        config.addinivalue_line("markers", f"{layer.replace('-', '_')}: checks of the {layer} layer "
                                "(applied from the rule's layer)")
    config.addinivalue_line("markers", "gpu_host: the check applies to GPU hosts only: on an inventory host with "
                            "dgxspark_gpu: false it is N/A, decided before anything connects (never blocked)")
    config.addinivalue_line("markers", "gpu: the GPU chain (host driver, NVML, driver source, GPU injection, "
                            "GPU Operator, device plugin, allocatable, workload): `pytest -m gpu` after an upgrade")
    try:
        config.stash[catalog_key] = load_catalog()
    except CatalogError as exc:
        raise pytest.UsageError(str(exc)) from None
    suites = config.rootpath / "suites"
    if listing_rules(config) and config.args_source != pytest.Config.ArgsSource.ARGS and suites.is_dir():
        config.args[:] = [str(suites)]
    if is_active(config) and hasattr(config.option, "timeout") and config.option.timeout is None \
            and not config.getini("timeout"):
        config.option.timeout = DEFAULT_TEST_TIMEOUT_S
    if is_active(config) and config.option.tbstyle == "auto" and config.option.verbose <= 0:
        config.option.tbstyle = "short"  # an engineer reads the check's words; -v or --tb gives the long form
    if is_active(config) and not listing_rules(config):
        # Only files are read here (site, scenario, governance): host parametrization needs the host names.
        plan = resolve(config, config.stash[catalog_key])
        config.stash[plan_key] = plan
        state: RunState = load_run(plan, config.stash[catalog_key])
        config.stash[state_key] = state
        config.stash[targets_key] = state.targets


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    catalog = config.stash[catalog_key]
    if not is_active(config):
        return
    problems = coverage_problems(catalog, items)
    if problems:
        raise pytest.UsageError("tests without a valid rule marker:\n  " + "\n  ".join(problems))
    # after the rules they depend on, each target first reached by the rule owning it (runorder.py)
    position = runorder.ranks(catalog, items, item_rule)
    last = max(position.values(), default=0) + 1
    for item in items:
        rule = catalog.rules[item_rule(item)] if item_rule(item) else None
        if rule is None:
            continue
        item.add_marker(rule.marker)
        if rule.gpu:
            item.add_marker("gpu")
        item.add_marker(pytest.mark.order(position[item.nodeid]))
    items.sort(key=lambda i: position.get(i.nodeid, last))


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Remember what -m/-k left out: those rules are `not-selected`, not `untested`."""
    if items:
        state = items[0].config.stash.get(state_key, None)
        if state is not None:
            state.deselected.extend(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(state_key, None)
    if state is not None:
        state.items = list(session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    config = session.config
    if not listing_rules(config):
        return None
    catalog = config.stash[catalog_key]
    counts = {rid: 0 for rid in catalog.rules}
    for item in session.items:
        if item_rule(item) in counts:
            counts[item_rule(item)] += 1
    tw = config.get_terminal_writer()
    tw.line()
    for rule in catalog.ordered():
        tw.line(f"{rule.id:34} {rule.layer:13} {rule.kind:13} tests={counts[rule.id]:<3} {rule.title}")
    tw.line(f"{len(catalog)} rules, {sum(counts.values())} tests")
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash.get(state_key, None)
    rule = item_rule(item)
    if state is None or rule is None:
        return
    # Applicability is decided from the site before blocking: a rule that does not apply is never `blocked`.
    reason = state.inapplicable.get(rule) or _not_a_gpu_host(item, state)
    if reason:
        item.stash[not_applicable_key] = reason
        raise NotApplicable(reason)
    if state.plan.no_block:
        return
    # a rule blocks another only when its failure makes the other's evidence unobtainable or meaningless: an SSH fault
    # of a host blocks no check that reaches that host's Node through the API only (attribution.breaks)
    reaches = runorder.reaches(item, state.targets.host_names, f"api:{state.targets.context}")
    blockers = tuple(b for b in blocking_rules(state.catalog, rule, state.statuses())
                     if breaks([r for r in state.records if r.rule == b], reaches))
    if blockers:
        item.stash[blocked_by_key] = blockers
        pytest.skip(BLOCKED_PREFIX + ", ".join(blockers))


def _not_a_gpu_host(item: pytest.Item, state: RunState) -> str | None:
    """Why a `gpu_host` check does not apply to the host of its parameter (the inventory says so), else None: known
    before the host is reached, so an SSH fault of a CPU-only host never turns its GPU checks into BLOCKED."""
    if item.get_closest_marker("gpu_host") is None:
        return None
    callspec = getattr(item, "callspec", None)
    host = callspec.params.get("host_spec") if callspec is not None else None
    if host is None or str(host) in state.targets.gpu_host_names:
        return None
    return f"{host} is not a GPU host (dgxspark_gpu: false)"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    state = item.config.stash.get(state_key, None)
    if state is None or item_rule(item) is None:
        return report
    excinfo = call.excinfo
    if report.skipped and excinfo is not None and isinstance(excinfo.value, NotApplicable):
        item.stash[not_applicable_key] = excinfo.value.reason
    if report.failed and excinfo is not None and isinstance(excinfo.value, Finding) and excinfo.value.fix:
        item.stash[finding_fix_key] = (excinfo.value.fix, excinfo.value.fix_ko or excinfo.value.fix)
    fault = transport_fault(item, excinfo.value, state.targets.context) if report.failed and excinfo else None
    owned = owner_of_fault(state, item, fault) \
        if fault is not None and report.when != "teardown" and not state.plan.no_block else None
    if owned is not None:
        # the fault of a target another rule already accounts for (its connectivity rule, a failed prerequisite, the
        # first error on it): BLOCKED as it happens, as results.json has it, never a second ERROR
        from pytest_dgxspark.judge.evidence import redact_text

        item.stash[blocked_by_key], item.stash[blocked_reason_key] = owned
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {redact_text(owned[1])}")
    elif fault is not None:
        item.stash[target_fault_key] = fault
        # not a check's failure: the fault in the check's words and its fix, no traceback through transports
        report.longrepr = f"{fault.message}\nfix: {fault.fix}" if fault.fix else fault.message
    elif report.failed and report.when == "setup" and excinfo is not None \
            and excinfo.errisinstance(pytest.fail.Exception) and "from pytest-timeout" not in str(excinfo.value):
        report.dgxspark_judged = True  # a fixture's own pytest.fail is a judgement (e.g. no Node for the host)
    elif report.failed and excinfo is not None and "from pytest-timeout" in str(excinfo.value):
        from pytest_dgxspark.judge.records import TargetFault

        item.stash[target_fault_key] = TargetFault(None, f"the check hung: {excinfo.value} (the target did not answer)")
    _block_symptom(item, report, state)
    report.dgxspark_status = _status_of(item, report, state)
    if report.failed:
        _redact_longrepr(report)
    phases = state.phases.setdefault(item.nodeid, {})
    phases[report.when] = report
    if report.when == "teardown":
        from pytest_dgxspark.judge.evidence import evidence_key

        record = record_from_reports(item, phases)
        state.records.append(record)
        # junit.xml reads a testcase's properties from its teardown report: the status results.json gives the test
        report.user_properties.append(("dgxspark_status", record.outcome))
        items = item.stash.get(evidence_key, None)
        if items:
            state.evidence[item.nodeid] = items
    return report


def _block_symptom(item: pytest.Item, report: pytest.TestReport, state: RunState) -> None:
    """A judged failure under a failed `symptom_of` rule on the same host is its symptom: BLOCKED as it happens (the
    fold's attribute_symptoms, applied to the records so far), as results.json has it, never FAILED."""
    judged = report.failed and target_fault_key not in item.stash and blocked_by_key not in item.stash \
        and (report.when == "call" or getattr(report, "dgxspark_judged", False))
    causes = symptom_causes(state.catalog, item_rule(item) or "", item.nodeid, state.records) \
        if judged and not state.plan.no_block else ()
    if causes:
        from pytest_dgxspark.judge.evidence import redact_text
        from pytest_dgxspark.judge.runstate import _failure_message

        message = symptom_message(causes, redact_text(_failure_message(report)))
        item.stash[blocked_by_key], item.stash[blocked_reason_key] = causes, message
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {message}")


def _status_of(item: pytest.Item, report: pytest.TestReport, state: RunState) -> str | None:
    """The dgxspark status this phase's report shows (read by pytest_report_teststatus), from the item's stash."""
    if report.skipped and blocked_by_key in item.stash:
        return "blocked"
    if report.skipped and not_applicable_key in item.stash:
        return "not-applicable"
    if report.failed and report.when == "call" and target_fault_key in item.stash:
        return "target-error"  # the run could not reach or read a target: never shown as a check's FAILED
    if report.passed and report.when == "call" and state.catalog.rules[item_rule(item)].kind == "informational":
        return "recorded"
    return None


# category, letter, word: the terminal, its summary line and -r read the same fact as results.json
_TESTSTATUS = {
    "blocked": ("blocked", "B", "BLOCKED"),
    "not-applicable": ("not-applicable", "N", "N/A"),
    "recorded": ("recorded", "R", "RECORDED"),
    "target-error": ("error", "E", "ERROR"),
}


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    return _TESTSTATUS.get(getattr(report, "dgxspark_status", None) or "")


def _redact_longrepr(report: pytest.TestReport) -> None:
    """A failure's text goes to junit.xml and report.html as it is: no secret may ride along."""
    from pytest_dgxspark.judge.evidence import redact_text

    text = report.longreprtext
    redacted = redact_text(text)
    if redacted != text:
        report.longrepr = redacted


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    config = session.config
    state: RunState | None = config.stash.get(state_key, None)
    if state is None or config.option.collectonly or not state.items:
        result = yield
        if state is not None and not state.items and not config.option.collectonly:
            _drop_empty_run_dir(config)
        return result
    results, written = _finish(config, session, state)  # results.json first; junit.xml and report.html after
    from pytest_dgxspark.report.bundleguard import reports_not_written, scan_written

    try:
        result = yield
    except OSError as exc:  # junit.xml or report.html on a full disk: say so and what was kept, never a traceback
        config.get_terminal_writer().line()  # pytest's summary did not run: end its progress line first
        result = reports_not_written(config, exc)
    scan_written(config)
    results = config.stash.get(results_key, results)  # the secret scan may have made it INCOMPLETE
    # The terminal reporter's summary ran inside this (outermost) wrapper: the closing block comes after it.
    tw = config.get_terminal_writer()
    closing.write_block(tw, results, run_info(config).dir if written is not None else None)
    if written is not None:
        for problem in written.problems:
            tw.line(f"dgxspark: BUNDLE INCOMPLETE ON DISK: {problem}", red=True, bold=True)
    verdict = results["verdict"] if written is not None else "INCOMPLETE"  # no bundle, no acceptance
    session.exitstatus = closing.exit_status(verdict, session.exitstatus)
    return result


# What pytest's own reporters write into the run directory before they know whether anything ran.
_PYTEST_ONLY = frozenset({"junit.xml", "report.html", "assets"})


def _drop_empty_run_dir(config: pytest.Config) -> None:
    """A run that selected no test judges nothing and writes no bundle: the run directory pytest-html and junitxml
    left behind (only their files) is removed, so reports/ holds bundles only; anything else in it is kept."""
    import shutil

    from pytest_dgxspark.report.results import run_info

    run_dir = run_info(config).dir
    try:
        entries = {entry.name for entry in run_dir.iterdir()}
    except OSError:  # never created, or unreadable: nothing to tidy
        return
    if entries <= _PYTEST_ONLY:
        shutil.rmtree(run_dir, ignore_errors=True)
        config.get_terminal_writer().line(
            f"dgxspark: no test selected: no verdict and no bundle ({run_dir} removed, it held only "
            f"{', '.join(sorted(entries)) or 'nothing'})")


def _finish(config: pytest.Config, session: pytest.Session, state: RunState) -> tuple[dict, Any]:
    from pytest_dgxspark.judge.records import TestRecord

    done = {r.nodeid for r in state.records}
    why = session.shouldstop or session.shouldfail or "interrupted (Ctrl-C) before this test ran"
    for item in state.items:
        if item.nodeid not in done:
            state.records.append(TestRecord(item.nodeid, item_rule(item) or "", "error", 0.0, f"not run: {why}"))
    tgt = state.targets
    simulated_by = identity.simulation_signs(config, tgt)  # SIMULATED comes from the target, whatever options said
    scope = scope_of(state.catalog, [item_rule(i) for i in state.items], [item_rule(i) for i in state.deselected],
                     config.getoption("markexpr") or "", config.getoption("keyword") or "")
    folded = fold(
        state.catalog, state.records, waivers=state.waivers,
        handover=state.plan.handover, simulated=bool(simulated_by),
        unattested_manual=[m.id for m in state.manual_checks if not m.attested],
        management_context=tgt.management_context, prerequisites=tgt.prerequisites(),
        not_applicable=state.not_applicable_rules(), scope=scope, reaches=_reaches(state),
    )
    info = run_info(config)
    results = build_results(
        info=info, catalog=state.catalog, fold=folded, records=folded.records, evidence=state.evidence,
        run={
            "simulated": bool(simulated_by), "simulated_by": simulated_by,
            "site": state.site.name, "testbed": tgt.testbed_ref,
            "handover": state.plan.handover, "site_source": state.plan.site_source,
            "context": tgt.context, "hosts": list(tgt.host_names),
            "pytest_args": list(config.invocation_params.args),
            "markexpr": config.getoption("markexpr") or "",
        },
        waivers=state.waivers, manual_checks=state.manual_checks,
    )
    if state.plan.handover and simulated_by:
        results["verdict_reasons"].append(f"the targets are a testbed: {simulated_by[0]}")
    results["provenance"] = _provenance(config)
    config.hook.pytest_dgxspark_results(config=config, results=results)
    config.stash[results_key] = results
    try:
        written = write_results(info, results, folded.records, state.evidence)
    except ResultsNotWritten as exc:
        written = None
        del config.stash[results_key]
        tw = config.get_terminal_writer()
        tw.line()
        tw.line(f"dgxspark: BUNDLE NOT WRITTEN: {exc}", red=True, bold=True)
    return results, written


def _reaches(state: RunState) -> dict[str, frozenset[str]]:
    """rule -> the targets its selected tests reach (runorder.reaches)."""
    found: dict[str, frozenset[str]] = {}
    api = f"api:{state.targets.context}"
    for item in state.items:
        rid = item_rule(item)
        if rid:
            found[rid] = found.get(rid, frozenset()) | runorder.reaches(item, state.targets.host_names, api)
    return found


def _provenance(config: pytest.Config) -> dict:
    from pytest_dgxspark.fixtures import run_provenance
    from pytest_dgxspark.targets.connections import connections_key

    conns = config.stash.get(connections_key, None)
    if conns is None:
        return {}
    try:
        return run_provenance(conns)
    except Exception as exc:  # provenance is evidence, never a reason to lose the report
        return {"error": f"provenance could not be collected: {exc}"}
