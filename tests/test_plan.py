"""The run plan: every bad option, ini key, site or governance file is a usage error before any target is touched."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import alias_bomb
from tests.pytester_args import SITE_ARGS

# A test that would prove a target was touched: a usage error must stop the run before it.
TOUCH = "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched a target')\n"


def usage_error(result: pytest.RunResult, *lines: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert "touched a target" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(list(lines))


def site_dir(pytester: pytest.Pytester) -> Path:
    return pytester.path / "sites" / "tirosh-home"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "*kubeconfig.yml: empty; expected a kubeconfig (apiVersion: v1, kind: Config, clusters, contexts, users)"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "*kubeconfig.yml: not UTF-8 text (byte 0x89 at offset 0); save the file as UTF-8"),
        (b"just-a-word\n", "*kubeconfig.yml: top level is a str; expected a kubeconfig*"),
        (b"clusters: [\n", "*kubeconfig.yml: while parsing a flow node*"),
        (b"apiVersion: v1\nkind: Config\ncontexts: []\n",
         "*kubeconfig.yml: contexts: no entry named 'tirosh-home/rke2/gpu' (found: none)"),
    ],
    ids=["empty", "binary-garbage", "bare-scalar", "invalid-yaml", "no-such-context"],
)
def test_a_kubeconfig_that_cannot_serve_the_context_is_a_usage_error(pytester, suite, content, message):
    suite("host", TOUCH)
    (pytester.path / "kubeconfig.yml").write_bytes(content)
    result = pytester.runpytest(*SITE_ARGS, "--dgxspark-kubeconfig", "kubeconfig.yml")
    usage_error(result, "ERROR: invalid run input:", message)


def test_a_kubeconfig_whose_context_names_a_missing_cluster_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "kubeconfig.yml").write_text(
        "apiVersion: v1\nkind: Config\ncontexts:\n- name: tirosh-home/rke2/gpu\n  context: {cluster: gpu, user: admin}\n"
        "clusters: []\nusers:\n- name: admin\n  user: {token: abc}\n")
    result = pytester.runpytest(*SITE_ARGS, "--dgxspark-kubeconfig", "kubeconfig.yml")
    usage_error(result, "*kubeconfig.yml: clusters: no entry named 'gpu' (found: none)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--dgxspark-cuda-timeout", "-5"), "--dgxspark-cuda-timeout: expected a whole number of seconds from 10 to 3600, got -5"),
        (("--dgxspark-smi-timeout", "0"), "--dgxspark-smi-timeout: expected a whole number of seconds from 1 to 600, got 0"),
        (("-o", "dgxspark_smi_timeout=soon"), "ini dgxspark_smi_timeout: expected a whole number of seconds from 1 to 600, got 'soon'"),
        (("--dgxspark-command-timeout", "0"),
         "--dgxspark-command-timeout: expected a whole number of seconds from 1 to 3600, got 0"),
        (("--dgxspark-cuda-timeout", "999999999999"),
         "--dgxspark-cuda-timeout: expected a whole number of seconds from 10 to 3600, got 999999999999"),
        (("--dgxspark-deadline", "5"), "--dgxspark-deadline: expected a whole number of seconds from 10 to 86400, got 5"),
        (("-o", "dgxspark_deadline=9999999"),
         "ini dgxspark_deadline: expected a whole number of seconds from 10 to 86400, got 9999999"),
    ],
    ids=["negative-cuda", "zero-smi", "ini-words", "zero-command", "huge-cuda", "short-deadline", "huge-deadline-ini"],
)
def test_a_timeout_outside_its_documented_range_is_a_usage_error(pytester, suite, args, message):
    suite("host", TOUCH)
    usage_error(pytester.runpytest(*SITE_ARGS, *args), "ERROR: invalid run input:", message)


def test_a_run_date_that_is_no_calendar_day_is_a_usage_error_before_any_target(pytester, suite):
    # it was read by the forecast's fixture alone: the run went against its targets and the forecast said unreadable
    suite("host", TOUCH)
    usage_error(pytester.runpytest(*SITE_ARGS, "--dgxspark-run-date", "2027-02-30"), "ERROR: invalid run input:",
                "--dgxspark-run-date '2027-02-30': expected a calendar day as YYYY-MM-DD (e.g. 2027-02-28)")


def test_an_inventory_host_without_ansible_host_is_a_usage_error_not_an_address(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "inv.yml").write_text("all:\n  children:\n    rke2_servers:\n      hosts:\n        gpu-01:\n"
                                           "          ansible_user: root\n")
    result = pytester.runpytest(*SITE_ARGS, "--dgxspark-inventory", "inv.yml")
    usage_error(result, "inv.yml: host gpu-01: ansible_host is missing; expected the host's address (the alias 'gpu-01' "
                        "is not used as an address)")


def test_inventory_typos_are_usage_errors_with_a_did_you_mean(pytester, suite):
    suite("host", TOUCH)
    inventory = site_dir(pytester) / "inventory.yml"
    inventory.write_text(inventory.read_text().replace("ansible_user: root", "ansible_user: root\n          ansible_hots: 10.0.0.9")
                         .replace("rke2_servers:", "rke2_servers:\n      hosts: {}\n    rke2_server:\n      hosts: {gpu-02: {ansible_host: 10.0.0.2}}\n    x:", 1))
    result = pytester.runpytest(*SITE_ARGS)
    usage_error(result,
                "*inventory.yml: all.children.rke2_server: not a group the suite reads (expected rke2_servers or "
                "rke2_agents); did you mean 'rke2_servers'?",
                "*inventory.yml: all.children.x.hosts.gpu-01.ansible_hots: not an Ansible connection variable; "
                "did you mean 'ansible_host'?")


def test_a_yaml_alias_bomb_is_refused_fast_naming_the_file(pytester, suite):
    suite("host", TOUCH)
    (site_dir(pytester) / "waivers.yml").write_text(alias_bomb())
    started = time.monotonic()
    result = pytester.runpytest(*SITE_ARGS)
    assert time.monotonic() - started < 10
    usage_error(result, "*waivers.yml: expands to more than 200000 nodes through aliases at line * (a YAML alias bomb?)")


def test_a_site_file_that_is_not_utf8_is_a_usage_error_naming_it(pytester, suite):
    suite("host", TOUCH)
    vars_file = site_dir(pytester) / "rke2" / "vars.yml"
    vars_file.write_bytes(vars_file.read_bytes() + "# caf\u00e9\n".encode("latin-1"))
    result = pytester.runpytest(*SITE_ARGS)
    usage_error(result, "*sites/tirosh-home/rke2/vars.yml: not UTF-8 text (byte 0xe9 at offset *); save the file as UTF-8")


WAIVER = ("waivers:\n- rule: ADR-0002.host-driver\n  reason: vendor fix pending\n  approver: {approver}\n"
          "  role: head of platform\n  ticket: OPS-1\n  expires: {expires}\n  site_digest: sha256:" + "0" * 64 + "\n")


def test_an_impossible_waiver_date_is_a_usage_error_naming_file_and_key(pytester, suite):
    suite("host", TOUCH)
    (site_dir(pytester) / "waivers.yml").write_text(WAIVER.format(approver="Kim", expires="2027-02-30"))
    usage_error(pytester.runpytest(*SITE_ARGS),
                "*waivers.yml: waivers.0.expires: '2027-02-30' is not a date (YYYY-MM-DD)")


def test_a_blank_approver_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (site_dir(pytester) / "waivers.yml").write_text(WAIVER.format(approver="'  '", expires="2027-01-31"))
    usage_error(pytester.runpytest(*SITE_ARGS), "*waivers.yml: waivers.0.approver: blank; expected who/what, in words")


def test_an_attestation_dated_in_the_future_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (site_dir(pytester) / "manual-checks.yml").write_text(
        "checks:\n- id: ups\n  title_en: UPS\n  title_ko: UPS\n  attester: Kim\n  date: 2099-01-01\n"
        "- id: rack\n  title_en: Rack\n  title_ko: Rack\n  attester: ' '\n  date: 2025-01-01\n")
    usage_error(pytester.runpytest(*SITE_ARGS),
                "*manual-checks.yml: checks.0.date: 2099-01-01 is in the future (today is *); "
                "an attestation is dated when it was made",
                "*manual-checks.yml: checks.1.attester: blank; expected the name of who attested it")


def _baseline(pytester: pytest.Pytester, **changes: object) -> Path:
    doc = {"schema": "pytest-dgxspark/results/v1", "run": {"id": "x", "site": "tirosh-home"}, "rules": [],
           "provenance": {}}
    for key, value in changes.items():
        if key == "site":
            doc["run"]["site"] = value
        else:
            doc[key] = value
    path = pytester.path / "baseline.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"site": "other-hospital"}, "--dgxspark-baseline *baseline.json: a run of site 'other-hospital', this run checks "
                                     "'tirosh-home'; give a baseline of this site or --dgxspark-baseline-force"),
        ({"schema": "pytest-dgxspark/results/v0"},
         "--dgxspark-baseline *baseline.json: schema 'pytest-dgxspark/results/v0', this run writes "
         "'pytest-dgxspark/results/v1'; give a baseline of this schema or --dgxspark-baseline-force"),
    ],
    ids=["other-site", "other-schema"],
)
def test_a_baseline_of_another_site_or_schema_is_refused_unless_forced(pytester, suite, changes, message):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    pass\n")
    baseline = _baseline(pytester, **changes)
    usage_error(pytester.runpytest(*SITE_ARGS, "--dgxspark-baseline", str(baseline)), message)
    forced = pytester.runpytest(*SITE_ARGS, "--dgxspark-baseline", str(baseline), "--dgxspark-baseline-force")
    assert forced.ret != pytest.ExitCode.USAGE_ERROR
    assert json.loads((pytester.path / "out" / "latest" / "results.json").read_text())["drift"] is not None


@pytest.mark.parametrize("option", ["--dgxspark-kubeconfig", "--dgxspark-inventory", "--dgxspark-ssh-config"])
def test_testbed_with_target_options_is_a_usage_error(pytester, suite, option):
    suite("host", TOUCH)
    (pytester.path / "f.yml").write_text("x: 1\n")
    result = pytester.runpytest(*SITE_ARGS, "--testbed", "healthy", option, "f.yml")
    usage_error(result, f"--testbed healthy supplies its own kubeconfig, inventory and ssh_config: drop {option} "
                        "(or drop --testbed to check a real site)")


def test_a_report_dir_that_cannot_be_written_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "afile").write_text("")
    result = pytester.runpytest("--site", "sites/tirosh-home", "--report-dir", "afile/reports", "-p", "no:cacheprovider")
    usage_error(result, "--report-dir */afile/reports: cannot be written (Not a directory); "
                        "expected a directory this user can create files in")


def test_a_billion_laughs_scenario_file_is_a_usage_error_naming_the_file(pytester, suite):
    suite("host", TOUCH)
    scenario = pytester.path / "bomb" / "scenario.yaml"
    scenario.parent.mkdir()
    scenario.write_text("description: an alias bomb\nextends: healthy\n" + alias_bomb())
    started = time.monotonic()
    result = pytester.runpytest(*SITE_ARGS, "--testbed", "bomb")
    assert time.monotonic() - started < 10
    usage_error(result, f"--testbed bomb: {scenario}: expands to more than 200000 nodes through aliases at line * "
                        "(a YAML alias bomb?)")


def test_an_unknown_scenario_is_a_usage_error_listing_the_bundled_ones(pytester, suite):
    suite("host", TOUCH)
    result = pytester.runpytest(*SITE_ARGS, "--testbed", "nosuch")
    usage_error(result, "--testbed nosuch: scenario 'nosuch': not a bundled scenario (airgap, *healthy*) nor a directory "
                        "holding scenario.yaml")


SHOW_SITE = ("@pytest.mark.rule('ADR-0001.site-layout')\ndef test_layout(site):\n"
             "    print('SITE', site.name, site.root)\n")


@pytest.mark.slow
def test_a_scenario_carrying_its_own_site_uses_it_unless_site_is_given(pytester, suite):
    suite("site", SHOW_SITE)
    own = pytester.runpytest("--testbed", "airgap-mirror-missing", "--report-dir", "out", "-p", "no:cacheprovider", "-s")
    # the scenario's copy of the site takes the site's name (its context's), read from the scenario's own folder
    own.stdout.fnmatch_lines(["*SITE tirosh-home */scenarios/airgap-mirror-missing/site*"])
    doc = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    assert doc["run"]["site_source"] == "scenario airgap-mirror-missing"
    given = pytester.runpytest("--testbed", "airgap-mirror-missing", *SITE_ARGS, "-s")
    given.stdout.fnmatch_lines(["*SITE tirosh-home *sites/tirosh-home*"])
    doc = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    assert doc["run"]["site_source"] == "--site"


def test_every_problem_is_listed_in_one_usage_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "kubeconfig.yml").write_text("")
    result = pytester.runpytest(*SITE_ARGS, "--dgxspark-kubeconfig", "kubeconfig.yml", "--dgxspark-smi-timeout", "0")
    usage_error(result, "ERROR: invalid run input:",
                "--dgxspark-smi-timeout: expected a whole number of seconds from 1 to 600, got 0",
                "*kubeconfig.yml: empty;*")


@pytest.mark.slow
def test_make_demo_of_an_unknown_scenario_fails_and_never_prints_an_earlier_verdict(tmp_path):
    import subprocess

    from tests.conftest import REPO

    earlier = tmp_path / "reports" / "20260101T000000Z-abcdef"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text(json.dumps({"verdict": "ACCEPTED", "run": {"simulated": True},
                                                       "root_causes": []}))
    (tmp_path / "reports" / "latest").symlink_to(earlier.name)
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "demo", "SCENARIO=nosuch", f"REPORT_DIR={tmp_path / 'reports'}"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2  # make's own status for any failed recipe; pytest's is named below
    assert "verdict:" not in proc.stdout + proc.stderr
    assert "--testbed nosuch: scenario 'nosuch': not a bundled scenario (airgap, " in proc.stderr
    assert "demo: this run wrote no bundle (pytest exit 4)" in proc.stderr


# A stand-in for pytest: writes an INCOMPLETE bundle's results.json under --report-dir and exits 8, as a run would.
FAKE_PYTEST = """#!/bin/sh
while [ "$1" != "--report-dir" ]; do shift; done
mkdir -p "$2/20260101T000000Z-fake" && ln -sfn 20260101T000000Z-fake "$2/latest"
echo '{"verdict": "INCOMPLETE", "run": {"simulated": true}, "root_causes": []}' > "$2/latest/results.json"
exit 8
"""


def test_make_demo_names_pytests_own_status_and_exits_2_for_any_failure(tmp_path):
    import subprocess

    from tests.conftest import REPO

    fake = tmp_path / "pytest"
    fake.write_text(FAKE_PYTEST)
    fake.chmod(0o755)
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "demo", f"PYTEST={fake}", f"REPORT_DIR={tmp_path / 'reports'}"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.splitlines()[-2:] == ["verdict: INCOMPLETE (SIMULATED) | root causes: none", "demo: pytest exit 8"]
    assert proc.returncode == 2
    assert "demo] Error 8" in proc.stderr


def test_a_kubeconfig_environment_value_naming_no_file_is_a_usage_error(pytester, suite, monkeypatch):
    suite("host", TOUCH)
    (pytester.path / "sites" / "tirosh-home" / "rke2" / "kubeconfig.yml").unlink()  # the site's own comes first
    monkeypatch.setenv("KUBECONFIG", str(pytester.path / "gone.yml") + ":/elsewhere")
    usage_error(pytester.runpytest(*SITE_ARGS),
                "$KUBECONFIG */gone.yml: kubeconfig not found (give --dgxspark-kubeconfig or run make rke2/kubeconfig)")


@pytest.mark.parametrize(("args", "site_option"), [(["SCENARIO=airgap-mirror-missing"], False),
                                                    (["SCENARIO=airgap-mirror-missing", "SITE=tirosh-home"], True)])
def test_make_demo_passes_site_only_when_site_is_given(args, site_option):
    import subprocess

    from tests.conftest import REPO

    env = {k: v for k, v in __import__("os").environ.items() if k != "SITE"}
    dry = subprocess.run(["make", "-n", "-s", "-C", str(REPO), "demo", *args], capture_output=True, text=True,
                         timeout=60, check=True, env=env).stdout
    line = next(ln for ln in dry.splitlines() if "--testbed airgap-mirror-missing" in ln)
    assert ("--site sites/tirosh-home" in line) is site_option


def test_an_alias_bomb_inside_values_content_is_refused_naming_the_key(pytester, suite):
    suite("host", TOUCH)
    chart = site_dir(pytester) / "rke2" / "gpu-operator.helmchart.yaml"
    text = chart.read_text()
    chart.write_text(text[:text.index("  valuesContent: |-")] + "  valuesContent: |-\n" + alias_bomb("    "))
    usage_error(pytester.runpytest(*SITE_ARGS),
                "*gpu-operator.helmchart.yaml: spec.valuesContent: not YAML values: expands to more than 200000 nodes "
                "through aliases at line * (a YAML alias bomb?)")


def test_a_site_key_the_schema_does_not_know_gets_a_did_you_mean(pytester, suite):
    suite("host", TOUCH)
    inventory = site_dir(pytester) / "inventory.yml"
    inventory.write_text(inventory.read_text().replace("dgxspark_gpu: true", "dgxspark_gpus: true"))
    vars_file = site_dir(pytester) / "rke2" / "vars.yml"
    vars_file.write_text(vars_file.read_text() + "rke2_tls_sans: [gpu.local]\n")
    usage_error(pytester.runpytest(*SITE_ARGS),
                "*rke2/vars.yml: (top level): Additional properties are not allowed ('rke2_tls_sans' was unexpected); "
                "did you mean 'rke2_tls_sans' -> 'rke2_tls_san'?",
                "*inventory.yml: all.children.rke2_servers.hosts.gpu-01: 'dgxspark_gpus' does not match any of the "
                "regexes: '^ansible_*'; did you mean 'dgxspark_gpus' -> 'dgxspark_gpu'?")  # fnmatch: no [a-z]
