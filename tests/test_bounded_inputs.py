"""Every input bounded (issue 20 point 3): scenario files validated before bring-up, no site or scenario path out of
its folder, the kubeconfig's management context checked in the plan, bombs and deep documents refused by the loader,
and usage errors that never echo a secret value."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_dgxspark.data.yamlload import loads, loads_json
from tests.conftest import alias_bomb
from tests.pytester_args import SITE_ARGS

TOUCH = "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched a target')\n"


def usage_error(result: pytest.RunResult, *lines: str) -> str:
    text = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text
    assert "touched a target" not in text
    assert "Traceback" not in text
    result.stderr.fnmatch_lines(list(lines))
    return text


def _scenario(pytester: pytest.Pytester, body: str) -> Path:
    folder = pytester.path / "bad"
    folder.mkdir(exist_ok=True)
    (folder / "scenario.yaml").write_text("description: a bad scenario\nextends: healthy\n" + body)
    return folder


@pytest.mark.parametrize(("body", "message"), [
    ("nodes:\n  gpu-01:\n    host:\n      gpus: two\n",
     "*bad/scenario.yaml: nodes.gpu-01.host: *gpus must be a list of GPUs or a mapping {product, count}, got str*"),
    ("nodes:\n  gpu-01:\n    host:\n      files: ['/etc/x']\n",
     "*bad/scenario.yaml: nodes.gpu-01.host.files: must map paths to text, got list"),
    ("nodes:\n  gpu-01:\n    kube:\n      labels: a=b\n", "*bad/scenario.yaml: nodes.gpu-01.kube.labels: must be a mapping, got str"),
    ("nodes:\n  gpu-01:\n    kube:\n      kernel: 6\n", "*bad/scenario.yaml: nodes.gpu-01.kube.kernel: must be a string, got int"),
], ids=["gpus-text", "files-list", "labels-text", "kernel-number"])
def test_a_scenario_value_bring_up_cannot_use_is_a_usage_error_naming_file_and_key(pytester, suite, body, message):
    suite("host", TOUCH)
    folder = _scenario(pytester, body)
    usage_error(pytester.runpytest(*SITE_ARGS, "--testbed", str(folder)), "ERROR: invalid run input:", message)


def test_a_symlink_in_a_scenario_overlay_out_of_its_folder_is_refused_by_name(pytester, suite):
    suite("host", TOUCH)
    folder = _scenario(pytester, "")
    root = folder / "nodes" / "gpu-01" / "root" / "etc"
    root.mkdir(parents=True)
    (root / "shadow").symlink_to("/etc/shadow")
    text = usage_error(pytester.runpytest(*SITE_ARGS, "--testbed", str(folder)),
                       f"*{root / 'shadow'} is a symlink out of {folder}; refused (copy the file into the folder)")
    assert "root:" not in text


def test_a_site_file_symlinked_out_of_the_site_is_refused_and_its_content_never_shown(pytester, suite, tmp_path):
    suite("host", TOUCH)
    outside = tmp_path / "elsewhere.yml"
    outside.write_text("root:$6$Planted-Shadow-Hash-7711:19000:0:99999:7:::\n  bad: [\n")
    vars_file = pytester.path / "sites" / "tirosh-home" / "rke2" / "vars.yml"
    vars_file.unlink()
    vars_file.symlink_to(outside)
    text = usage_error(pytester.runpytest(*SITE_ARGS), "site sites/tirosh-home: sites/tirosh-home/rke2/vars.yml is a symlink "
                       "out of sites/tirosh-home; refused (copy the file into the folder)")
    assert "Planted-Shadow-Hash-7711" not in text


def test_a_yaml_error_never_quotes_the_line_it_met(pytester, suite):
    suite("host", TOUCH)
    vars_file = pytester.path / "sites" / "tirosh-home" / "rke2" / "vars.yml"
    vars_file.write_text(vars_file.read_text() + "registry_pass: 'Quoted-Secret-Planted-7712\n")
    text = usage_error(pytester.runpytest(*SITE_ARGS), "*vars.yml: while scanning a quoted scalar at line *")
    assert "Quoted-Secret-Planted-7712" not in text


def test_a_become_password_that_breaks_the_yaml_is_never_shown(pytester, suite):
    suite("host", TOUCH)
    inventory = pytester.path / "sites" / "tirosh-home" / "inventory.yml"
    text = inventory.read_text().replace("ansible_user:", "ansible_become_password: 'Become-Planted-7713\n          ansible_user:", 1)
    inventory.write_text(text)
    out = usage_error(pytester.runpytest(*SITE_ARGS), "*inventory.yml: while scanning a quoted scalar at line 8, column 36 found *")
    assert "Become-Planted-7713" not in out


def test_a_secret_of_the_wrong_type_is_named_never_shown():
    from pytest_dgxspark.site.model import _schema_problems

    schema = {"type": "object", "properties": {"registry_password": {"type": "string"}, "name": {"type": "string"}}}
    problems = _schema_problems({"registry_password": 771399, "name": 5}, schema, Path("vars.yml"))
    assert problems == ["vars.yml: name: 5 is not of type 'string'",
                        "vars.yml: registry_password (its value is not shown: a secret) is not of type 'string'"]


def test_a_kubeconfig_without_the_management_context_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "kubeconfig.yml").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: tirosh-home/rke2/gpu\n"
        "contexts:\n- name: tirosh-home/rke2/gpu\n  context: {cluster: gpu, user: admin}\n"
        "clusters:\n- name: gpu\n  cluster: {server: 'https://127.0.0.1:6443'}\n"
        "users:\n- name: admin\n  user: {token: abc}\n")
    usage_error(pytester.runpytest(*SITE_ARGS, "--dgxspark-kubeconfig", "kubeconfig.yml"),
                "*kubeconfig.yml: contexts: no entry named 'tirosh-home/k3s/argocd'* (argocd_context of *vars.yml)")


def test_an_alias_bomb_in_a_rke2_drop_in_is_refused_at_once():
    from pytest_dgxspark.probes.rke2 import effective_config

    class Answer:
        def __init__(self, stdout: str) -> None:
            self.rc, self.stdout, self.stderr = 0, stdout, ""

    started = time.monotonic()
    config = effective_config(Answer("node-name: gpu-01\n"),
                              Answer("### /etc/rancher/rke2/config.yaml.d/90-bomb.yaml\n" + alias_bomb()), "gpu-01")
    assert time.monotonic() - started < 5
    assert config.error and "90-bomb.yaml" in config.error and "alias bomb" in config.error


def test_a_values_content_bomb_is_named_and_never_expanded():
    from pytest_dgxspark.site.model import helm_values

    chart = {"metadata": {"name": "gpu-operator", "namespace": "kube-system"},
             "spec": {"valuesContent": alias_bomb()}}
    with pytest.raises(ValueError, match="HelmChart kube-system/gpu-operator spec.valuesContent: expands to more"):
        helm_values(chart)


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 200_000 + "]" * 200_000, "nested deeper than 64 levels"),
    ("[" * 100 + "]" * 100, "nested deeper than 64 levels"),
    ('{"rules": [{"id": "x", "status": NaN}]}', "NaN is no JSON number"),
    ("x" * (5 * 1024 * 1024), "larger than 4194304 bytes"),
], ids=["200000-deep", "100-deep", "nan", "oversized"])
def test_the_json_loader_refuses_deep_nan_and_oversized_documents(text, message):
    with pytest.raises(ValueError, match=message):
        loads_json(text, "baseline.json")


def test_a_200000_deep_baseline_is_a_usage_error_not_an_internal_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    usage_error(pytester.runpytest(*SITE_ARGS, "--dgxspark-baseline", "deep.json"),
                "*--dgxspark-baseline deep.json: nested deeper than 64 levels*")


def test_a_baseline_status_of_nan_is_a_usage_error(pytester, suite):
    suite("host", TOUCH)
    (pytester.path / "nan.json").write_text('{"schema": "pytest-dgxspark/results/v1", "verdict": NaN}')
    usage_error(pytester.runpytest(*SITE_ARGS, "--dgxspark-baseline", "nan.json"),
                "*--dgxspark-baseline nan.json: not JSON: NaN is no JSON number")


def test_a_yaml_document_nested_too_deep_is_refused():
    with pytest.raises(ValueError, match="nested deeper than 64 levels"):
        loads("a: " + "[" * 100 + "]" * 100, "x.yml")


def test_an_api_answer_nested_past_the_parser_is_refused_by_name():
    with pytest.raises(ValueError, match="GET /api/v1/nodes: nested deeper than the parser allows"):
        loads_json(b"[" * 200_000 + b"]" * 200_000, "GET /api/v1/nodes", max_depth=None)


def test_a_huge_recorded_value_is_cut_and_says_how_much_was_left_out():
    from pytest_dgxspark.judge.evidence import MAX_VALUE_CHARS, Evidence

    store: list = []
    Evidence(store).record("live HelmChart spec", {"valuesContent": "a: b\n" * 3_000_000})
    value = store[0]["value"]["valuesContent"]
    assert len(value) < MAX_VALUE_CHARS + 100
    assert value.startswith("a: b\n") and value.endswith(f"...({15_000_000 - MAX_VALUE_CHARS} characters left out)")
