"""pytest hooks of pytest-dgxspark: options, markers, the coverage gate, layered execution and results.json."""
from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark import hookspecs
from pytest_dgxspark.catalog.rules import LAYERS, CatalogError, catalog_key, load_catalog
from pytest_dgxspark.checking import NotApplicable
from pytest_dgxspark.judge import exitpath, identity
from pytest_dgxspark.judge import order as runorder
from pytest_dgxspark.judge.attribution import breaks
from pytest_dgxspark.judge.fold import blocking_rules, fold
from pytest_dgxspark.judge.forecast import checked as forecast_checked
from pytest_dgxspark.judge.forecast import enforce as enforce_forecast
from pytest_dgxspark.judge.forecast import entries as forecast_entries
from pytest_dgxspark.judge.forecast import forecast_of, forecast_phase, forecast_setup
from pytest_dgxspark.judge.forecast import tests as forecast_tests
from pytest_dgxspark.judge.reports import judge_phase, set_check_timer, teststatus
from pytest_dgxspark.judge.runstate import (
    RunState,
    coverage_problems,
    item_rule,
    load_run,
    state_key,
)
from pytest_dgxspark.judge.scope import scope_of
from pytest_dgxspark.judge.status import (
    BLOCKED_PREFIX,
    Status,
    blocked_by_key,
    not_applicable_key,
)
from pytest_dgxspark.plan import describe, is_active, listing_rules, plan_key, resolve
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
                    help="the real site sites/<name> to check (its hosts over SSH, its kubeconfig context); a run "
                         "needs --site or --testbed: a real target is never implied. Its governance files (docs/governance.md): "
                         "approvers.yml (name, role, key: an SSH public key), waivers.yml (rule, reason, approver, "
                         "role, ticket, expires: YYYY-MM-DD, site_digest: sha256:... as --dgxspark-plan prints it), "
                         "manual-checks.yml (id, title_en, title_ko, attester, date, note)")
    group.addoption("--testbed", dest="dgxspark_testbed", metavar="NAME|PATH",
                    help="run against a simulated DGX Spark scenario instead of the site's real targets")
    group.addoption("--testbed-api", dest="dgxspark_testbed_api", choices=("standin", "real"), default=None,
                    help="the testbed's workload API: the Python stand-in (default) or the real control plane "
                         "(kube-apiserver, etcd, kube-scheduler, kwok; `make controlplane` builds it)")
    group.addoption("--testbed-plane", dest="dgxspark_testbed_plane", metavar="DIR", default=None,
                    help="with --testbed-api real: attach the testbed to the kept control plane in DIR (`dgxspark-testbed "
                         "plane up --dir DIR` starts one) instead of starting a plane of its own; one testbed at a time")
    group.addoption("--report-dir", dest="dgxspark_report_dir", metavar="DIR",
                    help="where each run writes <run-id>/ and the `latest` link (default: reports/)")
    group.addoption("--dgxspark-plan", action="store_true", dest="dgxspark_plan",
                    help="print the run plan (hosts: alias, address, port, user, sudo, SSH config, known_hosts; API "
                         "server and contexts; what is written) and exit 0 without connecting")
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
    group.addoption("--dgxspark-run-date", dest="dgxspark_run_date", metavar="YYYY-MM-DD", default=None,
                    help="the day the forecast judges support dates against (default: the day the run starts, UTC)")
    parser.addini("dgxspark_site", "the site whose vars and manifests a --testbed run reads when neither --site nor "
                  "the scenario gives one (never a real target)", default="")
    parser.addini("dgxspark_report_dir", "default report directory", default="reports")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """--dgxspark-plan: resolve the plan from the files and options, print it and exit 0; nothing connects (no
    configure, no collection, no testbed started)."""
    if not config.getoption("dgxspark_plan", False):
        return None
    try:
        catalog = load_catalog()
    except CatalogError as exc:
        raise pytest.UsageError(str(exc)) from None
    for line in describe(resolve(config, catalog, planning=True)):
        print(line)
    return 0


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before a real run touches anything, the plan says what it will contact and write."""
    plan = session.config.stash.get(plan_key, None)
    if plan is not None and plan.testbed_ref is None:
        tw = session.config.get_terminal_writer()
        for line in describe(plan):
            tw.line(line)


# A check that hangs somewhere no timeout of its own covers becomes an `error`, never a hung run (pytest-timeout).
DEFAULT_TEST_TIMEOUT_S = 900


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rule(id): the ADR rule this test verifies, e.g. "
                            "@pytest.mark.rule('ADR-0002.allocatable'); exactly one per test under suites/")
    for layer in LAYERS:
        config.addinivalue_line("markers", f"{layer.replace('-', '_')}: checks of the {layer} layer "
                                "(applied from the rule's layer)")
    config.addinivalue_line("markers", "forecast(id): the advisory rule of catalog/beyond.yaml this check forecasts, "
                            "e.g. @pytest.mark.forecast('SPARK.reboot-pending'); it advises, never fails the verdict")
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
    if is_active(config) and not listing_rules(config) and not _only_help(config):
        # Only files are read here (site, scenario, governance): host parametrization needs the host names.
        plan = resolve(config, config.stash[catalog_key])
        config.stash[plan_key] = plan
        # rules the site makes required by what it declares (hardening-baseline with rke2_profile, ...)
        config.stash[catalog_key] = config.stash[catalog_key].for_site(plan.site)
        state: RunState = load_run(plan, config.stash[catalog_key])
        config.stash[state_key] = state
        config.stash[targets_key] = state.targets
        # SIGINT (once or twice), SIGTERM, SIGHUP and the deadline: one way out, through sessionfinish (exitpath.py)
        exitpath.install(plan.deadline_s)
        config.add_cleanup(exitpath.uninstall)  # the first cleanup added runs last: after the bundle is sealed
        if plan.testbed_ref:
            from pytest_dgxspark.fixtures import stop_left_testbeds

            stop_left_testbeds(config)


def _only_help(config: pytest.Config) -> bool:
    """--help and --markers describe the plugin: they need no target."""
    return bool(getattr(config.option, "help", False) or getattr(config.option, "markers", False))


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
        rule_id = item_rule(item)
        rule = catalog.rules[rule_id] if rule_id else catalog.forecast.get(forecast_of(item) or "")
        if rule is None:
            continue
        item.add_marker(rule.marker)
        if rule.gpu:
            item.add_marker("gpu")
        if item.nodeid in position:
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
    if state is not None:  # forecast checks are no rule's tests: they are reported apart (judge/forecast.py)
        state.items = [i for i in session.items if forecast_of(i) is None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    config = session.config
    if not listing_rules(config):
        return None
    catalog = config.stash[catalog_key]
    counts = {rid: 0 for rid in catalog.rules}
    for item in session.items:
        rule_id = item_rule(item)
        if rule_id in counts:
            counts[rule_id] += 1
    tw = config.get_terminal_writer()
    tw.line()
    for rule in catalog.ordered():
        tw.line(f"{rule.id:34} {rule.layer:13} {rule.kind:13} tests={counts[rule.id]:<3} {rule.title}")
    tw.line(f"{len(catalog)} rules, {sum(counts.values())} tests")
    advisory = {rid: sum(1 for i in session.items if forecast_of(i) == rid) for rid in catalog.forecast}
    for rule in catalog.forecast.values():
        tw.line(f"{rule.id:34} {rule.layer:13} {rule.kind:13} tests={advisory[rule.id]:<3} {rule.title}")
    tw.line(f"{len(catalog.forecast)} forecast rules (advisory, catalog/beyond.yaml), {sum(advisory.values())} tests")
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A signal (or the deadline) whose KeyboardInterrupt Python dropped still stops the run before the next test: the
    handler raises it wherever the main thread is, and raised inside a finalizer (`__del__` of a closed response, a
    weakref callback) it is only printed as 'Exception ignored', while the run is already asked to end."""
    ended = exitpath.current()
    if ended is not None and ended.pending() and not ended.finishing:
        raise KeyboardInterrupt(ended.reason())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.config.stash.get(state_key, None)
    rule = item_rule(item)
    if state is not None and rule is None and forecast_of(item):
        forecast_setup(state, item, _not_a_gpu_host(item, state))
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
    """Each phase's report says what results.json will say of it (judge/reports.py): N/A, blocked, a target's
    fault, recorded; the test's record is kept at teardown."""
    report = yield
    state = item.config.stash.get(state_key, None)
    if state is not None and item_rule(item) is None and forecast_of(item):
        forecast_phase(state, item, call, report)
    if state is not None and item_rule(item) is not None:
        judge_phase(state, item, call, report)
    return report


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal timer, raising CheckHung (a hung check is a fault of its target, known by its type)."""
    return set_check_timer(item, settings)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    return teststatus(report)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    config = session.config
    state: RunState | None = config.stash.get(state_key, None)
    exitpath.finishing()  # from here on a signal is noted, never raised: the bundle is finished and sealed
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
        reports_not_written(config, exc)
        result = None
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
    ended = exitpath.current()
    if ended is not None and ended.cause == "deadline":
        session.exitstatus = closing.EXIT_INCOMPLETE  # no one interrupted it: the run took too long
    elif ((results or {}).get("run") or {}).get("interrupted", {}).get("cause") == "interrupted":
        # a signal after the last test but before the results were judged: pytest saw no KeyboardInterrupt, yet the
        # results say interrupted, and README's exit table says 2 for that (seen: a SIGHUP as the CUDA sample ended)
        session.exitstatus = pytest.ExitCode.INTERRUPTED
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
    ended = exitpath.current()
    interrupted = ended.reason() if ended is not None and ended.pending() else ""
    why = session.shouldstop or session.shouldfail or \
        (f"the run was {interrupted} before this test ran" if interrupted else
         "interrupted (Ctrl-C) before this test ran")
    for item in state.items:
        if item.nodeid not in done:
            state.records.append(TestRecord(item.nodeid, item_rule(item) or "", Status.ERROR, 0.0, f"not run: {why}"))
    tgt = state.targets
    simulated_by = identity.simulation_signs(config, tgt)  # SIMULATED comes from the target, whatever options said
    scope = scope_of(state.catalog, [item_rule(i) or "" for i in state.items],
                     [item_rule(i) or "" for i in state.deselected],
                     config.getoption("markexpr") or "", config.getoption("keyword") or "")
    folded = fold(
        state.catalog, state.records, waivers=state.waivers, site_digest=state.plan.site_digest,
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
            "site": state.site.name, "testbed": tgt.testbed_ref, "site_digest": state.plan.site_digest,
            "handover": state.plan.handover, "site_source": state.plan.site_source,
            "context": tgt.context, "hosts": list(tgt.host_names),
            "pytest_args": list(config.invocation_params.args),
            "markexpr": config.getoption("markexpr") or "",
        },
        waivers=state.waivers, manual_checks=state.manual_checks, site_digest=state.plan.site_digest,
    )
    results["forecast"] = forecast_entries(state.catalog, state.forecast)
    results["forecast_checked"] = forecast_checked(state.forecast)
    results["forecast_tests"] = forecast_tests(state.forecast)
    enforce_forecast(results, state.site.vars or {})
    if state.plan.handover and simulated_by:
        results["verdict_reasons"].append(f"the targets are a testbed: {simulated_by[0]}")
    if state.plan.handover:  # one machine: the host's identity is its Node's (identity.hardware_problems)
        mismatched = identity.hardware_problems(config, tgt.host_names)
        if mismatched:
            results["verdict"] = "INCOMPLETE"
            results["verdict_reasons"].extend(mismatched)
        results["run"]["hardware_identity"] = {"hosts": dict(identity.of(config).machine_ids),
                                               "nodes": dict(identity.of(config).node_machine_ids),
                                               "problems": mismatched}
    if interrupted and ended is not None:  # whatever the checks that ran found, an interrupted run judged part
        results["verdict"] = "INCOMPLETE"
        results["verdict_reasons"].insert(0, f"the run was {interrupted}; the tests not run are errors")
        results["run"]["interrupted"] = ended.as_dict()
    results["provenance"] = _provenance(config)
    config.hook.pytest_dgxspark_results(config=config, results=results)
    if "interrupted" in results["run"] and ended is not None:  # every signal that came while other plugins added
        results["run"]["interrupted"] = ended.as_dict()        # to the results is in them too
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
