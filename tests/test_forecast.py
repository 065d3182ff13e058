"""The forecast (catalog/beyond.yaml): advisory rules apart from the 30, their checks, results.json forecast[], the
closing block's section, `forecast: enforce`, and the host forecasts' pure judgements."""
from __future__ import annotations

import json

import pytest

from pytest_dgxspark.catalog.rules import CatalogError, load_catalog
from pytest_dgxspark.judge.upkeep import driver_versions, pending_reboot, skew, unattended_enabled, unprotected
from pytest_dgxspark.probes.upkeep import Package, module_on_disk, parse_apt_config, parse_packages, parse_sections
from tests.conftest import REPO
from tests.pytester_args import SITE_ARGS
from tests.test_plugin import _all_rules_source

ADVISING = '''
@pytest.mark.forecast("SPARK.reboot-pending")
def test_reboot(forecast):
    forecast.advise("gpu-01: a reboot is pending for linux-image-6.17.0-1018-nvidia", target="ssh:gpu-01",
                    due="at the next reboot")


@pytest.mark.forecast("SPARK.unattended-upgrades-unheld")
def test_unattended(forecast):
    pass


@pytest.mark.forecast("SPARK.driver-version-skew")
def test_skew(forecast):
    raise __import__("pytest_dgxspark.checking").checking.TargetError("gpu-01: dpkg-query did not complete")
'''


def results(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "out" / "latest" / "results.json").read_text())


def test_the_catalog_keeps_the_30_rules_and_the_forecast_apart() -> None:
    catalog = load_catalog()
    assert len([rid for rid in catalog.rules if rid.startswith("ADR-")]) == 30
    assert not set(catalog.rules) & set(catalog.forecast)
    assert all(r.kind != "forecast" for r in catalog.rules.values())
    assert sorted(catalog.forecast) == ["SPARK.component-support", "SPARK.driver-version-skew", "SPARK.etcd-snapshots",
                                        "SPARK.gb10-memory-headroom", "SPARK.reboot-pending", "SPARK.rke2-certificates-expiry",
                                        "SPARK.unattended-upgrades-unheld"]
    assert {r.kind for r in catalog.forecast.values()} == {"forecast"}
    assert all(r.remediation and r.remediation_ko for r in catalog.forecast.values())


def test_an_adr_file_holding_a_spark_id_or_a_forecast_is_refused(tmp_path) -> None:
    text = (REPO / "pytest_dgxspark" / "catalog" / "adr-0001.yaml").read_text()
    bad = tmp_path / "adr-0001.yaml"
    bad.write_text(text.replace("- id: ADR-0001.site-layout", "- id: SPARK.site-layout", 1))
    with pytest.raises(CatalogError) as raised:
        load_catalog([bad])
    assert f"{bad}: entry 1 (SPARK.site-layout): the ids of beyond.yaml (rules beyond the ADRs) start with SPARK., " \
           "and only those" in str(raised.value)


@pytest.mark.slow
def test_an_advised_forecast_is_reported_apart_and_never_changes_the_verdict(pytester, suite) -> None:
    suite("all", _all_rules_source({"ADR-0002.image-mirror": "not_applicable('not air-gapped')"}))
    suite("host", ADVISING, name="test_forecast.py")
    result = pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert result.ret == 0 and doc["verdict"] == "ACCEPTED" and doc["root_causes"] == []
    assert len(doc["rules"]) == len(load_catalog()) and not any(r["id"] in load_catalog().forecast for r in doc["rules"])
    assert [(e["id"], e["status"], e["target"], e["due"]) for e in doc["forecast"]] == [
        ("SPARK.reboot-pending", "advised", "ssh:gpu-01", "at the next reboot"),
        ("SPARK.driver-version-skew", "unreadable", None, None)]
    assert doc["forecast"][0]["fix_ko"].startswith("다음 재부팅은")
    assert doc["forecast_checked"] == {"SPARK.reboot-pending": "advised", "SPARK.unattended-upgrades-unheld": "silent",
                                       "SPARK.driver-version-skew": "error"}  # the fourth has no test here
    start = result.outlines.index("  forecast (what will break next; advisory, the verdict does not count it):")
    assert result.outlines[start + 1] == ("    SPARK.reboot-pending [advised] (ssh:gpu-01, at the next reboot): gpu-01: a "
                                          "reboot is pending for linux-image-6.17.0-1018-nvidia")
    assert "suites/host/test_forecast.py::test_reboot ADVISED" in "\n".join(
        pytester.runpytest(*SITE_ARGS, "-v").outlines)


@pytest.mark.slow
def test_forecast_enforce_rejects_a_run_the_forecast_advises_on(pytester, suite) -> None:
    suite("all", _all_rules_source({"ADR-0002.image-mirror": "not_applicable('not air-gapped')"}))
    suite("host", ADVISING, name="test_forecast.py")
    vars_yml = pytester.path / "sites" / "tirosh-home" / "rke2" / "vars.yml"
    vars_yml.write_text(vars_yml.read_text() + "forecast: enforce\n")
    result = pytester.runpytest(*SITE_ARGS)
    doc = results(pytester)
    assert (result.ret, doc["verdict"], doc["forecast_mode"]) == (1, "REJECTED", "enforce")
    assert doc["verdict_reasons"][-1] == ("forecast: enforce (rke2/vars.yml) and the forecast advises "
                                          "SPARK.reboot-pending")


def test_a_forecast_check_with_a_rule_marker_or_an_unknown_id_is_a_usage_error(pytester, suite) -> None:
    suite("host", '@pytest.mark.forecast("SPARK.no-such")\ndef test_a(forecast):\n    pass\n\n'
                  '@pytest.mark.rule("ADR-0002.host-driver")\n@pytest.mark.forecast("SPARK.reboot-pending")\n'
                  'def test_b(forecast):\n    pass\n')
    result = pytester.runpytest(*SITE_ARGS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = "\n".join(result.errlines)
    assert ("suites/host/test_host.py::test_a: a forecast check has exactly one @pytest.mark.forecast(<id>) of "
            "catalog/beyond.yaml and no rule marker, got forecast ['SPARK.no-such'] and rule []") in text
    assert "test_b: a forecast check has exactly one" in text


def test_driver_versions_name_every_place_a_version_was_seen_and_skew_is_more_than_one() -> None:
    packages = parse_packages("ii \tnvidia-driver-580-open\t580.105.08-0ubuntu0.24.04.1\n"
                              "hi \tlibnvidia-compute-580\t580.95.05-0ubuntu0.24.04.1\n"
                              "rc \tnvidia-driver-575\t575.57.08-0ubuntu1\n"  # removed, config files only: ignored
                              "ii \tlinux-image-6.17.0-1014-nvidia\t6.17.0-1014.14\n")
    assert [(p.name, p.held) for p in packages] == [("nvidia-driver-580-open", False), ("libnvidia-compute-580", True),
                                                   ("linux-image-6.17.0-1014-nvidia", False)]
    versions = driver_versions("580.95.05", module_on_disk("/usr/bin/nvidia-smi\n/lib/modules/x/nvidia.ko\n580.105.08\n"),
                               {"/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.580.95.05": "580.95.05"}, packages)
    assert versions == {
        "loaded kernel module (/proc/driver/nvidia/version)": "580.95.05",
        "kernel module on disk (modinfo nvidia)": "580.105.08",
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.580.95.05": "580.95.05",
        "package nvidia-driver-580-open 580.105.08-0ubuntu0.24.04.1": "580.105.08",
        "package libnvidia-compute-580 580.95.05-0ubuntu0.24.04.1 (held)": "580.95.05"}
    assert skew(versions) and not skew({k: "580.95.05" for k in versions})


def test_a_pending_reboot_counts_only_for_kernel_and_nvidia_packages() -> None:
    files = parse_sections("### /var/run/reboot-required\n*** System restart required ***\n"
                           "### /var/run/reboot-required.pkgs\nlinux-image-4.4.0-98-generic\nlinux-base\nlinux-base\n")
    assert pending_reboot(files, ()) == ["linux-image-4.4.0-98-generic"]
    assert pending_reboot({"/var/run/reboot-required": "", "/var/run/reboot-required.pkgs": "libc6\n"}, ()) == []
    assert pending_reboot({}, ()) == []


def test_unattended_upgrades_expose_what_is_neither_held_nor_blacklisted() -> None:
    apt = parse_apt_config('APT::Periodic::Unattended-Upgrade "1";\nUnattended-Upgrade::Package-Blacklist "";\n'
                           'Unattended-Upgrade::Package-Blacklist:: "nvidia-";\n'
                           'Unattended-Upgrade::Package-Blacklist:: "libnvidia-";\n')
    assert unattended_enabled(apt) and not unattended_enabled({"APT::Periodic::Unattended-Upgrade": "0"})
    installed = (Package("nvidia-driver-580-open", "580.95.05-0ubuntu0.24.04.1", False),
                 Package("libnvidia-compute-580", "580.95.05-0ubuntu0.24.04.1", False),
                 Package("cuda-toolkit-13-0", "13.0.1-1", True),
                 Package("linux-image-6.17.0-1014-nvidia", "6.17.0-1014.14", False))
    assert unprotected(apt, installed) == {"kernel": ["linux-image-6.17.0-1014-nvidia"]}


def test_certificates_expiring_within_the_longest_shutdown_are_named_soonest_first_and_cas_left_out() -> None:
    import datetime

    from pytest_dgxspark.judge.upkeep import expiring
    from pytest_dgxspark.probes.upkeep import parse_certificate, parse_sections
    from pytest_dgxspark.testbed import pki

    files = pki.rke2_node_certs(server=True, days_left=12)
    text = "".join(f"### {path}\n{pem.decode()}" for path, pem in files.items())
    certs = {p: c for p, t in parse_sections(text).items() if (c := parse_certificate(t)) is not None}
    assert len(certs) == len(files) == 13 and sum(c.ca for c in certs.values()) == 4
    now = datetime.datetime.now(datetime.timezone.utc)
    soon = expiring(certs, now, 30)
    assert len(soon) == 9 and {days for _, days, _ in soon} == {12}
    assert expiring(certs, now, 10) == [] and parse_certificate("no certificate here") is None


def test_the_forecast_checks_are_rows_of_results_json_so_junit_and_report_html_agree() -> None:
    from pytest_dgxspark.judge.forecast import ForecastRecord, tests
    from pytest_dgxspark.report.rows import rows

    records = [ForecastRecord("suites/host/test_f.py::test_a[gpu-01]", "SPARK.reboot-pending", "advised"),
               ForecastRecord("suites/host/test_f.py::test_b[gpu-01]", "SPARK.driver-version-skew", "silent"),
               ForecastRecord("suites/host/test_f.py::test_c[gpu-01]", "SPARK.unattended-upgrades-unheld", "error",
                              message="dpkg-query did not complete")]
    results = {"rules": [], "forecast_tests": tests(records),
               "forecast_checked": {"SPARK.reboot-pending": "advised"}}
    table = rows(results)
    assert [(r.rule, r.status, r.rule_status) for r in table.values()] == [
        ("SPARK.reboot-pending", "advised", "forecast advised"),
        ("SPARK.driver-version-skew", "passed", "forecast checked"),
        ("SPARK.unattended-upgrades-unheld", "error", "forecast checked")]


def test_etcd_snapshots_that_are_off_old_missing_or_empty_are_named() -> None:
    import datetime

    from pytest_dgxspark.judge.upkeep import snapshot_problems
    from pytest_dgxspark.probes.upkeep import parse_snapshots

    now = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.timezone.utc)
    fresh, stale = now.timestamp() - 2 * 3600, now.timestamp() - 72 * 3600
    listing = f"{stale:.10f} 16384 etcd-snapshot-gpu-01-{int(stale)}\n{fresh:.10f} 16384 etcd-snapshot-gpu-01-{int(fresh)}\n"
    assert [s.name for s in parse_snapshots(listing)] == [f"etcd-snapshot-gpu-01-{int(stale)}",
                                                          f"etcd-snapshot-gpu-01-{int(fresh)}"]
    assert snapshot_problems({}, parse_snapshots(listing), now) == []
    assert snapshot_problems({}, parse_snapshots(listing.splitlines()[0]), now) == [
        f"the latest etcd snapshot etcd-snapshot-gpu-01-{int(stale)} is 72 hours old (scheduled every '0 */12 * * *'; "
        "not one in 25 h)"]
    assert snapshot_problems({"etcd-disable-snapshots": True}, (), now) == [
        "etcd-disable-snapshots is true in config.yaml: RKE2 takes no scheduled snapshot",
        "no etcd snapshot in the snapshot folder"]
    empty = f"{fresh:.10f} 0 etcd-snapshot-gpu-01-{int(fresh)}\n"
    assert snapshot_problems({}, parse_snapshots(empty), now) == [
        f"the latest etcd snapshot etcd-snapshot-gpu-01-{int(fresh)} is empty (0 bytes)"]


def test_an_etcd_snapshot_copy_off_the_node_is_rke2s_s3_upload_or_one_the_site_declares() -> None:
    from pytest_dgxspark.data.yamlload import loads
    from pytest_dgxspark.judge.upkeep import etcd_s3_settings, offnode_copy_problems
    from pytest_dgxspark.probes.rke2 import merge_rke2_config

    vars_file = "sites/x/rke2/vars.yml"
    # config.yaml and a credentials drop-in with RKE2's own keys (rke2-docs reference/server_config.md)
    config = merge_rke2_config([
        loads('cni: cilium\netcd-s3: true\netcd-s3-endpoint: s3.example.internal:9000\netcd-s3-bucket: snaps\n'
              'etcd-s3-folder: gpu\n', "config.yaml"),
        loads('etcd-s3-access-key: "AKIA-not-shown-0001"\netcd-s3-secret-key: "not-shown-secret-0002"\n', "50.yaml")])
    assert offnode_copy_problems(config, {}, vars_file) == []
    assert etcd_s3_settings(config) == {"etcd-s3": True, "etcd-s3-endpoint": "s3.example.internal:9000",
                                        "etcd-s3-bucket": "snaps", "etcd-s3-folder": "gpu"}  # no credential
    assert offnode_copy_problems({"etcd-s3": "true", "etcd-s3-config-secret": "etcd-s3-config"}, {}, vars_file) == []
    assert offnode_copy_problems({"cni": "cilium"}, {}, vars_file) == [
        "no off-node copy of the etcd snapshots: config.yaml (+ config.yaml.d) has no etcd-s3, and "
        "sites/x/rke2/vars.yml declares neither rke2_etcd_s3 nor etcd_snapshot_offnode_copy: a lost disk loses every "
        "snapshot with the cluster"]
    assert offnode_copy_problems({"etcd-s3": True}, {}, vars_file) == [
        "no off-node copy of the etcd snapshots: etcd-s3 is true but no etcd-s3-bucket (or etcd-s3-config-secret) "
        "names where RKE2 uploads, and sites/x/rke2/vars.yml declares neither rke2_etcd_s3 nor "
        "etcd_snapshot_offnode_copy: a lost disk loses every snapshot with the cluster"]
    assert offnode_copy_problems({"etcd-s3-bucket": "snaps"}, {"rke2_etcd_s3": {"bucket": "snaps"}}, vars_file) == [
        "no off-node copy of the etcd snapshots: etcd-s3-bucket is 'snaps' but etcd-s3 is not true: RKE2 uploads "
        "nothing, while sites/x/rke2/vars.yml declares rke2_etcd_s3 ('snaps'): the playbook's etcd-s3 settings are "
        "not in effect"]
    declared = {"etcd_snapshot_offnode_copy": {"method": "rsync by the backup server", "destination": "nas:/rke2"}}
    assert offnode_copy_problems({"cni": "cilium"}, declared, vars_file) == []


def test_support_is_judged_against_the_run_date_and_an_unknown_version_is_never_a_pass(tmp_path) -> None:
    import datetime

    from pytest_dgxspark.catalog.support import SupportTableError, load_support

    table = load_support()
    before, after = datetime.date(2026, 8, 19), datetime.date(2026, 12, 2)
    assert table.status("gpu-operator", "v26.3.2", before).status == "supported"
    assert table.status("gpu-operator", "v26.3.2", after).status == "deprecated"  # since 26.7.0, no end dated yet
    ended = table.status("gpu-operator", "v25.10.1", after)
    assert (ended.status, ended.line.end) == ("ended", datetime.date(2026, 8, 20)) and ended.line.sources
    assert table.status("nvidia-driver", "580.95.05", after).status == "supported"
    assert table.status("nvidia-driver", "580.95.05", datetime.date(2028, 9, 1)).status == "ended"
    assert table.status("nvidia-driver", "570.195.03", datetime.date(2026, 2, 28)).status == "supported"
    assert table.status("nvidia-driver", "570.195.03", datetime.date(2026, 3, 1)).status == "ended"
    assert table.status("nvidia-driver", "5800.1", after).status == "unknown"  # a line covers "580" or "580.*" only
    # RKE2 minors by their Kubernetes minor's upstream dates (kubernetes.io/releases), not SUSE's
    rke2 = table.status("rke2", "v1.34.10+rke2r1", after)
    assert (rke2.status, rke2.line.end) == ("ended", datetime.date(2026, 10, 27))
    assert "kubernetes.io/releases/1.34" in rke2.line.sources[0] and "not SUSE's RKE2 date" in rke2.line.sources[0]
    assert table.status("rke2", "v1.34.10+rke2r1", datetime.date(2026, 8, 26)).status == "supported"
    assert table.status("rke2", "v1.34.10+rke2r1", datetime.date(2026, 10, 27)).status == "deprecated"  # its last day
    assert table.status("rke2", "v1.35.1+rke2r1", after).status == "supported"
    old_minor = table.status("rke2", "v1.32.9+rke2r1", after)
    assert old_minor.status == "unknown" and "SUSE" in old_minor.reason and old_minor.line is None
    unknown = table.status("gpu-operator", "v27.1.0", after)
    assert unknown.status == "unknown" and "no line of GPU Operator chart covering v27.1.0" in unknown.reason
    bad = tmp_path / "support.yaml"
    bad.write_text("components:\n  x: {what: X, lines: [{line: '1', deprecated: soon, end: null, sources: []}]}\n")
    with pytest.raises(SupportTableError, match="not a date.*no sources named|no sources named.*not a date"):
        load_support(bad)



def test_gb10_memory_headroom_reads_kubelet_args_and_gpu_pods_memory_limits() -> None:
    from pytest_dgxspark.judge.upkeep import gpu_pods_without_memory_limit, memory_headroom, unified_memory

    assert unified_memory({"devices": [{"memory_rc": 3, "memory_error": "Not Supported"}]})
    assert not unified_memory({"devices": [{"memory_rc": 0, "memory_total": 85899345920}]})
    config = {"kubelet-arg": ["system-reserved=memory=4Gi", "max-pods=110", "--eviction-hard=memory.available<2Gi",
                              "kube-reserved=cpu=500m"]}
    assert memory_headroom(config) == {"system-reserved": "memory=4Gi", "eviction-hard": "memory.available<2Gi"}
    assert memory_headroom({"kubelet-arg": ["kube-reserved=cpu=500m"]}) == {} and memory_headroom({}) == {}

    def pod(name, limits, node="gpu-01", phase="Running", labels=None):
        return {"metadata": {"namespace": "ai", "name": name, "labels": labels or {}},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
                "status": {"phase": phase}}

    pods = [pod("limited", {"nvidia.com/gpu": "1", "memory": "32Gi"}), pod("unlimited", {"nvidia.com/gpu": "1"}),
            pod("cpu-only", {}), pod("elsewhere", {"nvidia.com/gpu": "1"}, node="gpu-02"),
            pod("done", {"nvidia.com/gpu": "1"}, phase="Succeeded"),
            pod("ours", {"nvidia.com/gpu": "1"}, labels={"app.kubernetes.io/managed-by": "pytest-dgxspark"})]
    assert gpu_pods_without_memory_limit(pods, "gpu-01") == ["ai/unlimited"]
