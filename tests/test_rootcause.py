"""Root causes an engineer would sign: target faults are never findings, causes before symptoms, statuses as data."""
from __future__ import annotations

import json

import pytest

from pytest_dgxspark.catalog.rules import load_catalog
from tests.pytester_args import SITE_ARGS

EXIT_INCOMPLETE = 8
IMPORTS = ("from pytest_dgxspark.checking import TargetError\n"
           "from pytest_dgxspark.targets.causes import SSH_CAUSES, API_CAUSES\n\n")


def results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


def statuses(doc: dict) -> dict[str, str]:
    return {r["id"]: r["status"] for r in doc["rules"]}


def rule(doc: dict, rid: str) -> dict:
    return next(r for r in doc["rules"] if r["id"] == rid)


def all_rules(body_for: dict[str, str], imports: str = "") -> str:
    parts = [imports]
    for i, r in enumerate(load_catalog().ordered()):
        parts.append(f"@pytest.mark.rule('{r.id}')\ndef test_{i}():\n    {body_for.get(r.id, 'pass')}\n")
    return "\n".join(parts)


def ssh_fault(cause: str, host: str = "gpu-01") -> str:
    return (f"raise TargetError('{host} (10.0.0.21:22): cannot read the host over SSH: ' + SSH_CAUSES['{cause}'].meaning,"
            f" target='ssh:{host}', cause=SSH_CAUSES['{cause}'])")


API = "api:tirosh-home/rke2/gpu"


def api_fault(cause: str) -> str:
    return f"raise TargetError('API: ' + API_CAUSES['{cause}'].meaning, target='{API}', cause=API_CAUSES['{cause}'])"


def host_checks(driver: str, nvml: str | None = None, prelude: str = "") -> str:
    """suites/host source: host-driver's test_driver (and host-nvml's test_nvml) with these bodies (4-space lines)."""
    source = prelude + f"@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    {driver}\n"
    if nvml is not None:
        source += f"\n@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_nvml():\n    {nvml}\n"
    return source


@pytest.mark.slow
def test_an_ssh_drop_mid_run_is_incomplete_with_the_cause_and_its_fix_never_rejected(pytester, suite):
    suite("all", all_rules({"ADR-0002.host-nvml": ssh_fault("dropped"),
                            "ADR-0001.rke2-service": ssh_fault("dropped")}, IMPORTS))
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == EXIT_INCOMPLETE
    # the second fault on gpu-01 is BLOCKED as it happens, as results.json has it
    assert " 1 error, 1 blocked" in result.stdout.str() and "ERROR at call of test_" in result.stdout.str()
    assert "FAILED" not in result.stdout.str()  # a target fault is never shown as a check's failure
    doc = results(pytester)
    assert doc["verdict"] == "INCOMPLETE"
    assert statuses(doc)["ADR-0002.host-nvml"] == "error"
    assert statuses(doc)["ADR-0001.rke2-service"] == "blocked"  # the same target's fault: one cause, not two
    assert doc["lowest_broken_layer"] is None  # only judged failures name a layer
    nvml = next(d for d in doc["root_cause_details"] if d["rule"] == "ADR-0002.host-nvml")
    assert nvml["kind"] == "unreachable" and nvml["target"] == "ssh:gpu-01" and nvml["cause"] == "dropped"
    assert nvml["fix"].startswith("Check the host's sshd log")
    assert "NVML" not in nvml["fix"]
    assert rule(doc, "ADR-0002.host-nvml")["tests"][0]["cause"] == "dropped"


@pytest.mark.slow
def test_an_unknown_host_key_names_the_key_fix_not_netplan_advice(pytester, suite):
    suite("all", all_rules({"ADR-0002.host-static-ip": ssh_fault("host-key-unknown"),
                            "ADR-0002.host-driver": ssh_fault("host-key-unknown")}, IMPORTS))
    result = pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert statuses(doc)["ADR-0002.host-static-ip"] == "error"
    assert statuses(doc)["ADR-0002.host-driver"] == "blocked"
    assert rule(doc, "ADR-0002.host-driver")["blocked_by"] == ["ADR-0002.host-static-ip"]
    [detail] = doc["root_cause_details"]
    assert detail["cause"] == "host-key-unknown"
    assert "known_hosts" in detail["fix"] and "netplan" not in detail["fix"]
    assert "known_hosts" in detail["fix_ko"]
    result.stdout.fnmatch_lines([
        "dgxspark: INCOMPLETE, scope: full",
        "  lowest broken layer: none",
        "  root causes:",
        "    ADR-0002.host-static-ip (unreachable, ssh:gpu-01): gpu-01 (10.0.0.21:22): cannot read the host over SSH: "
        "the host's SSH key is not in known_hosts, so the host's identity cannot be verified",
        "      fix: Compare the host key fingerprint on the console*",
    ])


@pytest.mark.slow
def test_a_raw_client_exception_escaping_a_check_is_an_api_error_not_a_finding(pytester, suite):
    refused = ("raise __import__('urllib3').exceptions.MaxRetryError(None, '/api/v1/pods', "
               "ConnectionRefusedError(111, 'Connection refused'))")
    suite("all", all_rules({"ADR-0002.cuda-sample": refused}))
    result = pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    cuda = rule(doc, "ADR-0002.cuda-sample")
    assert cuda["status"] == "error"
    assert cuda["tests"][0]["message"].startswith(
        "Kubernetes API of context 'tirosh-home/rke2/gpu': cannot read: nothing accepts connections on the API server "
        "address (MaxRetryError")
    assert cuda["tests"][0]["cause"] == "refused"
    assert doc["verdict"] == "INCOMPLETE" and doc["lowest_broken_layer"] is None
    assert "Traceback" not in result.stdout.str() and "urllib3/" not in result.stdout.str()


@pytest.mark.slow
def test_api_errors_name_no_layer_and_carry_the_api_fix(pytester, suite):
    suite("all", all_rules({"ADR-0001.kubeconfig-context": api_fault("server-error"),
                            "ADR-0002.operator-components": api_fault("server-error"),
                            "ADR-0002.host-driver": api_fault("server-error")}, IMPORTS))
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert doc["root_causes"] == ["ADR-0001.kubeconfig-context"]
    assert doc["lowest_broken_layer"] is None
    assert doc["root_cause_details"][0]["fix"].startswith("Read the kube-apiserver and etcd logs")
    assert statuses(doc)["ADR-0002.host-driver"] == "blocked"


@pytest.mark.slow
def test_rke2_server_down_on_a_single_server_site_is_the_one_root_cause(pytester, suite):
    source = IMPORTS + (
        "@pytest.fixture(params=['gpu-01'], ids=['gpu-01'])\ndef host(request):\n    return request.param\n\n"
        "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service(host):\n"
        "    assert False, 'gpu-01: rke2-server.service is inactive (failed)'\n\n"
        f"@pytest.mark.rule('ADR-0001.kubeconfig-context')\ndef test_api():\n    {api_fault('refused')}\n\n"
        f"@pytest.mark.rule('ADR-0002.helmchart-live')\ndef test_live():\n    {api_fault('refused')}\n\n"
        "@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_config():\n    assert False, 'config.yaml missing'\n")
    suite("rke2", source)
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == 1
    doc = results(pytester)
    st = statuses(doc)
    assert st["ADR-0001.rke2-service"] == "failed"
    assert st["ADR-0001.kubeconfig-context"] == "blocked"
    assert rule(doc, "ADR-0001.kubeconfig-context")["blocked_by"] == ["ADR-0001.rke2-service"]
    assert st["ADR-0001.rke2-config"] == "blocked"  # config.yaml missing: a symptom of no RKE2
    assert rule(doc, "ADR-0001.rke2-config")["tests"][0]["message"] == (
        "blocked by ADR-0001.rke2-service (its symptom): config.yaml missing")
    assert doc["root_causes"] == ["ADR-0001.rke2-service"]
    assert doc["lowest_broken_layer"] == "rke2"
    assert doc["root_cause_details"][0]["fix"].startswith("Check `systemctl status rke2-server`")


@pytest.mark.slow
def test_a_site_hygiene_finding_does_not_block_the_manifest_or_the_gpu_chain(pytester, suite):
    suite("all", all_rules({"ADR-0001.site-layout": "assert False, 'sites/tirosh-home/rke2/kubeconfig.yml is committed'",
                            "ADR-0002.image-mirror": "pass"}))
    pytester.runpytest(*SITE_ARGS)
    st = statuses(results(pytester))
    assert st["ADR-0001.site-layout"] == "failed"
    assert [rid for rid, s in st.items() if s == "blocked"] == []
    assert st["ADR-0002.helmchart-manifest"] == "passed" and st["ADR-0002.cuda-sample"] == "passed"


@pytest.mark.slow
def test_image_mirror_is_not_applicable_on_a_site_that_is_not_air_gapped_even_when_its_prerequisite_broke(pytester, suite):
    suite("all", all_rules({"ADR-0002.helmchart-live": "assert False, 'helm-install job failed'",
                            "ADR-0002.image-mirror": "raise SystemExit('must not run')"}))
    result = pytester.runpytest(*SITE_ARGS, "-v")
    doc = results(pytester)
    mirror = rule(doc, "ADR-0002.image-mirror")
    assert mirror["status"] == "not-applicable" and mirror["blocked_by"] == []
    assert mirror["tests"][0]["message"].startswith("ADR-0002.image-mirror applies only when the site is air-gapped")
    assert statuses(doc)["ADR-0002.operator-running"] == "blocked"
    result.stdout.fnmatch_lines(["*::test_* N/A*", "*::test_* BLOCKED*"])


@pytest.mark.slow
def test_blocked_and_not_applicable_are_data_on_the_item_never_parsed_from_a_skip_message(pytester, suite):
    suite("host", host_checks("pytest.skip('blocked by ADR-0002.host-static-ip')",
                              "pytest.skip('not applicable: looks like one')"))
    result = pytester.runpytest(*SITE_ARGS, "-rA")
    doc = results(pytester)
    driver, nvml = rule(doc, "ADR-0002.host-driver"), rule(doc, "ADR-0002.host-nvml")
    assert driver["tests"][0]["outcome"] == "skipped" and driver["blocked_by"] == []
    assert nvml["tests"][0]["outcome"] == "skipped"
    result.stdout.fnmatch_lines(["*2 skipped*"])


@pytest.mark.slow
def test_blocked_tests_have_their_own_letter_and_word(pytester, suite):
    suite("host", host_checks("assert False, 'no module'", "pass"))
    result = pytester.runpytest(*SITE_ARGS)
    result.stdout.fnmatch_lines(["suites/host/test_host.py FB *", "*1 failed, 1 blocked*"])
    result = pytester.runpytest(*SITE_ARGS, "-v")
    result.stdout.fnmatch_lines(["*test_nvml BLOCKED*"])


@pytest.mark.slow
def test_a_required_rule_is_never_not_applicable_argocd_without_a_management_cluster_is_not_verifiable(pytester, suite):
    suite("all", all_rules({"ADR-0001.argocd-registered":
                            "not_applicable('sites/tirosh-home/rke2/vars.yml names no Argo CD management cluster')"}))
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == EXIT_INCOMPLETE
    doc = results(pytester)
    argo = rule(doc, "ADR-0001.argocd-registered")
    assert argo["status"] == "error"
    assert argo["tests"][0]["outcome"] == "not-applicable"  # the test as the terminal and junit show it; the rule errs
    assert doc["not_judged"][0]["message"] == (
        "not verifiable: sites/tirosh-home/rke2/vars.yml names no Argo CD management cluster (the ADR requires this "
        "rule; it cannot be not applicable)")
    assert doc["verdict"] == "INCOMPLETE"
    assert doc["root_causes"] == [] and doc["not_judged"][0]["kind"] == "not-verifiable"  # never a root cause
    assert doc["lowest_broken_layer"] is None


@pytest.mark.slow
def test_an_informational_rule_is_recorded_never_passed(pytester, suite):
    suite("rke2", "@pytest.mark.rule('ADR-0001.hardening-baseline')\ndef test_baseline():\n    pass\n")
    result = pytester.runpytest(*SITE_ARGS, "-v")
    assert statuses(results(pytester))["ADR-0001.hardening-baseline"] == "recorded"
    result.stdout.fnmatch_lines(["*test_baseline RECORDED*", "*1 recorded*"])


@pytest.mark.slow
def test_results_carry_the_checks_words_never_assertion_introspection(pytester, suite):
    suite("host", host_checks("r = R()\n    assert r.rc == 0, 'gpu-01: nvidia-smi is not installed (exit 127)'",
                              "r = R()\n    assert r.rc == 0", prelude="class R:\n    rc = 127\n\n"))
    result = pytester.runpytest(*SITE_ARGS, "--dgxspark-no-block")
    doc = results(pytester)
    assert rule(doc, "ADR-0002.host-driver")["tests"][0]["message"] == "gpu-01: nvidia-smi is not installed (exit 127)"
    assert rule(doc, "ADR-0002.host-nvml")["tests"][0]["message"] == "assert 127 == 0"
    assert "object at 0x" not in json.dumps(doc)
    assert result.ret == 1


@pytest.mark.slow
def test_results_expose_remediation_in_english_and_korean(pytester, suite):
    suite("host", host_checks("pass"))
    pytester.runpytest(*SITE_ARGS)
    driver = rule(results(pytester), "ADR-0002.host-driver")
    assert driver["remediation"].startswith("A host problem, not an RKE2 one")
    assert driver["remediation_ko"].startswith("RKE2가 아니라 호스트 문제다")


@pytest.mark.slow
def test_exit_status_follows_the_verdict(pytester, suite):
    suite("host", host_checks("assert False, 'no module'"))
    assert pytester.runpytest(*SITE_ARGS).ret == 1
    suite("host", host_checks("pass"))
    assert pytester.runpytest(*SITE_ARGS).ret == EXIT_INCOMPLETE  # 29 rules untested


@pytest.mark.slow
def test_a_check_failure_shows_a_short_traceback_and_no_plugin_frames(pytester, suite):
    suite("host", host_checks("helper(2)", prelude="def helper(x):\n    assert x == 1, 'gpu-01: no nvidia module loaded'\n\n"))
    text = pytester.runpytest(*SITE_ARGS).stdout.str()
    assert "suites/host/test_host.py:9: in test_driver" in text
    assert "pytest_dgxspark/" not in text.split("short test summary")[0].split("FAILURES")[-1]
    assert "def test_driver():" not in text  # short form: no whole function source
    text = pytester.runpytest(*SITE_ARGS, "--tb=long").stdout.str()
    assert "def test_driver():" in text


@pytest.mark.slow
def test_a_failed_rke2_unit_leaves_its_config_judged(pytester, suite):
    suite("rke2", "@pytest.fixture(params=['gpu-01'], ids=['gpu-01'])\ndef host(request):\n    return request.param\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service(host):\n"
                  "    assert False, 'gpu-01: rke2-server.service is failed'\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_config(host):\n    pass\n\n"
                  "@pytest.mark.rule('ADR-0001.node-ready')\ndef test_ready(host):\n    pass\n")
    pytester.runpytest(*SITE_ARGS)
    st = statuses(results(pytester))
    assert st["ADR-0001.rke2-config"] == "passed"  # symptom_of: judged anyway, a pass is a pass
    assert st["ADR-0001.node-ready"] == "blocked"  # depends_on: not judged


@pytest.mark.slow
def test_a_config_failure_on_another_host_than_the_failed_unit_is_its_own_finding(pytester, suite):
    suite("rke2", "@pytest.fixture(params=['gpu-01', 'gpu-02'], ids=['gpu-01', 'gpu-02'])\ndef host(request):\n"
                  "    return request.param\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-service')\ndef test_service(host):\n"
                  "    assert host != 'gpu-01', 'gpu-01: rke2-server.service not found'\n\n"
                  "@pytest.mark.rule('ADR-0001.rke2-config')\ndef test_config(host):\n"
                  "    assert False, f'{host}: config.yaml does not match vars.yml'\n")
    pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    outcomes = {t["nodeid"].split("[")[1][:-1]: t["outcome"] for t in rule(doc, "ADR-0001.rke2-config")["tests"]}
    assert outcomes == {"gpu-01": "blocked", "gpu-02": "failed"}
    assert doc["root_causes"] == ["ADR-0001.rke2-service", "ADR-0001.rke2-config"]


@pytest.mark.slow
def test_errors_of_a_target_whose_connectivity_rule_did_not_run_name_one_cause(pytester, suite):
    suite("host", IMPORTS + "".join(
        f"@pytest.mark.rule('{rid}')\ndef test_{i}():\n    {ssh_fault('dropped')}\n\n"
        for i, rid in enumerate(["ADR-0002.host-driver", "ADR-0002.driver-source", "ADR-0001.rke2-service"])))
    pytester.runpytest(*SITE_ARGS, "--dgxspark-no-block")
    doc = results(pytester)
    assert doc["root_causes"] == ["ADR-0002.host-driver"]
    assert [d["cause"] for d in doc["root_cause_details"]] == ["dropped"]
    assert rule(doc, "ADR-0001.rke2-service")["blocked_by"] == ["ADR-0002.host-driver"]
    assert rule(doc, "ADR-0001.rke2-service")["tests"][0]["message"].startswith(
        "blocked by ADR-0002.host-driver (ssh:gpu-01 unreachable: the same fault, which ADR-0002.host-driver met first; "
        "ADR-0002.host-static-ip, which owns reaching it, did not run): ")
