"""hardening-baseline: what a site declares in rke2/vars.yml, judged against one host's state (hardening.py)."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_dgxspark.catalog.rules import CatalogError, load_catalog
from pytest_dgxspark.site.hardening import (
    AUDIT_POLICY_PATH,
    PSA_CONFIG_PATH,
    Declared,
    HostState,
    declared,
    persisted_sysctls,
    problems,
)
from pytest_dgxspark.site.model import SiteError, load_site
from tests.conftest import REPO

HARDENED_SITE = REPO / "pytest_dgxspark" / "testbed" / "scenarios" / "hardened" / "site"
AUDIT = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}
PSA = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
       "plugins": [{"name": "PodSecurity", "configuration": {"defaults": {"enforce": "restricted"},
                                                             "exemptions": {"namespaces": ["kube-system"]}}}]}
WANT = Declared(profile="cis", secrets_encryption=True, audit_policy=AUDIT, audit_policy_source="rke2/audit-policy.yaml",
                pod_security=PSA, pod_security_source="rke2/pod-security.yaml")
APISERVER = (f"/usr/local/bin/kube-apiserver --admission-control-config-file={PSA_CONFIG_PATH} --audit-policy-file="
             f"{AUDIT_POLICY_PATH} --encryption-provider-config=/var/lib/rancher/rke2/server/cred/encryption-config.json")
CIS = {"vm.panic_on_oom": "0", "vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"}
GOOD = HostState(
    role="server", config={"profile": "cis", "secrets-encryption": True, "audit-policy-file": AUDIT_POLICY_PATH,
                           "pod-security-admission-config-file": PSA_CONFIG_PATH},
    sysctls=CIS, persisted={k: (v, "/etc/sysctl.d/60-rke2-cis.conf") for k, v in CIS.items()},
    etcd_account=frozenset({"/etc/passwd", "/etc/group"}), apiserver=APISERVER, audit_policy=AUDIT, pod_security=PSA)


def test_a_host_with_everything_declared_in_effect_has_no_problem() -> None:
    assert problems(WANT, GOOD) == []


@pytest.mark.parametrize(("host", "expected"), [
    (replace(GOOD, config={**GOOD.config, "profile": None}),
     "profile is None in config.yaml (+ config.yaml.d), vars declare rke2_profile: 'cis'"),
    (replace(GOOD, config={**GOOD.config, "protect-kernel-defaults": False}),
     "protect-kernel-defaults is false: RKE2 refuses to start with profile: cis"),
    (replace(GOOD, sysctls={**CIS, "vm.overcommit_memory": "0"}),
     "kernel parameter vm.overcommit_memory is 0, the CIS profile needs 1"),
    (replace(GOOD, persisted={k: v for k, v in GOOD.persisted.items() if k != "kernel.panic"}),
     "kernel.panic = 10 is in no sysctl.d file, so a reboot loses it and RKE2 then refuses to start; copy "
     "rke2-cis-sysctl.conf to /etc/sysctl.d/60-rke2-cis.conf"),
    (replace(GOOD, etcd_account=frozenset({"/etc/group"})),
     "no etcd user/group in /etc/passwd (the CIS profile runs etcd as etcd:etcd; useradd -r -c 'etcd user' -s "
     "/sbin/nologin -M etcd -U)"),
    (replace(GOOD, apiserver=APISERVER.replace(" --encryption-provider-config=/var/lib/rancher/rke2/server/cred/"
                                               "encryption-config.json", "")),
     "the running kube-apiserver has no --encryption-provider-config: Secrets are stored in plain text in etcd"),
    (replace(GOOD, audit_policy={**AUDIT, "rules": [{"level": "None"}]}),
     "/etc/rancher/rke2/audit-policy.yaml differs from the site's rke2/audit-policy.yaml (rules at level None in "
     "effect, the site declares rules at level Metadata)"),
    (replace(GOOD, pod_security=None),
     "/etc/rancher/rke2/rke2-pss.yaml is missing; vars declare rke2_pod_security_admission_config: rke2/pod-security.yaml"),
    (replace(GOOD, apiserver=APISERVER.replace(f"--audit-policy-file={AUDIT_POLICY_PATH}", "")),
     "the running kube-apiserver has --audit-policy-file=None, not /etc/rancher/rke2/audit-policy.yaml"),
    (replace(GOOD, apiserver=None),
     "no kube-apiserver process runs on this server, so no declared apiserver setting is in effect"),
], ids=["profile", "protect-kernel-defaults", "sysctl-running", "sysctl-persisted", "etcd-user", "encryption",
        "audit-policy-content", "psa-missing", "audit-flag", "no-apiserver"])
def test_each_declared_item_that_is_not_in_effect_is_named(host: HostState, expected: str) -> None:
    assert problems(WANT, host) == [expected]


def test_an_agent_is_judged_on_the_profile_and_kernel_parameters_only() -> None:
    agent = replace(GOOD, role="agent", config={"profile": "cis"}, etcd_account=frozenset(), apiserver=None,
                    audit_policy=None, pod_security=None)
    assert problems(WANT, agent) == []
    assert problems(WANT, replace(agent, sysctls={**CIS, "kernel.panic": "0"})) == [
        "kernel parameter kernel.panic is 0, the CIS profile needs 10"]


def test_nothing_declared_is_nothing_to_judge() -> None:
    assert not Declared().anything and problems(Declared(), replace(GOOD, apiserver=None, sysctls={})) == []


def test_the_boot_order_of_sysctl_files_decides_what_is_persisted() -> None:
    grep = ("/etc/sysctl.d/60-rke2-cis.conf:kernel.panic=10\n"
            "/usr/lib/sysctl.d/60-rke2-cis.conf:kernel.panic=0\n"   # shadowed by /etc's file of the same name
            "/etc/sysctl.d/99-local.conf:vm.overcommit_memory = 0\n"
            "/etc/sysctl.d/10-first.conf:vm.overcommit_memory=1\n"
            "/etc/sysctl.conf:vm.panic_on_oom=0\n")
    assert persisted_sysctls(grep) == {"kernel.panic": ("10", "/etc/sysctl.d/60-rke2-cis.conf"),
                                       "vm.overcommit_memory": ("0", "/etc/sysctl.d/99-local.conf"),
                                       "vm.panic_on_oom": ("0", "/etc/sysctl.conf")}


def test_the_hardened_scenario_site_declares_every_item() -> None:
    want = declared(load_site(HARDENED_SITE))
    assert (want.profile, want.secrets_encryption) == ("cis", True)
    assert want.audit_policy["rules"] == [{"level": "Metadata"}] and want.audit_policy_source == "rke2/audit-policy.yaml"
    assert want.pod_security["kind"] == "AdmissionConfiguration"


@pytest.mark.parametrize(("value", "make", "message"), [
    ("missing.yaml", None, "rke2_audit_policy: {rke2}/missing.yaml must be a regular file of the site (not a symlink), "
                           "holding the Policy the servers get"),
    ("/etc/rancher/rke2/audit-policy.yaml", None, "rke2_audit_policy: expected a file name relative to {rke2}, got "
                                                  "'/etc/rancher/rke2/audit-policy.yaml'"),
    ("link.yaml", "symlink", "rke2_audit_policy: {rke2}/link.yaml must be a regular file of the site (not a symlink), "
                             "holding the Policy the servers get"),
    ("wrong.yaml", "wrong", "rke2_audit_policy: {rke2}/wrong.yaml must be apiVersion audit.k8s.io/v1 kind Policy, got "
                            "('v1', 'ConfigMap')"),
], ids=["missing", "absolute", "symlink", "wrong-kind"])
def test_a_policy_file_the_vars_name_must_be_a_policy_of_the_site(tmp_path: Path, value, make, message) -> None:
    site = tmp_path / "site"
    shutil.copytree(HARDENED_SITE, site)
    rke2 = site / "rke2"
    if make == "symlink":
        (rke2 / "link.yaml").symlink_to(rke2 / "audit-policy.yaml")
    if make == "wrong":
        (rke2 / "wrong.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n")
    vars_yml = rke2 / "vars.yml"
    vars_yml.write_text(vars_yml.read_text().replace("rke2_audit_policy: audit-policy.yaml", f"rke2_audit_policy: {value}"))
    with pytest.raises(SiteError) as raised:
        load_site(site)
    assert str(raised.value) == f"{vars_yml}: " + message.format(rke2=rke2)


def test_a_site_that_declares_hardening_makes_the_rule_required_and_one_that_does_not_leaves_it_recorded() -> None:
    catalog = load_catalog()
    plain = catalog.for_site(load_site(REPO / "sites" / "tirosh-home"))
    hardened = catalog.for_site(load_site(HARDENED_SITE))
    rid = "ADR-0001.hardening-baseline"
    assert (plain.rules[rid].kind, plain.rules[rid].severity) == ("informational", "info")
    assert (hardened.rules[rid].kind, hardened.rules[rid].severity) == ("required", "major")
    assert {r for r in hardened.rules if hardened.rules[r] != catalog.rules[r]} == {rid}


def test_judged_when_on_a_required_rule_is_refused_naming_file_and_entry(tmp_path: Path) -> None:
    text = (REPO / "pytest_dgxspark" / "catalog" / "adr-0001.yaml").read_text()
    bad = tmp_path / "adr-0001.yaml"
    bad.write_text(text.replace("  kind: required\n  depends_on: []\n  remediation: >-\n    Keep sites",
                                "  kind: required\n  judged_when: {hardening_declared: true}\n  depends_on: []\n"
                                "  remediation: >-\n    Keep sites", 1))
    with pytest.raises(CatalogError) as raised:
        load_catalog([bad, REPO / "pytest_dgxspark" / "catalog" / "adr-0002.yaml"])
    assert f"{bad}: entry 1 (ADR-0001.site-layout): judged_when is only for informational rules" in str(raised.value)
