"""The checks' own words: no partial passes, unreadable evidence is an error, messages say what was seen.

Each case runs the real suites against a testbed scenario written here (extending a bundled one) and asserts the
rule's status and the exact words of its finding in results.json.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from tests.test_e2e import result_of, run_selected, selected

CONTAINERD_CONFIG = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"

# slow: the suite against a testbed per finding (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"
)]


def scenario(tmp_path: Path, spec: dict[str, Any], root_files: dict[str, str] | None = None) -> str:
    """A scenario directory extending a bundled scenario; root_files are laid over gpu-01's root (mode 0755)."""
    directory = tmp_path / "scenario"
    directory.mkdir()
    (directory / "scenario.yaml").write_text(yaml.safe_dump({"expect": {"rules": {}, "root_causes": []}, **spec}))
    for path, content in (root_files or {}).items():
        target = directory / "nodes" / "gpu-01" / "root" / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755)
    return str(directory)


def rule(doc: dict[str, Any], rule_id: str) -> dict[str, Any]:
    return next(r for r in doc["rules"] if r["id"] == rule_id)


def messages(doc: dict[str, Any], rule_id: str) -> list[str]:
    return [t["message"] for t in rule(doc, rule_id)["tests"] if t["message"]]


def evidence_of(doc_dir: Path, rule_id: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted((doc_dir / "evidence").glob("*.json")):
        item = json.loads(path.read_text())
        if item.get("rule") == rule_id:
            found.extend(item["items"])
    return found


def _a_cuda_sample_with_exec_format_error_reports_state_and_log_not_a_timeout(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "F25", "extends": "healthy",
                               "cluster": {"workload": {"outcome": "failed", "failure": "F25"}}})
    return ("--testbed", name, "--dgxspark-cuda-timeout", "120")


def _a_crash_looping_device_plugin_is_summed_up_with_its_log_and_the_known_floor(tmp_path: Path) -> tuple[str, ...]:
    return ("--testbed", "device-plugin-crashloop")


def _no_finding_carries_assertion_introspection_or_object_reprs(tmp_path: Path) -> tuple[str, ...]:
    return ("--testbed", "device-plugin-crashloop")


def _nvidia_smi_exit_127_says_it_is_not_installed(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "no nvidia-smi", "extends": "healthy"},
                    {"/usr/bin/nvidia-smi": "#!/bin/sh\necho 'sh: 1: nvidia-smi: not found' >&2\nexit 127\n"})
    return ("--testbed", name)


def _a_missing_rke2_unit_is_said_to_not_exist(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "no rke2-server unit", "extends": "healthy",
                               "nodes": {"gpu-01": {"host": {"services": {"rke2-server": None}}}}})
    return ("--testbed", name)


def _a_host_without_systemd_cannot_run_the_rke2_unit(tmp_path: Path) -> tuple[str, ...]:
    # systemctl's own words when PID 1 is not systemd (as in a container; measured on this project's CI machine)
    no_systemd = {"stdout": "", "rc": 1, "stderr": "System has not been booted with systemd as init system (PID 1). "
                  "Can't operate.\nFailed to connect to bus: Host is down\n"}
    show = "systemctl show -p LoadState,ActiveState,SubState,UnitFileState,ActiveEnterTimestamp {}.service"
    name = scenario(tmp_path, {"description": "PID 1 is not systemd", "extends": "healthy", "nodes": {"gpu-01": {
        "host": {"outputs": {show.format(u): no_systemd for u in ("rke2-server", "rke2-agent")}}}}})
    return ("--testbed", name)


def _the_wrong_driver_flavour_claims_only_what_was_seen(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "proprietary, nvidia-smi answers", "extends": "healthy",
                               "nodes": {"gpu-01": {"host": {"driver": {"flavour": "proprietary"}}}}})
    return ("--testbed", name)


def _no_kubelet_process_is_an_error_of_the_docker_check_not_a_pass(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "rke2 runs, no kubelet", "extends": "healthy", "nodes": {"gpu-01": {
        "host": {"processes": ["/usr/local/bin/rke2 server",
                               "containerd -c /var/lib/rancher/rke2/agent/etc/containerd/config.toml -a "
                               "/run/k3s/containerd/containerd.sock --state /run/k3s/containerd"]}}}})
    return ("--testbed", name)


def _an_unparsable_runtime_version_is_an_error_not_a_pass(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "odd runtime version", "extends": "healthy",
                               "nodes": {"gpu-01": {"kube": {"container_runtime": "containerd"}}}})
    return ("--testbed", name)


def _unparsable_containerd_toml_is_an_error_of_gpu_injection(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "broken TOML", "extends": "healthy", "nodes": {"gpu-01": {"host": {
        "files": {CONTAINERD_CONFIG: "version = 3\n[plugins.'io.containerd.cri.v1.runtime'\n  # nvidia\n  enable_cdi = \n"}}}}})
    return ("--testbed", name)


def _an_ownerless_look_alike_pod_is_not_the_device_plugin(tmp_path: Path) -> tuple[str, ...]:
    look_alike = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "nvidia-device-plugin-daemonset-hand1", "namespace": "gpu-operator"},
        "spec": {"nodeName": "gpu-01", "containers": [{"name": "nvidia-device-plugin",
                                                       "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.2"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "nvidia-device-plugin", "ready": True, "restartCount": 0,
                                          "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.2",
                                          "state": {"running": {"startedAt": "2026-12-01T08:00:00Z"}}}]},
    }
    name = scenario(tmp_path, {"description": "hand-made device plugin pod", "extends": "healthy", "cluster": {
        "gpu_operator": {"components": {"device-plugin": {"state": "absent"}}}, "objects": [look_alike]}})
    return ("--testbed", name)


def _checks_the_operator_never_reached_say_so_instead_of_passing(tmp_path: Path) -> tuple[str, ...]:
    return ("--testbed", "clusterpolicy-not-ready")


def _a_site_repository_without_makefile_makes_operator_separate_an_error(tmp_path: Path) -> tuple[str, ...]:
    import shutil

    from tests.conftest import REPO

    site = tmp_path / "elsewhere" / "site"
    shutil.copytree(REPO / "sites" / "tirosh-home", site)
    vars_yml = site / "rke2" / "vars.yml"  # and no Argo CD management context: argocd-registered cannot be verified
    vars_yml.write_text("".join(ln for ln in vars_yml.read_text().splitlines(True) if not ln.startswith("argocd_context:")))
    return ("--testbed", "healthy", "--site", str(site))


def _the_hardening_baseline_records_what_it_saw(tmp_path: Path) -> tuple[str, ...]:
    return ("--testbed", "healthy")


def _a_driver_probe_that_never_completed_is_an_error_not_no_driver(tmp_path: Path) -> tuple[str, ...]:
    # the probe's last command ends as the per-command timeout does (exit 124), as on a frozen host
    name = scenario(tmp_path, {"description": "driver probe times out", "extends": "healthy"},
                    {"/usr/sbin/modinfo": "#!/bin/sh\nexit 124\n"})
    return ("--testbed", name)


def _a_command_killed_by_the_timeout_is_an_error_not_a_finding(tmp_path: Path) -> tuple[str, ...]:
    # pgrep ends as the per-command timeout does (exit 124), as on a host that stopped answering mid-command
    name = scenario(tmp_path, {"description": "pgrep times out", "extends": "healthy"},
                    {"/usr/bin/pgrep": "#!/bin/sh\nexit 124\n"})
    return ("--testbed", name)


def _crds_the_api_does_not_serve_are_findings_that_say_so_never_none_found(tmp_path: Path) -> tuple[str, ...]:
    name = scenario(tmp_path, {"description": "no HelmChart, no ClusterPolicy CRD", "extends": "healthy",
                               "cluster": {"crds_absent": ["helmcharts", "clusterpolicies"]}})
    return ("--testbed", name, "--dgxspark-no-block")


# test name -> the function that writes its scenario into the run's folder and returns the suite arguments
RUNS: dict[str, Callable[[Path], tuple[str, ...]]] = {f"test{run.__name__}": run for run in (
    _a_cuda_sample_with_exec_format_error_reports_state_and_log_not_a_timeout,
    _a_crash_looping_device_plugin_is_summed_up_with_its_log_and_the_known_floor,
    _no_finding_carries_assertion_introspection_or_object_reprs,
    _nvidia_smi_exit_127_says_it_is_not_installed,
    _a_missing_rke2_unit_is_said_to_not_exist,
    _a_host_without_systemd_cannot_run_the_rke2_unit,
    _the_wrong_driver_flavour_claims_only_what_was_seen,
    _no_kubelet_process_is_an_error_of_the_docker_check_not_a_pass,
    _an_unparsable_runtime_version_is_an_error_not_a_pass,
    _unparsable_containerd_toml_is_an_error_of_gpu_injection,
    _an_ownerless_look_alike_pod_is_not_the_device_plugin,
    _checks_the_operator_never_reached_say_so_instead_of_passing,
    _a_site_repository_without_makefile_makes_operator_separate_an_error,
    _the_hardening_baseline_records_what_it_saw,
    _a_driver_probe_that_never_completed_is_an_error_not_no_driver,
    _a_command_killed_by_the_timeout_is_an_error_not_a_finding,
    _crds_the_api_does_not_serve_are_findings_that_say_so_never_none_found,
)}


@pytest.fixture(scope="module")
def finding_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The suite runs of the selected tests, E2E_WORKERS at a time (each test's scenario is written by RUNS)."""
    return run_selected(tmp_path_factory, selected(request), RUNS)


def test_a_cuda_sample_with_exec_format_error_reports_state_and_log_not_a_timeout(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0002.cuda-sample")["status"] == "failed"
    [message] = messages(doc, "ADR-0002.cuda-sample")
    assert "pod cuda-vectoradd-0 is Failed: container cuda-vectoradd terminated Error with exit code 255" in message
    assert "its log says 'exec /cuda-samples/vectorAdd: exec format error'" in message
    assert "has no build for this node's architecture (a DGX Spark is arm64)" in message
    assert "within" not in message and "timeout" not in message
    seconds = float(re.search(r"seen ([0-9.]+) s after its creation", message).group(1))
    assert seconds < 60, "the sample must fail fast once its pod terminated, not wait out the timeout"


def test_a_crash_looping_device_plugin_is_summed_up_with_its_log_and_the_known_floor(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    operand = next(m for m in messages(doc, "ADR-0002.operator-components") if "operands not Ready" in m)
    assert ("nvidia-device-plugin-daemonset-" in operand and "container nvidia-device-plugin waiting CrashLoopBackOff, "
            "14 restarts, last exit 1 Error" in operand)
    assert "error getting device memory: Not Supported'" in operand
    assert ("GB10 needs device plugin v0.17.4 or later, the pod runs nvcr.io/nvidia/k8s-device-plugin:v0.17.1"
            in operand)
    stories = next(e["value"] for e in evidence_of(tmp_path / "reports" / "latest", "ADR-0002.operator-components")
                   if e["label"].startswith("operand pods not Ready"))
    plugin = next(s for s in stories if s["pod"].startswith("nvidia-device-plugin-daemonset-"))
    assert set(plugin["logs"]) == {"nvidia-device-plugin", "nvidia-device-plugin (previous)"}
    assert "error getting device memory: Not Supported" in plugin["logs"]["nvidia-device-plugin"]
    # the previous instance's log is asked for too: its text, or the API's own reason when the kubelet kept none
    previous = plugin["logs"]["nvidia-device-plugin (previous)"]
    assert "error getting device memory: Not Supported" in previous or previous.startswith("no log: HTTP 400: ")


def test_no_finding_carries_assertion_introspection_or_object_reprs(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    said = [t["message"] for r in doc["rules"] for t in r["tests"] if t["outcome"] == "failed"]
    assert said
    for message in said:
        assert not re.search(r"^assert |\nassert |Left contains|Use -v to get|object at 0x|AssertionError", message), message


def test_nvidia_smi_exit_127_says_it_is_not_installed(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0002.host-driver")["status"] == "failed"
    smi = next(m for m in messages(doc, "ADR-0002.host-driver") if "nvidia-smi" in m)
    assert "nvidia-smi is not installed (exit 127, command not found)" in smi
    assert "not a documented nvidia-smi exit status" not in smi


def test_a_missing_rke2_unit_is_said_to_not_exist(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0001.rke2-service")["status"] == "failed"
    [message] = messages(doc, "ADR-0001.rke2-service")
    assert message.startswith("rke2-server.service does not exist on gpu-01 (")
    assert message.endswith("RKE2 is not installed for role server; run make rke2/server/install")


def test_a_host_without_systemd_cannot_run_the_rke2_unit(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0001.rke2-service")["status"] == "failed"  # an observation, never "unreadable"
    [message] = messages(doc, "ADR-0001.rke2-service")
    assert message.endswith(": systemd is not running (systemctl: 'System has not been booted with systemd as init "
                            "system (PID 1). Can't operate.'): gpu-01 was not booted with systemd, so RKE2's "
                            "rke2-server.service cannot run there")
    assert doc["root_causes"][:1] == ["ADR-0001.rke2-service"] and doc["not_judged"] == []


def test_the_wrong_driver_flavour_claims_only_what_was_seen(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    flavour = next(m for m in messages(doc, "ADR-0002.host-driver") if "OPEN kernel modules" in m)
    assert "the kernel log shows 'NVRM: GPU 000f:01:00.0: RmInitAdapter failed! (0x62:0x1a:2631)'" in flavour
    assert "hang" not in flavour
    assert not any("did not answer" in m for m in messages(doc, "ADR-0002.host-driver"))


def test_no_kubelet_process_is_an_error_of_the_docker_check_not_a_pass(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0001.runtime-rke2-containerd")["status"] == "failed"
    for rule_id in ("ADR-0001.no-docker-cri", "ADR-0001.no-extra-containerd"):
        assert rule(doc, rule_id)["status"] == "error", rule_id
        [message] = messages(doc, rule_id)
        assert "no kubelet process (pgrep -x kubelet), so the runtime endpoint the kubelet uses cannot be observed" in message


def test_an_unparsable_runtime_version_is_an_error_not_a_pass(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0001.no-extra-containerd")["status"] == "error"
    [message] = messages(doc, "ADR-0001.no-extra-containerd")
    assert "containerRuntimeVersion 'containerd' is not <runtime>://<version>" in message


def test_unparsable_containerd_toml_is_an_error_of_gpu_injection(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0002.gpu-injection")["status"] == "error"
    message = next(m for m in messages(doc, "ADR-0002.gpu-injection") if "TOML" in m)
    assert f"{CONTAINERD_CONFIG} is not valid TOML, so how containerd injects GPUs cannot be read" in message


def test_an_ownerless_look_alike_pod_is_not_the_device_plugin(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0002.operator-components")["status"] == "failed"
    assert any("on gpu-01: no nvidia-device-plugin-daemonset pod" in m
               for m in messages(doc, "ADR-0002.operator-components"))


def test_checks_the_operator_never_reached_say_so_instead_of_passing(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    outcomes = {t["nodeid"].split("::")[1].split("[")[0]: (t["outcome"], t["message"])
                for rule_id in ("ADR-0002.driver-source", "ADR-0002.gpu-injection") for t in rule(doc, rule_id)["tests"]}
    outcome, message = outcomes["test_operator_driver_label_names_the_driver_source"]
    assert outcome == "not-applicable"
    assert message == ("the GPU Operator has not processed node gpu-01 (no nvidia.com/gpu.deploy.* label), so "
                       "k8s-driver-manager has not set nvidia.com/gpu.deploy.driver yet; operator-running judges why")
    outcome, message = outcomes["test_toolkit_nri_plugin_and_cdi_specs_serve_the_node"]
    assert outcome == "not-applicable"
    assert message.startswith("no nvidia-container-toolkit-daemonset pod is scheduled on node gpu-01")
    assert outcomes["test_exactly_one_driver_source"][0] == "passed"


def test_a_site_repository_without_makefile_makes_operator_separate_an_error(finding_runs, request):
    """...and a site without argocd_context makes argocd-registered not verifiable: errors, each with its own fix,
    listed as not judged, never as root causes, in results.json and the closing block alike."""
    tmp_path, proc, doc = result_of(finding_runs, request.node.name)
    site = tmp_path / "elsewhere" / "site"
    assert rule(doc, "ADR-0002.operator-separate")["status"] == "error"
    for message in messages(doc, "ADR-0002.operator-separate"):
        assert message == (f"{site}: no Makefile or provisioning/*.mk in the folders from the site up to {tmp_path} "
                           "(where its repository should be), so the RKE2 install targets and the GPU Operator apply "
                           "target cannot be read")
    argo = rule(doc, "ADR-0001.argocd-registered")
    assert argo["status"] == "error" and [t["outcome"] for t in argo["tests"]] == ["error"]
    assert messages(doc, "ADR-0001.argocd-registered") == [
        f"not verifiable: {site}/rke2/vars.yml names no Argo CD management cluster (argocd_context), so whether this "
        "cluster is registered in Argo CD cannot be checked"]
    assert doc["root_causes"] == [] and doc["verdict"] == "INCOMPLETE"
    fixes = {d["rule"]: (d["kind"], d["fix"]) for d in doc["not_judged"]}
    assert fixes["ADR-0002.operator-separate"] == ("unreadable", (
        "Run the suite on the site inside its repository: --site <repository>/sites/<name>, where the repository holds "
        "the Makefile and provisioning/*.mk (ADR 0001 §6-3: install by make targets); or check ADR 0002 §5-4 by hand"))
    assert fixes["ADR-0001.argocd-registered"] == ("not-verifiable", (
        f"Set argocd_context in {site}/rke2/vars.yml (the management cluster's kubeconfig context) and rerun."))
    assert "  root causes: none" in proc.stdout and "Make the target reachable" not in proc.stdout
    assert "ERROR suites/gitops/test_argocd_registered.py::test_cluster_secret_points_at_this_cluster" in proc.stdout


def test_the_hardening_baseline_records_what_it_saw(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    [baseline] = [e["value"] for e in evidence_of(tmp_path / "reports" / "latest", "ADR-0001.hardening-baseline")
                  if e["label"] == "hardening baseline"]
    assert baseline["cis_profile"] == "none (RKE2 runs without a CIS profile)"
    assert baseline["kube-apiserver (running) hardening flags"] == "no kube-apiserver process found"


def test_a_driver_probe_that_never_completed_is_an_error_not_no_driver(finding_runs, request):
    tmp_path, _, doc = result_of(finding_runs, request.node.name)
    assert rule(doc, "ADR-0002.driver-source")["status"] == "error"
    assert any(m.startswith("gpu-01 (") and "the driver probe did not complete (exit 124: no output): which driver the host "
               "has cannot be read" in m for m in messages(doc, "ADR-0002.driver-source"))


def test_a_command_killed_by_the_timeout_is_an_error_not_a_finding(finding_runs, request):
    _, _, doc = result_of(finding_runs, request.node.name)
    for rule_id in ("ADR-0001.no-docker-cri", "ADR-0001.no-extra-containerd"):
        assert rule(doc, rule_id)["status"] == "error", rule_id
        [message] = messages(doc, rule_id)
        assert "`pid=$(pgrep -o -x kubelet) && cat /proc/$pid/cmdline` did not complete (exit 124)" in message


def test_a_404_on_a_built_in_list_is_an_error_and_on_a_crd_list_says_the_crd_is_not_served():
    from kubernetes.client.exceptions import ApiException

    from pytest_dgxspark.targets.cluster import Cluster, ClusterUnreachable, CrdNotServed

    cluster = Cluster(None, "site/rke2/gpu")
    asked = []

    def not_found(path, query=None):
        asked.append(path)
        raise ApiException(status=404, reason="Not Found")

    cluster.get = not_found
    for _ in range(2):  # asked once; every later list says the same
        with pytest.raises(CrdNotServed) as not_served:
            cluster.list("clusterpolicies")
        assert str(not_served.value) == (
            "Kubernetes API of context 'site/rke2/gpu' (?): GET /apis/nvidia.com/v1/clusterpolicies answered 404 Not "
            "Found: nvidia.com/v1 ClusterPolicy is not served (the GPU Operator's CRD is not installed): the GPU Operator "
            "chart was never installed here or its CRDs were removed")
    assert asked == ["/apis/nvidia.com/v1/clusterpolicies"] and cluster.cached("clusterpolicies") is None
    assert isinstance(not_served.value, pytest.fail.Exception)  # a finding of the check that needed it, no traceback
    assert not_served.value.fix.startswith(  # its own fix: what serves the CRD, not what needs it
        "The ClusterPolicy CRD comes with the GPU Operator chart: apply it with make rke2/gpu/operator/apply")
    assert not_served.value.fix_ko.startswith("ClusterPolicy CRD는 GPU Operator chart와 함께 설치된다.")
    with pytest.raises(ClusterUnreachable) as raised:
        cluster.list("pods", namespace="gpu-operator")
    assert "GET /api/v1/pods answered 404 Not Found, which every Kubernetes API serves" in str(raised.value)


def test_crds_the_api_does_not_serve_are_findings_that_say_so_never_none_found(finding_runs, request):
    tmp_path, proc, doc = result_of(finding_runs, request.node.name)
    helm_404 = ("GET /apis/helm.cattle.io/v1/helmcharts answered 404 Not Found: RKE2's helm-controller is not serving "
                "helm.cattle.io/v1 (the HelmChart CRD is not installed)")
    policy_404 = ("GET /apis/nvidia.com/v1/clusterpolicies answered 404 Not Found: nvidia.com/v1 ClusterPolicy is not "
                  "served (the GPU Operator's CRD is not installed)")
    assert rule(doc, "ADR-0002.helmchart-live")["status"] == "failed"
    assert all(helm_404 in m for m in messages(doc, "ADR-0002.helmchart-live"))
    for rule_id in ("ADR-0002.operator-running", "ADR-0002.operator-components"):
        assert rule(doc, rule_id)["status"] == "failed", rule_id
        assert any(policy_404 in m for m in messages(doc, rule_id)), rule_id
    for rule_id in ("ADR-0002.helmchart-live", "ADR-0002.operator-running", "ADR-0002.operator-components"):
        assert not any("no HelmChart kube-system/" in m or "no ClusterPolicy (nvidia.com/v1)" in m
                       for m in messages(doc, rule_id)), rule_id
    assert "Traceback" not in proc.stdout and "cluster.py" not in proc.stdout
    # the fix is whatever serves the CRD (RKE2's helm-controller; the operator chart), not the rule's re-apply
    fixes = {d["rule"]: (d["fix"], d["fix_ko"]) for d in doc["root_cause_details"]}
    assert fixes["ADR-0002.helmchart-live"][0].startswith(
        "The HelmChart CRDs come with RKE2's helm-controller in rke2-server: check rke2-server on the server node")
    assert fixes["ADR-0002.helmchart-live"][1].startswith("HelmChart CRD는 rke2-server의 helm-controller가 제공한다.")
    assert "ADR-0002.operator-running" not in fixes  # under the failed helmchart-live: never a second root cause
    [nri] = [e["value"] for e in evidence_of(tmp_path / "reports" / "latest", "ADR-0002.gpu-injection")
             if e["label"] == "NRI"]
    assert nri["ClusterPolicy spec.cdi.nriPluginEnabled (recorded)"].startswith("not served: ")
