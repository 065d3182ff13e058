"""The plugin: markers, coverage gate, --dgxspark-rules, layered execution, BLOCKED, verdicts, results.json."""
from __future__ import annotations

import json

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from tests.conftest import grant_waiver
from tests.pytester_args import SITE_ARGS


def results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


def statuses(doc: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in doc["rules"]}


def test_dgxspark_rules_lists_the_30_ids_with_layer_kind_and_test_count(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_a():\n    pass\n")
    result = pytester.runpytest("--dgxspark-rules", "suites", "-p", "no:cacheprovider")
    assert result.ret == 0
    judged = [r.id for r in load_catalog().ordered()]
    lines = [ln for ln in result.outlines if ln.split()[:1] and ln.split()[0] in judged]
    assert [ln.split()[0] for ln in lines] == judged
    assert len([ln for ln in lines if ln.startswith("ADR-")]) == 30
    driver = next(ln for ln in lines if ln.startswith("ADR-0002.host-driver "))
    assert driver.split()[1:4] == ["host", "required", "tests=1"]
    assert not (pytester.path / "reports").exists()


@pytest.mark.slow
def test_a_suite_test_without_rule_marker_is_a_usage_error_listing_every_offender(pytester, suite):
    suite("host", "def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: tests without a valid rule marker:",
        "  suites/host/test_host.py::test_one: no @pytest.mark.rule(<id>) marker",
        "  suites/host/test_host.py::test_two: no @pytest.mark.rule(<id>) marker",
    ])


@pytest.mark.slow
def test_unknown_rule_id_is_a_usage_error(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.no-such-rule')\ndef test_one():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "  suites/host/test_host.py::test_one: unknown rule id 'ADR-0002.no-such-rule' (see pytest --dgxspark-rules)",
    ])


@pytest.mark.slow
def test_layer_and_gpu_markers_are_applied_from_the_catalog(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n\n"
                  "@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_ip():\n    pass\n")
    suite("rke2", "@pytest.mark.rule('ADR-0001.node-ready')\ndef test_ready():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS, "-m", "gpu", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["suites/host/test_host.py::test_driver", "*1/3 tests collected (2 deselected)*"])
    result = pytester.runpytest(*SITE_ARGS, "-m", "rke2", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["suites/rke2/test_rke2.py::test_ready"])


@pytest.mark.slow
def test_tests_run_bottom_up_by_layer(pytester, suite):
    suite("workload", "@pytest.mark.rule('ADR-0002.cuda-sample')\ndef test_cuda():\n    pass\n")
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    suite("site", "@pytest.mark.rule('ADR-0001.site-layout')\ndef test_layout():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    order = [ln.split("::")[1].split()[0] for ln in result.outlines if "::test_" in ln and "PASSED" in ln]
    assert order == ["test_layout", "test_driver", "test_cuda"]


@pytest.mark.slow
def test_a_failed_rule_blocks_its_transitive_dependents_and_is_the_root_cause(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    assert False, 'no nvidia module'\n\n"
                  "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_nvml():\n    pass\n\n"
                  "@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_ip():\n    pass\n")
    suite("allocatable", "@pytest.mark.rule('ADR-0002.allocatable')\ndef test_alloc():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == 1
    doc = results(pytester)
    st = statuses(doc)
    assert st["ADR-0002.host-driver"] == "failed"
    assert st["ADR-0002.host-nvml"] == "blocked"
    assert st["ADR-0002.allocatable"] == "blocked"
    assert st["ADR-0002.host-static-ip"] == "passed"
    assert st["ADR-0001.node-ready"] == "untested"
    nvml = next(r for r in doc["rules"] if r["id"] == "ADR-0002.host-nvml")
    assert nvml["blocked_by"] == ["ADR-0002.host-driver"]
    assert nvml["tests"][0]["outcome"] == "blocked"
    assert doc["root_causes"] == ["ADR-0002.host-driver"]
    assert doc["lowest_broken_layer"] == "host"
    assert doc["verdict"] == "REJECTED"


@pytest.mark.slow
def test_no_block_runs_dependents_anyway(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    assert False\n\n"
                  "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_nvml():\n    assert False\n")
    pytester.runpytest(*SITE_ARGS, "--dgxspark-no-block")
    doc = results(pytester)
    assert statuses(doc)["ADR-0002.host-nvml"] == "failed"
    assert doc["root_causes"] == ["ADR-0002.host-driver"]


def _all_rules_source(body_for: dict[str, str]) -> str:
    parts = []
    for i, rule in enumerate(load_catalog().ordered()):
        body = body_for.get(rule.id, "pass")
        parts.append(f"@pytest.mark.rule('{rule.id}')\ndef test_{i}():\n    {body}\n")
    return "\n".join(parts)


@pytest.mark.slow
def test_every_required_rule_passed_is_accepted(pytester, suite):
    suite("all", _all_rules_source({"ADR-0002.image-mirror": "not_applicable('the site is not air-gapped')"}))
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == 0
    doc = results(pytester)
    assert doc["verdict"] == "ACCEPTED"
    assert statuses(doc)["ADR-0002.image-mirror"] == "not-applicable"
    assert doc["root_causes"] == [] and doc["lowest_broken_layer"] is None
    bundle = pytester.path / "out" / doc["run"]["id"]
    start = result.outlines.index("dgxspark: ACCEPTED, scope: full")
    assert result.outlines[start:start + 5] == [
        "dgxspark: ACCEPTED, scope: full",
        "  lowest broken layer: none",
        "  root causes: none",
        "  rules: 30 passed, 1 recorded, 2 not-applicable",
        f"  bundle: {bundle}",
    ]
    assert result.outlines[start + 5].startswith(f"dgxspark bundle: {bundle} (")
    assert result.outlines[start - 2].startswith("===") and "passed" in result.outlines[start - 2]


@pytest.mark.slow
def test_an_untested_required_rule_keeps_the_verdict_incomplete(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert doc["verdict"] == "INCOMPLETE"
    assert statuses(doc)["ADR-0002.allocatable"] == "untested"


@pytest.mark.slow
def test_an_error_is_incomplete_not_rejected(pytester, suite):
    suite("all", _all_rules_source({"ADR-0001.argocd-registered": "raise __import__('pytest_dgxspark.checking').checking.TargetError('management API unreachable')"}))
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    argo = next(r for r in doc["rules"] if r["id"] == "ADR-0001.argocd-registered")
    assert argo["status"] == "error"
    assert argo["tests"][0]["message"] == "management API unreachable"
    assert doc["verdict"] == "INCOMPLETE"
    # an error that names no target and judged nothing is never a root cause: it is listed as not judged
    assert doc["root_causes"] == []
    assert [(d["rule"], d["kind"]) for d in doc["not_judged"]] == [("ADR-0001.argocd-registered", "unreadable")]


@pytest.mark.slow
def test_informational_failure_does_not_reject(pytester, suite):
    suite("all", _all_rules_source({"ADR-0001.hardening-baseline": "assert False, 'no CIS profile'",
                                    "ADR-0002.image-mirror": "not_applicable('not air-gapped')"}))
    pytester.runpytest(*SITE_ARGS)
    assert results(pytester)["verdict"] == "ACCEPTED"


@pytest.mark.slow
def test_results_json_has_the_contract_keys_and_latest_link(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    pytester.runpytest(*SITE_ARGS)
    latest = pytester.path / "out" / "latest"
    assert latest.is_symlink()
    doc = results(pytester)
    assert {"id", "simulated", "site", "started"} <= set(doc["run"])
    assert doc["run"]["simulated"] is False and doc["run"]["site"] == "tirosh-home"
    assert (pytester.path / "out" / doc["run"]["id"] / "results.json").is_file()
    assert {"verdict", "root_causes", "rules"} <= set(doc)
    for rule in doc["rules"]:
        assert {"id", "layer", "status", "blocked_by", "tests"} <= set(rule)
    test = next(r for r in doc["rules"] if r["id"] == "ADR-0002.host-driver")["tests"][0]
    assert test["nodeid"] == "suites/host/test_host.py::test_driver" and test["outcome"] == "passed"


@pytest.mark.slow
def test_handover_mode_needs_attested_manual_checks(pytester, suite):
    suite("all", _all_rules_source({"ADR-0002.image-mirror": "not_applicable('not air-gapped')"}))
    (pytester.path / "sites" / "tirosh-home" / "manual-checks.yml").write_text(
        "checks:\n  - id: ups\n    title_en: UPS in place\n    title_ko: UPS 설치 확인\n")
    pytester.runpytest(*SITE_ARGS, "--dgxspark-handover")
    doc = results(pytester)
    assert doc["verdict"] == "INCOMPLETE"
    assert "manual checks without attestation: ups" in doc["verdict_reasons"]


@pytest.mark.slow
def test_a_valid_waiver_turns_a_failure_into_waived_and_an_expired_one_rejects(pytester, suite):
    suite("all", _all_rules_source({"ADR-0001.cilium-settings": "assert False, 'hubble on'",
                                    "ADR-0002.image-mirror": "not_applicable('not air-gapped')"}))
    site = pytester.path / "sites" / "tirosh-home"
    grant_waiver(site, "ADR-0001.cilium-settings")
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert statuses(doc)["ADR-0001.cilium-settings"] == "waived"
    assert doc["verdict"] == "ACCEPTED"
    grant_waiver(site, "ADR-0001.cilium-settings", expires="2020-01-01")
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert statuses(doc)["ADR-0001.cilium-settings"] == "failed"
    assert doc["verdict"] == "REJECTED"


def test_a_waiver_for_an_unknown_rule_is_a_usage_error(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    (pytester.path / "sites" / "tirosh-home" / "waivers.yml").write_text(
        "waivers:\n  - rule: ADR-0009.nope\n    reason: r\n    approver: a\n    role: b\n    ticket: T-1\n"
        "    expires: 2999-01-01\n    site_digest: sha256:" + "0" * 64 + "\n")
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sites/tirosh-home/waivers.yml: waivers.0.rule: 'ADR-0009.nope' is not a rule id*"])


def test_bad_site_vars_fail_before_any_test_runs(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched')\n")
    vars_ = pytester.path / "sites" / "tirosh-home" / "rke2" / "vars.yml"
    vars_.write_text(vars_.read_text().replace("rke2_disable_kube_proxy: false", "rke2_disable_kube_proxy: maybe"))
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sites/tirosh-home/rke2/vars.yml: rke2_disable_kube_proxy: 'maybe' is not of type 'boolean'"])


def test_plain_project_tests_are_untouched_by_the_plugin(pytester):
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == 0
    assert not (pytester.path / "reports").exists()


@pytest.mark.slow
def test_errors_of_an_unreachable_target_are_blocked_by_its_connectivity_rule(pytester, suite):
    raise_ssh = "raise TargetError('gpu-01 unreachable over SSH', target='ssh:gpu-01')"
    raise_api = "raise TargetError('API unreachable', target='api:tirosh-home/rke2/gpu')"
    suite("host", "from pytest_dgxspark.checking import TargetError\n\n"
                  f"@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    {raise_ssh}\n\n"
                  f"@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_ip():\n    {raise_ssh}\n\n"
                  f"@pytest.mark.rule('ADR-0001.kubeconfig-context')\ndef test_ctx():\n    {raise_api}\n\n"
                  f"@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_cfg():\n    {raise_api}\n")
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    st = statuses(doc)
    assert st["ADR-0002.host-static-ip"] == "error" and st["ADR-0001.kubeconfig-context"] == "error"
    assert st["ADR-0002.host-driver"] == "blocked" and st["ADR-0001.rke2-config"] == "blocked"
    driver = next(r for r in doc["rules"] if r["id"] == "ADR-0002.host-driver")
    assert driver["blocked_by"] == ["ADR-0002.host-static-ip"]
    assert driver["tests"][0]["message"].startswith("blocked by ADR-0002.host-static-ip (ssh:gpu-01 unreachable)")
    assert sorted(doc["root_causes"]) == ["ADR-0001.kubeconfig-context", "ADR-0002.host-static-ip"]
    assert doc["verdict"] == "INCOMPLETE"


@pytest.mark.slow
def test_an_interrupted_run_still_writes_results_with_error_outcomes(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise KeyboardInterrupt\n\n"
                  "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_nvml():\n    pass\n")
    result = pytester.runpytest_subprocess(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = results(pytester)
    nvml = next(r for r in doc["rules"] if r["id"] == "ADR-0002.host-nvml")
    assert nvml["status"] == "error"
    assert nvml["tests"][0]["message"].startswith("not run: interrupted")
    assert doc["verdict"] == "INCOMPLETE"


@pytest.mark.slow
def test_a_hung_check_ends_as_an_error_not_a_hung_run(pytester, suite):
    suite("host", "import time\n\n@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    time.sleep(30)\n")
    result = pytester.runpytest_subprocess(*SITE_ARGS, "--timeout", "1")
    assert result.ret == 8  # INCOMPLETE
    driver = next(r for r in results(pytester)["rules"] if r["id"] == "ADR-0002.host-driver")
    assert driver["status"] == "error"
    assert driver["tests"][0]["message"].startswith("the check hung: Timeout (>1.0s) from pytest-timeout")


@pytest.mark.slow
def test_failure_messages_are_redacted_before_they_reach_results(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n"
                  "    assert False, 'config.yaml line 3: token: K10abcdef0123456789abcdef::server:s3cr3tpassw0rd'\n")
    pytester.runpytest(*SITE_ARGS)
    for name in ("results.json", "junit.xml", "report.html", "summary.html"):
        text = (pytester.path / "out" / "latest" / name).read_text()
        assert "s3cr3tpassw0rd" not in text, name


@pytest.mark.slow
def test_a_fixture_that_judges_fails_the_rule_while_a_broken_fixture_is_an_error(pytester, suite):
    suite("rke2", "@pytest.fixture\ndef node():\n    pytest.fail('no Node named gpu-01: the host never registered')\n\n"
                  "@pytest.fixture\ndef broken():\n    raise RuntimeError('bug in a fixture')\n\n"
                  "@pytest.mark.rule('ADR-0001.node-ready')\ndef test_ready(node):\n    pass\n\n"
                  "@pytest.mark.rule('ADR-0001.kubeconfig-context')\ndef test_ctx(broken):\n    pass\n")
    pytester.runpytest(*SITE_ARGS)
    st = statuses(results(pytester))
    assert st["ADR-0001.node-ready"] == "failed"
    assert st["ADR-0001.kubeconfig-context"] == "error"


def test_a_run_that_selects_no_test_leaves_no_run_directory_and_says_so(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS, "-k", "nothing_matches_this")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["dgxspark: no test selected: no verdict and no bundle (*out/*-* removed, it held "
                                 "only junit.xml, report.html)"])
    out = pytester.path / "out"
    assert not out.exists() or list(out.iterdir()) == [], list(out.iterdir())
