"""A broken target blocks exactly the checks that need it, as it happens: the terminal shows BLOCKED where
results.json has `blocked`, the rule owning a target reaches it first, and an SSH fault of a host never blocks a
check that reads the host's Node through the API only."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_dgxspark.report.junitagree import STATUS_PREFIX
from tests.pytester_args import SITE_ARGS, SSH_FAULT

# Stand-ins for the plugin's host and cluster fixtures: nothing here may connect to the site's real address.
CONFTEST = (
    "import pytest\n"
    "from pytest_dgxspark.checking import TargetError\n"
    "from pytest_dgxspark.targets.causes import SSH_CAUSES\n\n"
    "@pytest.fixture\ndef host_target(host_spec):\n"
    f"    {SSH_FAULT}\n\n"
    "@pytest.fixture(scope='session')\ndef cluster():\n    return {'gpu-01': {'Ready': 'True'}}\n"
)
HEADER = "from pytest_dgxspark.checking import TargetError\nfrom pytest_dgxspark.targets.causes import SSH_CAUSES\n\n"


def results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


def outcomes_by_test(doc: dict) -> dict[str, tuple[str, str]]:
    return {t["nodeid"].split("::")[1]: (t["outcome"], t["message"]) for r in doc["rules"] for t in r["tests"]}


def junit_status(pytester: pytest.Pytester) -> dict[str, str | None]:
    root = ET.parse(pytester.path / "out" / "latest" / "junit.xml").getroot()
    return {c.get("name"): _status_line(c) for c in root.iter("testcase")}


def _status_line(case: ET.Element) -> str | None:
    """The test's dgxspark status as junit.xml carries it (a `dgxspark status: <status>; ...` system-out line)."""
    line = next((o.text for o in case.iter("system-out") if (o.text or "").startswith(STATUS_PREFIX)), "") or ""
    return line[len(STATUS_PREFIX):].split(";")[0] or None


@pytest.mark.slow
def test_a_later_check_on_an_unreachable_host_is_blocked_as_it_happens_and_the_owner_runs_first(pytester, suite):
    pytester.makeconftest(CONFTEST)
    # written in the "wrong" order: the run still reaches the host through host-static-ip first
    suite("host", HEADER +
          "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver(host_target):\n    pass\n\n"
          "@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_static(host_target):\n    pass\n\n"
          "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service():\n"
          f"    {SSH_FAULT}\n")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    result.stdout.fnmatch_lines([
        "*test_static[[]gpu-01[]] ERROR*",
        "*test_driver[[]gpu-01[]] BLOCKED*",
        "*test_service BLOCKED*",
        "*1 error, 2 blocked*",
    ])
    doc = results(pytester)
    got = outcomes_by_test(doc)
    assert got["test_static[gpu-01]"][0] == "error"
    assert got["test_driver[gpu-01]"] == ("blocked", (
        "blocked by ADR-0002.host-static-ip (ssh:gpu-01 unreachable): gpu-01 (10.0.0.21:22): cannot read the host "
        "over SSH: nothing accepts SSH connections on that address and port"))
    assert got["test_service"][0] == "blocked"
    assert doc["root_causes"] == ["ADR-0002.host-static-ip"]
    assert junit_status(pytester) == {"test_static[gpu-01]": "error", "test_driver[gpu-01]": "blocked",
                                      "test_service": "blocked"}


@pytest.mark.slow
def test_an_ssh_fault_never_blocks_a_check_that_reads_the_hosts_node_through_the_api(pytester, suite):
    pytester.makeconftest(CONFTEST)
    suite("rke2", HEADER +
          "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service(host_target):\n    pass\n\n"
          "@pytest.mark.rule('ADR-0001.node-ready')\ndef test_ready(host_spec, cluster):\n"
          "    assert cluster[host_spec.name]['Ready'] == 'False', f'{host_spec.where}: Node is not Ready'\n\n"
          "@pytest.mark.rule('ADR-0001.runtime-rke2-containerd')\ndef test_runtime(host_target):\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    result.stdout.fnmatch_lines(["*test_service[[]gpu-01[]] ERROR*", "*test_ready[[]gpu-01[]] FAILED*",
                                 "*test_runtime[[]gpu-01[]] BLOCKED*"])
    doc = results(pytester)
    got = outcomes_by_test(doc)
    assert got["test_ready[gpu-01]"][0] == "failed" and got["test_ready[gpu-01]"][1].endswith("): Node is not Ready")
    assert got["test_runtime[gpu-01]"] == ("blocked", "blocked by ADR-0001.rke2-service")
    # the API's judged failure is a root cause beside the host's fault: neither explains the other
    assert doc["root_causes"] == ["ADR-0001.rke2-service", "ADR-0001.node-ready"]
    assert [d["kind"] for d in doc["root_cause_details"]] == ["unreachable", "finding"]
    assert doc["lowest_broken_layer"] == "rke2"


@pytest.mark.slow
def test_without_its_connectivity_rule_the_first_fault_on_a_host_accounts_for_the_later_ones_in_words(pytester, suite):
    pytester.makeconftest(CONFTEST)
    suite("host", HEADER +
          "@pytest.mark.rule('ADR-0002.host-static-ip')\ndef test_static(host_target):\n    pass\n\n"
          "@pytest.mark.rule('ADR-0002.host-driver')\n@pytest.mark.gpu\ndef test_driver():\n"
          f"    {SSH_FAULT}\n\n"
          "@pytest.mark.rule('ADR-0001.rke2-service')\n@pytest.mark.gpu\ndef test_service():\n"
          f"    {SSH_FAULT}\n")
    result = pytester.runpytest(*SITE_ARGS, "-v", "-m", "gpu")
    result.stdout.fnmatch_lines(["*test_driver ERROR*", "*test_service BLOCKED*"])
    got = outcomes_by_test(results(pytester))
    assert got["test_service"] == ("blocked", (
        "blocked by ADR-0002.host-driver (ssh:gpu-01 unreachable: the same fault, which ADR-0002.host-driver met "
        "first; ADR-0002.host-static-ip, which owns reaching it, did not run): gpu-01 (10.0.0.21:22): cannot read "
        "the host over SSH: nothing accepts SSH connections on that address and port"))


@pytest.mark.slow
def test_the_real_suites_reach_each_target_through_its_owner_first_and_keep_every_rule_after_its_prerequisites(
        pytester):
    from pytest_dgxspark.catalog.rules import load_catalog, rule_of
    from tests.conftest import REPO

    rec = pytester.inline_run(str(REPO / "suites"), "--collect-only", "--testbed", "healthy", "--rootdir", str(REPO),
                              "-p", "no:cacheprovider")
    items = rec.getcalls("pytest_collection_finish")[0].session.items  # in run order
    names = [f"{i.path.name}::{i.name}" for i in items]
    assert names[0] == "test_host_static_ip.py::test_inventory_address_is_configured_statically[gpu-01]"
    first_api = next(i for i, n in enumerate(names) if n.startswith("test_kubeconfig_context.py"))
    assert next(i for i, n in enumerate(names) if n.startswith("test_rke2_service.py")) < first_api
    readers = ("test_node_internal_ip_is_the_inventory_address", "test_exactly_one_driver_source")
    assert all(first_api < i for i, n in enumerate(names) if any(r in n for r in readers))
    catalog = load_catalog()
    positions: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        if rule_of(item) is not None:  # forecast checks are no rule's tests (catalog/beyond.yaml, advisory)
            positions.setdefault(rule_of(item), []).append(index)
    for rid, where in positions.items():
        for ancestor in catalog.ancestors(rid):
            assert max(positions.get(ancestor, [-1])) < min(where), f"{ancestor} must run before {rid}"


@pytest.mark.slow
def test_a_symptom_of_a_failed_service_is_blocked_as_it_happens_never_shown_failed(pytester, suite):
    suite("rke2", "@pytest.fixture(params=['gpu-01'], ids=['gpu-01'])\ndef host(request):\n    return request.param\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service(host):\n"
                  "    assert False, 'gpu-01: rke2-server.service is inactive (failed)'\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_config(host):\n"
                  "    assert False, 'config.yaml missing'\n")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    result.stdout.fnmatch_lines(["*test_service[[]gpu-01[]] FAILED*", "*test_config[[]gpu-01[]] BLOCKED*",
                                 "*1 failed, 1 blocked*"])
    assert outcomes_by_test(results(pytester))["test_config[gpu-01]"] == (
        "blocked", "blocked by ADR-0001.rke2-service (its symptom): config.yaml missing")
    assert junit_status(pytester)["test_config[gpu-01]"] == "blocked"
