"""The rule catalog: the 30 ids of DESIGN.md, the DAG, and the loader's exact error messages."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_dgxspark.catalog.rules import LAYERS, CatalogError, load_catalog

DESIGN_IDS = {
    "site": ["ADR-0001.site-layout", "ADR-0001.role-alias", "ADR-0002.operator-separate", "ADR-0002.helmchart-manifest"],
    "host": ["ADR-0002.host-static-ip", "ADR-0002.host-driver", "ADR-0002.host-nvml", "ADR-0002.driver-source"],
    "rke2": ["ADR-0001.rke2-service", "ADR-0001.rke2-config", "ADR-0001.node-ready", "ADR-0001.node-metadata",
             "ADR-0001.kubeconfig-context", "ADR-0001.hardening-baseline"],
    "runtime": ["ADR-0001.runtime-rke2-containerd", "ADR-0001.no-docker-cri", "ADR-0001.no-extra-containerd",
                "ADR-0002.gpu-injection"],
    "network": ["ADR-0001.cni-cilium", "ADR-0001.cilium-settings"],
    "gpu-operator": ["ADR-0002.helmchart-live", "ADR-0002.operator-running", "ADR-0002.operator-components",
                     "ADR-0002.operator-managed", "ADR-0002.validator-passed", "ADR-0002.image-mirror"],
    "device-plugin": ["ADR-0002.node-gpu-labels"],
    "allocatable": ["ADR-0002.allocatable"],
    "workload": ["ADR-0002.cuda-sample"],
    "gitops": ["ADR-0001.argocd-registered"],
}

GOOD = """\
- id: X.a
  adr: "0001"
  section: "5"
  statement_ko: "문장"
  title: A
  layer: host
  severity: major
  kind: required
  depends_on: []
  remediation: fix it
  remediation_ko: 고친다
"""


def entry(rid: str, deps: str = "[]", extra: str = "") -> str:
    return GOOD.replace("X.a", rid).replace("depends_on: []", f"depends_on: {deps}") + extra


# The judged rules beyond the ADRs (catalog/beyond.yaml, issue 22): their own prefix, beside the 30
BEYOND_IDS = {"workload": ["SPARK.gpu-isolation-unrequested", "SPARK.gpu-isolation-allocated", "SPARK.gpu-sharing-replicas"]}


def test_the_catalog_holds_exactly_the_30_design_ids_in_their_layers():
    catalog = load_catalog()
    assert len([rid for rid in catalog.rules if rid.startswith("ADR-")]) == 30
    for layer, ids in DESIGN_IDS.items():
        assert sorted(r.id for r in catalog.rules.values() if r.layer == layer and r.id.startswith("ADR-")) == sorted(ids)


def test_the_judged_rules_beyond_the_adrs_sit_in_their_layers_on_the_gpu_chain():
    catalog = load_catalog()
    beyond = {rid: r for rid, r in catalog.rules.items() if not rid.startswith("ADR-")}
    assert sorted(beyond) == sorted(rid for ids in BEYOND_IDS.values() for rid in ids)
    assert len(catalog) == 30 + len(beyond)
    for layer, ids in BEYOND_IDS.items():
        for rid in ids:
            rule = beyond[rid]
            kind = "conditional" if rid == "SPARK.gpu-sharing-replicas" else "required"  # only where the site shares GPUs
            assert (rule.layer, rule.kind, rule.adr, rule.gpu) == (layer, kind, "beyond", True)
            assert rule.source.endswith("beyond.yaml") and rule.remediation and rule.remediation_ko
            assert "ADR-0002.cuda-sample" in rule.depends_on


ADR_FILES = {"0001": "002_303a77f9d5d17f7a.txt", "0002": "000_9a3a3bc7233e2810.txt"}


def adr_folder() -> Path:
    """shared/adr beside the clone or beside a folder above it (CI has it beside the clone); DGXSPARK_ADR_DIR wins."""
    if os.environ.get("DGXSPARK_ADR_DIR"):
        return Path(os.environ["DGXSPARK_ADR_DIR"])
    for folder in Path(__file__).resolve().parents[1].parents:
        if (folder / "shared" / "adr").is_dir():
            return folder / "shared" / "adr"
    pytest.fail("the ADRs are not beside the clone (../shared/adr): the catalog's Korean quotes cannot be checked; "
                "set DGXSPARK_ADR_DIR to the folder holding them", pytrace=False)


def test_every_rule_quotes_its_adr_verbatim_in_korean():
    folder = adr_folder()
    missing = [name for name in ADR_FILES.values() if not (folder / name).is_file()]
    assert missing == [], f"{folder}: ADR files missing: {missing}"
    text = {adr: (folder / name).read_text(encoding="utf-8") for adr, name in ADR_FILES.items()}
    unquoted = [rule.id for rule in load_catalog().rules.values() if rule.id.startswith("ADR-")  # beyond.yaml: no ADR
                and rule.statement_ko.split(" … ")[0] not in text[rule.adr]]
    assert unquoted == [], "not quoted verbatim from their ADR"


def test_a_changed_quote_would_be_found_unquoted():
    text = (adr_folder() / ADR_FILES["0002"]).read_text(encoding="utf-8")
    quote = load_catalog().rules["ADR-0002.allocatable"].statement_ko.split(" … ")[0]
    assert quote in text and quote.replace("나타난다", "나타나지 않는다") not in text


def test_every_rule_states_korean_and_the_dag_goes_bottom_up():
    catalog = load_catalog()
    for rule in catalog.rules.values():
        assert any("\uac00" <= ch <= "\ud7a3" for ch in rule.statement_ko) or ":" in rule.statement_ko, rule.id
        for dep in rule.depends_on:
            assert LAYERS.index(catalog.rules[dep].layer) <= LAYERS.index(rule.layer), (rule.id, dep)


def test_the_gpu_chain_is_the_adr_0002_layer_chain():
    gpu = {r.id for r in load_catalog().rules.values() if r.gpu}
    assert gpu == {
        "ADR-0002.host-driver", "ADR-0002.host-nvml", "ADR-0002.driver-source", "ADR-0002.gpu-injection",
        *DESIGN_IDS["gpu-operator"], "ADR-0002.node-gpu-labels", "ADR-0002.allocatable", "ADR-0002.cuda-sample",
        *BEYOND_IDS["workload"],  # GPU isolation: re-checked by pytest -m gpu after an upgrade
    }


def test_remediation_of_the_gpu_n_a_state_says_not_to_reinstall_rke2():
    catalog = load_catalog()
    assert "Do not reinstall RKE2" in catalog.rules["ADR-0002.allocatable"].remediation


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (entry("X.a", extra="  colour: red\n"), "{f}: entry 1 (X.a): unknown key(s) colour"),
        (entry("X.a") + entry("X.a"), "{f}: entry 2 (X.a): duplicate id X.a (first in {f})"),
        (entry("X.a", deps="[X.zz]"), "{f}: X.a: depends_on names unknown rule X.zz"),
        (entry("X.a", deps="[X.b]") + entry("X.b", deps="[X.a]"), "{f}: depends_on has a cycle: "),
        (GOOD.replace("  title: A\n", "  title: A\n  title: B\n"), "{f}: duplicate key 'title' at line 6 (first at line 5)"),
        (GOOD.replace("layer: host", "layer: firmware"),
         "{f}: entry 1 (X.a): layer is 'firmware', expected one of site, host, rke2, runtime, network, "
         "gpu-operator, device-plugin, allocatable, workload, gitops"),
        (GOOD.replace("  remediation: fix it\n", ""), "{f}: entry 1 (X.a): missing key(s) remediation"),
        (GOOD.replace("  remediation_ko: 고친다\n", ""), "{f}: entry 1 (X.a): missing key(s) remediation_ko"),
        (GOOD.replace("  remediation_ko: 고친다\n", "  remediation_ko: ' '\n"),
         "{f}: entry 1 (X.a): remediation_ko must be a non-empty string"),
        (entry("X.a", extra="  applies_when: {airgap: true}\n"),
         "{f}: entry 1 (X.a): applies_when is only for conditional rules; a required rule always applies"),
        (GOOD.replace("kind: required", "kind: conditional"),
         "{f}: entry 1 (X.a): a conditional rule needs applies_when (one of airgap, management_cluster, gpu_sharing: true)"),
        (GOOD.replace("kind: required", "kind: conditional") + "  applies_when: {offline: true}\n",
         "{f}: entry 1 (X.a): applies_when: unknown condition 'offline', expected one of airgap, management_cluster, gpu_sharing"),
    ],
    ids=["unknown-key", "duplicate-id", "unknown-dependency", "cycle", "duplicate-yaml-key", "bad-layer", "missing-key",
         "missing-korean-remediation", "empty-korean-remediation", "applies-when-on-required",
         "conditional-without-applies-when", "unknown-condition"],
)
def test_catalog_loading_errors_name_the_file_and_the_entry(tmp_path, text, message):
    path = tmp_path / "adr-0009.yaml"
    path.write_text(text)
    with pytest.raises(CatalogError) as excinfo:
        load_catalog([path])
    assert message.format(f=path) in str(excinfo.value)


def test_every_rule_has_a_korean_remediation_and_only_image_mirror_is_conditional_on_the_air_gap():
    catalog = load_catalog()
    for rule in catalog.rules.values():
        assert any("\uac00" <= ch <= "\ud7a3" for ch in rule.remediation_ko), rule.id
    assert {r.id: r.applies_when for r in catalog.rules.values() if r.applies_when} == {
        "ADR-0002.image-mirror": ("airgap",), "SPARK.gpu-sharing-replicas": ("gpu_sharing",)}
    assert catalog.rules["ADR-0001.argocd-registered"].kind == "required"  # required: never not-applicable


def test_a_rule_depends_only_on_rules_whose_failure_makes_its_evidence_unobtainable():
    catalog = load_catalog()
    # a committed credential (site-layout) says nothing about the manifest, the aliases or the GPU chain
    assert "ADR-0001.site-layout" not in {a for r in catalog.rules.values() if r.id != "ADR-0001.site-layout"
                                          for a in catalog.ancestors(r.id)}
    # without RKE2 config.yaml is missing as a symptom; a failed unit leaves the config judgeable (symptom_of, not
    # depends_on); the toolkit waits on the host's NVML
    assert catalog.rules["ADR-0001.rke2-config"].depends_on == ()
    assert catalog.rules["ADR-0001.rke2-config"].symptom_of == ("ADR-0001.rke2-service",)
    assert "ADR-0002.host-nvml" in catalog.rules["ADR-0002.gpu-injection"].depends_on


def test_applicability_is_decided_from_the_site(site_copy):
    from pytest_dgxspark.site.model import load_site

    rule = load_catalog().rules["ADR-0002.image-mirror"]
    site = load_site(site_copy)
    assert rule.not_applicable_reason(site) == (
        "ADR-0002.image-mirror applies only when the site is air-gapped (rke2/vars.yml airgap: true or a "
        f"mirror_registry); {site_copy}/rke2/vars.yml says otherwise")
    vars_ = site_copy / "rke2" / "vars.yml"
    vars_.write_text(vars_.read_text().replace("airgap: false", "airgap: true\nmirror_registry: registry.site.local:5000"))
    assert rule.not_applicable_reason(load_site(site_copy)) is None


def test_each_target_kind_is_reached_by_one_rule_of_the_catalog():
    catalog = load_catalog()
    assert (catalog.owner("ssh"), catalog.owner("api"), catalog.owner("api-server")) == (
        "ADR-0002.host-static-ip", "ADR-0001.kubeconfig-context", "ADR-0001.rke2-service")


def test_a_target_kind_reached_by_two_rules_or_an_unknown_kind_is_refused(tmp_path):
    from pytest_dgxspark.catalog.rules import CATALOG_DIR

    text = (CATALOG_DIR / "adr-0002.yaml").read_text(encoding="utf-8")
    (tmp_path / "adr-0002.yaml").write_text(text.replace("- id: ADR-0002.host-driver\n",
                                                         "- id: ADR-0002.host-driver\n  reaches: ssh\n"))
    (tmp_path / "adr-0001.yaml").write_text((CATALOG_DIR / "adr-0001.yaml").read_text(encoding="utf-8")
                                            .replace("reaches: api-server", "reaches: apiserver"))
    with pytest.raises(CatalogError) as info:
        load_catalog(sorted(tmp_path.glob("*.yaml")))
    assert "reaches is 'apiserver', expected one of ssh, api, api-server" in str(info.value)
    assert "reaches: ssh is owned by 2 rules" in str(info.value)
