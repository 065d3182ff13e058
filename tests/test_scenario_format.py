"""The scenario format is a contract: every file names its `format`; a file without it is read as format 1, and a key
format 2 removed or renamed is refused with a message naming what replaces it, before any target is touched."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_dgxspark.testbed import cli
from pytest_dgxspark.testbed.scenario import BUNDLED_DIR, REMOVED_IN_FORMAT_2, ScenarioError, load
from tests.pytester_args import SITE_ARGS

REPO = Path(__file__).resolve().parents[1]
FORMAT_1 = REPO / "tests" / "scenarios" / "format-1"
SUFFIX = ("format: absent, so the file is read as format 1 (the earliest): make the changes above and add 'format: 2' "
          '(docs/scenarios.md "Format changelog")')
TOUCH = "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    raise SystemExit('touched a target')\n"


def _write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "scenario.yaml").write_text(text)
    return directory


def test_every_bundled_and_test_scenario_declares_the_current_format() -> None:
    files = sorted(BUNDLED_DIR.glob("*/scenario.yaml")) + sorted((REPO / "tests" / "scenarios").glob("*/scenario.yaml"))
    assert len(files) > 30
    undeclared = [str(f) for f in files if yaml.safe_load(f.read_text()).get("format") != 2]
    assert undeclared == []


def test_the_docs_scenario_examples_declare_the_current_format() -> None:
    text = (REPO / "docs" / "scenarios.md").read_text()
    examples = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if re.search(r"^description:", b, re.M)]
    assert len(examples) >= 2
    assert [b for b in examples if not re.search(r"^format: 2\b", b, re.M)] == []


def test_the_changelog_names_every_removed_key() -> None:
    text = (REPO / "docs" / "scenarios.md").read_text()
    changelog = text[text.index("## Format changelog"):]
    missing = [key for key in REMOVED_IN_FORMAT_2 if f"`{key.replace('*', '<name>')}`" not in changelog]
    assert missing == []


def test_a_scenario_written_for_the_earlier_format_names_each_replacement_key() -> None:
    path = FORMAT_1 / "nvml-missing" / "scenario.yaml"
    with pytest.raises(ScenarioError) as raised:
        load(path.parent)
    assert str(raised.value) == (
        f"{path}: nodes.gpu-01.kube.gpus: removed in scenario format 2; nvidia.com/gpu is what the device plugin "
        "registers, one per GPU in nodes.gpu-01.host.gpus; write nodes.gpu-01.kube.gpus_lost: true for a node that lost "
        "it after validation (or nodes.gpu-01.kube.allocatable_gpus for allocatable alone); "
        "nodes.gpu-01.kube.gfd_labels: removed in scenario format 2; GFD writes its labels when it runs; write "
        "cluster.gpu_operator.components.gfd.wrote_labels: false for a GFD that runs without them; "
        "cluster.gpu_operator.cuda_validator: removed in scenario format 2; the validator's pods follow the start-up "
        "order; write cluster.gpu_operator.components.validator (state, logs) to override them; "
        "cluster.gpu_operator.clusterpolicy: removed in scenario format 2; the ClusterPolicy's state follows its "
        "operands' readiness; write cluster.gpu_operator.components.<component>.state (e.g. device-plugin: "
        "{state: crashloop}); " + SUFFIX)


@pytest.mark.parametrize(("body", "where", "replacement"), [
    ("nodes: {dc-01: {kube: {gpus: 8}}}", "nodes.dc-01.kube.gpus", "nodes.dc-01.kube.gpus_lost: true"),
    ("nodes: {gpu-01: {kube: {gfd_labels: false}}}", "nodes.gpu-01.kube.gfd_labels",
     "cluster.gpu_operator.components.gfd.wrote_labels: false"),
    ("nodes: {gpu-01: {kube: {operator_labels: false}}}", "nodes.gpu-01.kube.operator_labels",
     "nodes.gpu-01.kube.labels: {feature.node.kubernetes.io/pci-10de.present: null}"),
    ("nodes: {gpu-01: {kube: {driver_deploy: 'true'}}}", "nodes.gpu-01.kube.driver_deploy",
     "nodes.gpu-01.host.driver.loaded"),
    ("cluster: {gpu_operator: {cuda_validator: absent}}", "cluster.gpu_operator.cuda_validator",
     "cluster.gpu_operator.components.validator"),
    ("cluster: {gpu_operator: {clusterpolicy: {state: ready, reason: NoGPUNodes}}}", "cluster.gpu_operator.clusterpolicy",
     "cluster.gpu_operator.components.<component>.state"),
    ("cluster: {gpu_operator: {helmchart_spec: {version: v25.3.0}}}", "cluster.gpu_operator.helmchart_spec",
     "renamed cluster.gpu_operator.helmchart"),
    ("cluster: {cilium: {hubble_enabled: true}}", "cluster.cilium", "renamed cluster.cilium_values"),
    ("cluster: {cilium_config: false}", "cluster.cilium_config", "cluster.cilium_values: null"),
], ids=lambda v: v if isinstance(v, str) and "." in v and " " not in v else None)
def test_each_key_format_2_removed_is_refused_naming_its_replacement(tmp_path: Path, body, where, replacement) -> None:
    directory = _write(tmp_path / "old", f"description: x\nextends: healthy\n{body}\n")
    with pytest.raises(ScenarioError) as raised:
        load(directory)
    message = str(raised.value)
    assert message.startswith(f"{directory / 'scenario.yaml'}: {where}: removed in scenario format 2; "), message
    assert replacement in message and message.endswith("; " + SUFFIX)


def test_a_removed_key_in_a_format_2_file_is_refused_without_the_format_1_advice(tmp_path: Path) -> None:
    directory = _write(tmp_path / "new", "format: 2\ndescription: x\nextends: healthy\ncluster: {cilium_config: false}\n")
    with pytest.raises(ScenarioError) as raised:
        load(directory)
    assert str(raised.value) == (f"{directory / 'scenario.yaml'}: cluster.cilium_config: removed in scenario format 2; "
                                 "write cluster.cilium_values: null for no rke2-cilium HelmChartConfig (was "
                                 "cilium_config: false)")


def test_an_earlier_format_file_without_removed_keys_loads_as_its_current_twin() -> None:
    old = load(FORMAT_1 / "cilium-drift")
    new = load("cilium-drift")
    assert old.data == new.data and "format" not in old.data
    assert old.expect == new.expect


def test_an_earlier_format_file_without_extends_is_refused_naming_what_it_took_from_the_site(tmp_path: Path) -> None:
    directory = _write(tmp_path / "alone", "description: x\nnodes: {gpu-01: {role: server}}\n")
    with pytest.raises(ScenarioError) as raised:
        load(directory)
    assert str(raised.value) == (
        f"{directory / 'scenario.yaml'}: extends: absent, and a format 1 scenario without it took "
        "nodes.<name>.node_labels, cluster.cni, cluster.cilium_values, cluster.kube_proxy, "
        "cluster.gpu_operator.helmchart, management.namespace from the site; format 2 takes them from the scenario: add "
        "'extends: healthy' or write them; " + SUFFIX)
    _write(directory, "format: 2\ndescription: x\nnodes: {gpu-01: {role: server}}\n")
    assert list(load(directory).nodes) == ["gpu-01"]


@pytest.mark.parametrize("value", ["3", "'2'", "true", "2.5", "null"])
def test_a_format_that_is_not_one_of_the_known_ones_is_refused(tmp_path: Path, value: str) -> None:
    directory = _write(tmp_path / "bad", f"format: {value}\ndescription: x\nextends: healthy\n")
    with pytest.raises(ScenarioError) as raised:
        load(directory)
    shown = {"3": "3", "'2'": "'2'", "true": "True", "2.5": "2.5", "null": "None"}[value]
    assert str(raised.value) == (f"{directory / 'scenario.yaml'}: format: {shown}, expected one of [1, 2] (the scenario "
                                 'format; 2 is the current one, docs/scenarios.md "Format changelog")')


def test_an_earlier_format_scenario_is_a_usage_error_before_any_target_is_touched(pytester, suite) -> None:
    suite("host", TOUCH)
    old = pytester.path / "rehearsal"
    old.mkdir()
    (old / "scenario.yaml").write_text((FORMAT_1 / "clusterpolicy-not-ready" / "scenario.yaml").read_text())
    result = pytester.runpytest(*SITE_ARGS, "--testbed", "rehearsal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR == 4, result.stdout.str() + result.stderr.str()
    assert "touched a target" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([
        f"*--testbed rehearsal: {old / 'scenario.yaml'}: nodes.gpu-01.kube.gpus: removed in scenario format 2; *"
        "nodes.gpu-01.kube.operator_labels: removed in scenario format 2; the operator labels the nodes NFD labelled; "
        "write nodes.gpu-01.kube.labels: {feature.node.kubernetes.io/pci-10de.present: null} for a node it does not see;*"
        "cluster.gpu_operator.clusterpolicy: removed in scenario format 2; *" + SUFFIX])
    assert not (pytester.path / "out").exists() or not any((pytester.path / "out").iterdir())


def test_the_testbed_cli_refuses_an_earlier_format_scenario_before_making_anything(tmp_path: Path, capsys) -> None:
    assert cli.main(["up", str(FORMAT_1 / "nvml-missing"), "--dir", str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dgxspark-testbed up: {FORMAT_1 / 'nvml-missing' / 'scenario.yaml'}: nodes.gpu-01.kube.gpus: "
                          "removed in scenario format 2; ")
    assert err.rstrip().endswith(SUFFIX) and not (tmp_path / "tb").exists()


@pytest.mark.parametrize(("body", "said"), [
    ("cluster: [1]", "cluster: expected a mapping, got list '[1]'"),
    ("management: [1]", "management: expected a mapping, got list '[1]'"),
    ("nodes: {gpu-01: [1]}", "nodes.gpu-01: expected a mapping, got list '[1]'"),
    ("nodes: {gpu-01: {kube: [1]}}", "nodes.gpu-01.kube: expected a mapping, got list '[1]'"),
    ("cluster: {faults: {latency_ms: fast}}", "cluster.faults.latency_ms: 'fast', expected a number of at least 0"),
    ("cluster: {faults: {errors: [1]}}", "cluster.faults.errors: expected a mapping of path regex to"),
    ("cluster: {faults: {errors: {'.*': {status: abc}}}}", "cluster.faults.errors['.*'].status: abc is not one of"),
    ("management: {faults: {latency_ms: -1}}", "management.faults.latency_ms: -1, expected a number of at least 0"),
], ids=["cluster-list", "management-list", "node-list", "kube-list", "latency-word", "errors-list", "status-word",
        "management-latency"])
def test_a_value_of_the_wrong_shape_is_named_with_what_was_expected_never_a_traceback(tmp_path: Path, body, said) -> None:
    # each of these raised AttributeError or ValueError inside the loader: an INTERNALERROR traceback, exit 3, no report
    directory = _write(tmp_path / "shape", f"format: 2\ndescription: x\nextends: healthy\n{body}\n")
    with pytest.raises(ScenarioError) as raised:
        load(directory)
    assert str(raised.value).startswith(f"{directory / 'scenario.yaml'}: ") and said in str(raised.value), raised.value
