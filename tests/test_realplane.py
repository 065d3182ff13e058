"""The real control plane's pieces that need no binaries: the build script without Go, the upstream CRD, the world as
written to the real API, the kwok stages and the plan's check of `--testbed-api`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pytest_dgxspark.kube.isolation import PROBE_COMMAND
from tests.conftest import REPO
from tests.pytester_args import SITE_ARGS

BUILD = REPO / "pytest_dgxspark" / "testbed" / "controlplane" / "build.sh"


def _world(name: str):
    from pytest_dgxspark.testbed import objects, scenario
    from pytest_dgxspark.testbed.world import make_context

    sc = scenario.load(name)
    return objects.build_workload(make_context(sc, {n: f"172.29.9.{4 * i + 2}" for i, n in enumerate(sc.nodes)}))


def test_the_build_without_go_says_so_in_one_line_and_lets_setup_go_on(tmp_path):
    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "go").exists())
    env = {"PATH": path, "HOME": str(tmp_path), "DGXSPARK_CONTROLPLANE_BIN": str(tmp_path / "bin")}
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "controlplane: NOT BUILT: no Go toolchain on PATH (needs go >= 1.24); --testbed-api real is unavailable, "
        "the rest runs on the Python stand-in"]
    assert not (tmp_path / "bin").exists()


def test_every_staging_module_is_replaced_by_the_release_of_the_same_patch():
    gomod = (BUILD.parent / "kubernetes" / "go.mod").read_text()
    version = next(line.split()[1] for line in gomod.splitlines() if line.split()[:1] == ["k8s.io/kubernetes"])
    replaced = [line.split() for line in gomod.splitlines() if "=>" in line]
    assert version.startswith("v1.34.") and len(replaced) >= 30
    assert {r[-1] for r in replaced} == {"v0." + version.removeprefix("v1.")}
    assert all(r[0] == r[2] and r[0].startswith("k8s.io/") for r in replaced)


def test_the_clusterpolicy_crd_is_the_gpu_operators_own_trimmed_below_spec_driver_fields():
    from pytest_dgxspark.testbed import realworld

    crd = next(c for c in realworld.crds(_world("healthy")) if c["metadata"]["name"] == "clusterpolicies.nvidia.com")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    driver = schema["properties"]["spec"]["properties"]["driver"]
    assert driver["description"] == "Driver component spec"
    for field in ("enabled", "kernelModuleType", "usePrecompiled", "licensingConfig", "repository", "image", "version"):
        assert field in driver["properties"], field
    assert driver["properties"]["kernelModuleType"]["enum"] == ["auto", "open", "proprietary"]
    assert driver["properties"]["licensingConfig"].get("x-kubernetes-preserve-unknown-fields") is True
    assert "required" in schema["properties"]["spec"]  # upstream's required operands stay required
    head = (realworld.CRD_DIR / "clusterpolicies.nvidia.com.yaml").read_text().splitlines()[0]
    assert "NVIDIA/gpu-operator v26.3.2" in head


def test_crds_a_scenario_leaves_absent_are_not_written():
    from pytest_dgxspark.testbed import realworld

    world = _world("healthy")
    world.settings["crds_absent"] = ["clusterpolicies"]
    assert "clusterpolicies.nvidia.com" not in [c["metadata"]["name"] for c in realworld.crds(world)]


def test_an_object_is_created_without_what_the_server_sets_and_with_its_owners_real_uid():
    from pytest_dgxspark.testbed.realworld import _for_create

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "kube-system", "uid": "old-pod", "resourceVersion": "7",
                        "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"controller-uid": "old-job"},
                        "ownerReferences": [{"kind": "Job", "name": "j", "uid": "old-job"}]},
           "spec": {"containers": [{"name": "c", "image": "i"}], "priority": 0, "preemptionPolicy": "PreemptLowerPriority"},
           "status": {"phase": "Running"}}
    body = _for_create(pod, {"old-job": "new-job"})
    assert set(body["metadata"]) == {"name", "namespace", "labels", "ownerReferences"}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "new-job"
    assert body["metadata"]["labels"]["controller-uid"] == "new-job"
    assert "status" not in body and "priority" not in body["spec"] and "preemptionPolicy" not in body["spec"]
    assert pod["metadata"]["uid"] == "old-pod"  # the world itself is left as it is


def _stages(name: str, tmp_path: Path, **workload) -> dict[str, dict]:
    from pytest_dgxspark.testbed import realworld

    world = _world(name)
    world.settings["workload"].update(workload)
    path = realworld.kwok_config(world, tmp_path)
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Stage"}


def test_a_started_container_ends_only_once_kwokrun_has_named_its_exit_code(tmp_path):
    from pytest_dgxspark.testbed.kwokrun import EXIT_ANNOTATION

    stages = _stages("healthy", tmp_path)
    assert "phase: Running" in stages["gpu-start"]["spec"]["next"]["statusTemplate"]
    assert not any(name.startswith(("gpu-finish", "cpu-finish")) for name in stages)  # no end without the annotation
    key = f'.metadata.annotations["{EXIT_ANNOTATION}"]'
    done = stages["run-succeeded"]["spec"]
    assert "phase: Succeeded" in done["next"]["statusTemplate"] and "exitCode: 0, reason: Completed" in done["next"]["statusTemplate"]
    assert {"key": key, "operator": "In", "values": ["0"]} in done["selector"]["matchExpressions"]
    assert {"key": ".spec.restartPolicy", "operator": "In", "values": ["Never", "OnFailure"]} in done["selector"]["matchExpressions"]
    failed = stages["run-failed"]["spec"]
    assert "phase: Failed" in failed["next"]["statusTemplate"]
    assert f'exitCode: {{{{ index .metadata.annotations "{EXIT_ANNOTATION}" }}}}, reason: Error' in failed["next"]["statusTemplate"]
    assert "CrashLoopBackOff" in stages["run-restarted-error"]["spec"]["next"]["statusTemplate"]
    # a pod kwokrun has not decided (yet) shows no log; the CUDA sample's comes from its own Logs object
    assert (tmp_path / "controlplane" / "logs" / "later.log").read_text() == ""
    end, _ = _runner("healthy", tmp_path).decide(_probe("cuda", "gpu-01", gpus=1, command=None))
    assert (end.outcome, end.exit_code) == ("succeeded", 0) and "Test PASSED" in end.log


def test_an_admission_failure_fails_the_gpu_pod_with_its_reason_and_event(tmp_path):
    stages = _stages("cuda-failing", tmp_path)
    stage = stages["gpu-admission-error"]["spec"]["next"]
    assert "reason: UnexpectedAdmissionError" in stage["statusTemplate"] and "phase: Failed" in stage["statusTemplate"]
    assert stage["event"]["reason"] == "UnexpectedAdmissionError" and "gpu-start" not in stages


def _runner(name: str, tmp_path: Path, **workload):
    import json

    from pytest_dgxspark.testbed.kwokrun import Runner

    world = _world(name)
    world.settings["workload"].update(workload)
    return Runner(json.loads(world.to_json()), tmp_path)


def _probe(name: str, node: str, gpus: int | None = None, image: str = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04",
           command: list[str] | None = PROBE_COMMAND):
    from pytest_dgxspark.kube.podrun import pinned_pod

    pod = pinned_pod(name, image, {"metadata": {"name": node}}, app="probe", gpus=gpus, command=command)
    pod["metadata"]["namespace"] = "dgxspark-cuda-x"
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Pending"}
    return pod


def test_kwokrun_runs_the_isolation_probe_against_the_gpus_the_pod_holds(tmp_path):
    runner = _runner("healthy", tmp_path)
    end, names = runner.decide(_probe("none", "gpu-01"))
    assert (end.outcome, end.exit_code) == ("succeeded", 0)  # the probe's last step is an echo
    assert "ls: cannot access '/dev/nvidia*': No such file or directory" in end.log and "nvidia-smi: not found" in end.log
    end, _ = runner.decide(_probe("one", "gpu-01", gpus=1))
    assert "/dev/nvidia0" in end.log and "GPU 0: NVIDIA GB10 (UUID: GPU-" in end.log
    body = runner.log_body(_probe("one", "gpu-01", gpus=1), end, names)
    assert body["kind"] == "Logs" and body["metadata"] == {"name": "one", "namespace": "dgxspark-cuda-x"}
    assert Path(body["spec"]["logs"][0]["logsFile"]).read_text().count(" stdout F ") == len(end.log.splitlines())
    again, _ = runner.decide(_probe("one", "gpu-01", gpus=1))  # not written yet (an API error): the same decision
    assert again == end
    runner.decided(_probe("one", "gpu-01", gpus=1))
    assert runner.decide(_probe("one", "gpu-01", gpus=1)) is None  # decided once


def test_kwokrun_gives_an_unrequesting_pod_every_gpu_where_the_nvidia_runtime_honours_the_image_envvar(tmp_path):
    end, _ = _runner("nvidia-default-runtime", tmp_path).decide(_probe("none", "gpu-01"))
    assert "/dev/nvidia0" in end.log and "GPU 0: NVIDIA GB10" in end.log


def test_kwokrun_hands_out_each_gpu_once_until_its_pod_is_done(tmp_path):
    runner = _runner("healthy", tmp_path)
    first, _ = runner.decide(_probe("a", "gpu-01", gpus=1))
    second, _ = runner.decide(_probe("b", "gpu-01", gpus=1))
    assert "GPU 0:" in first.log and "GPU 0:" not in second.log  # the GB10 is held by the first
    runner.decide({**_probe("a", "gpu-01", gpus=1), "status": {"phase": "Succeeded"}})
    third, _ = runner.decide(_probe("c", "gpu-01", gpus=1))
    assert "GPU 0:" in third.log


def test_kwokrun_fails_an_image_without_the_nodes_architecture_with_exec_format_error(tmp_path):
    end, _ = _runner("healthy", tmp_path).decide(_probe("nbody", "gpu-01", gpus=1, image="nvcr.io/nvidia/k8s/cuda-sample:nbody"))
    assert (end.outcome, end.exit_code) == ("failed", 255) and "exec format error" in end.log


def test_kwokrun_leaves_the_scenarios_pods_and_a_pod_that_never_starts_to_kwok(tmp_path):
    runner = _runner("healthy", tmp_path)
    world_pod = next(o for o in _world("healthy").objects if o["kind"] == "Pod" and (o.get("spec") or {}).get("nodeName"))
    assert runner.decide(world_pod) is None
    assert runner.decide(_probe("typo", "gpu-01", image="nvcr.io/nvidia/k8s/cuda-sampel:typo")) is None  # ErrImagePull
    unbound = _probe("later", "gpu-01")
    del unbound["spec"]["nodeName"]
    assert runner.decide(unbound) is None
    failing = _runner("healthy", tmp_path, outcome="failed", failure="F24")  # UnexpectedAdmissionError
    assert failing.decide(_probe("gpu", "gpu-01", gpus=1)) is None


def test_known_and_unknown_images_take_disjoint_stages(tmp_path):
    stages = _stages("healthy", tmp_path)
    known = next(e for e in stages["gpu-start"]["spec"]["selector"]["matchExpressions"] if e["key"].endswith("image"))
    unknown = next(e for e in stages["gpu-pull-error"]["spec"]["selector"]["matchExpressions"] if e["key"].endswith("image"))
    assert (known["operator"], unknown["operator"]) == ("In", "NotIn") and known["values"] == unknown["values"]
    assert "busybox:1.36" in known["values"] and "docker.io/library/busybox:1.36" in known["values"]


def test_scenario_logs_are_cri_files_kwok_serves_per_pod_current_and_previous(tmp_path):
    from pytest_dgxspark.testbed import realworld
    from pytest_dgxspark.testbed.world import PREVIOUS

    world = _world("device-plugin-crashloop")
    path = realworld.kwok_config(world, tmp_path)
    assert [d["kind"] for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "Logs"] == []  # kwok watches them
    logs = {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"]["logs"]
            for d in realworld.log_objects(world, tmp_path)}
    previous = [k for k in world.logs if k.endswith(PREVIOUS)]
    assert previous, "the crashloop scenario has a previous log"
    ns, pod, container = previous[0].removesuffix(PREVIOUS).split("/", 2)
    entry = next(e for e in logs[(ns, pod)] if e["containers"] == [container])
    text = world.logs[previous[0]]
    assert Path(entry["previousLogsFile"]).read_text() == "".join(
        f"2026-01-01T00:00:00.000000000Z stdout F {line}\n" for line in text.splitlines())


def test_testbed_api_real_without_the_binaries_is_a_usage_error_naming_the_build(pytester, suite, monkeypatch):
    monkeypatch.setenv("DGXSPARK_CONTROLPLANE_BIN", str(pytester.path / "no-bin"))
    suite("rke2", "def test_x():\n    raise SystemExit('touched a target')\n")
    result = pytester.runpytest("--testbed", "healthy", "--testbed-api", "real", "--report-dir", "out", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--testbed-api real: the real control plane is not built: etcd, kube-apiserver, "
                                 "kube-controller-manager, kube-scheduler, kwok missing in *no-bin; run `make controlplane`*"])


def test_testbed_api_without_a_testbed_is_a_usage_error(pytester, suite):
    suite("rke2", "def test_x():\n    raise SystemExit('touched a target')\n")
    result = pytester.runpytest(*SITE_ARGS, "--testbed-api", "real")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--testbed-api real needs --testbed NAME*"])


def test_the_cli_refuses_real_without_binaries_before_starting_anything(tmp_path, monkeypatch):
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2")
    from pytest_dgxspark.testbed.cli import main

    monkeypatch.setenv("DGXSPARK_CONTROLPLANE_BIN", str(tmp_path / "no-bin"))
    assert main(["up", "healthy", "--dir", str(tmp_path / "tb"), "--api", "real"]) == 2
    assert not list((tmp_path / "tb").glob("*.log"))


@pytest.fixture
def proxied(tmp_path):
    """The fault proxy in front of a stand-in upstream that answers what reached it (identity headers, path)."""
    import json
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pytest_dgxspark.testbed import pki, realplane
    from pytest_dgxspark.testbed.faultproxy import Proxy
    from pytest_dgxspark.testbed.faults import Faults
    from tests.loopback import free_port

    ca = pki.make_ca("testbed-ca")
    cp = realplane.write_files(tmp_path, ca, "127.0.0.1", "gpu-01", {"t0k.en": ("testbed:token", "system:masters")})

    class Upstream(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            return

        def do_GET(self):
            peer = self.connection.getpeercert() or {}
            data = json.dumps({"path": self.path, "user": self.headers.get_all("X-Remote-User"),
                               "groups": self.headers.get_all("X-Remote-Group"),
                               "auth": self.headers.get("Authorization"),
                               "peer": [v for rdn in peer.get("subject", ()) for k, v in rdn if k == "commonName"]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    upstream = ThreadingHTTPServer(("127.0.0.1", free_port()), Upstream)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cp / "apiserver.crt", cp / "apiserver.key")
    context.load_verify_locations(cp / "front-proxy-ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED  # only the proxy's front-proxy certificate gets in
    upstream.socket = context.wrap_socket(upstream.socket, server_side=True)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()

    def start(faults: dict) -> tuple[str, int]:
        proxy = Proxy(("127.0.0.1", free_port()), upstream.server_address, cp, Faults(faults))
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        return proxy.server_address

    yield start, cp
    upstream.shutdown()


def _get(address, cp, path, headers=None, cert=True):
    import http.client
    import json
    import ssl

    context = ssl.create_default_context(cafile=str(cp / "ca.crt"))
    context.check_hostname = False
    if cert:
        from pytest_dgxspark.testbed.realapi import Api

        context = Api.from_kubeconfig(cp / "admin.kubeconfig").context
    conn = http.client.HTTPSConnection(*address, context=context, timeout=10)
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, json.loads(body) if body else None


def test_the_fault_proxy_passes_the_clients_certificate_identity_as_requestheaders_and_drops_forged_ones(proxied):
    start, cp = proxied
    address = start({})
    status, seen = _get(address, cp, "/api/v1/nodes?limit=1", {"X-Remote-User": "mallory", "X-Remote-Group": "system:masters"})
    assert status == 200 and seen["path"] == "/api/v1/nodes?limit=1"
    assert (seen["user"], seen["groups"], seen["peer"]) == (["system:admin"], ["system:masters"], ["front-proxy-client"])
    status, seen = _get(address, cp, "/version", {"Authorization": "Bearer t0k.en", "X-Remote-User": "mallory"}, cert=False)
    assert status == 200 and seen["user"] is None and seen["auth"] == "Bearer t0k.en"


def test_the_fault_proxy_answers_a_matching_path_with_the_status_a_real_server_sends(proxied):
    start, cp = proxied
    address = start({"errors": {"^/api/v1/pods$": {"status": 503, "rate": 1}}})
    status, body = _get(address, cp, "/api/v1/pods")
    assert status == 503 and (body["reason"], body["message"]) == (
        "ServiceUnavailable", "the server is currently unable to handle the request")
    assert _get(address, cp, "/api/v1/nodes")[0] == 200


def test_a_testbed_still_attaching_holds_the_plane_before_its_kwok_exists(tmp_path):
    """No binaries needed: the holder's own process lives (the wipe and the world take seconds before kwok starts),
    so a second testbed is refused; once that process is gone and no kwok of it lives, the plane is taken."""
    from pytest_dgxspark.testbed import keptplane

    plane = keptplane.Kept(tmp_path / "plane", "ns", "if", "172.29.250.1", "172.29.250.2", 30, [], "t", {})
    plane.directory.mkdir()
    first = tmp_path / "first"
    first.mkdir()
    (first / "state.json").write_text(json.dumps({"testbed_id": str(first), "cp_pids": []}))
    keptplane.take(plane, first)
    holder = json.loads((plane.directory / "attached.json").read_text())
    assert holder == {"testbed": str(first), "pid": os.getpid(), "pids": []}
    with pytest.raises(keptplane.KeptPlaneError, match="is held by the testbed in"):
        keptplane.take(plane, tmp_path / "second")
    gone = subprocess.Popen(["true"])
    gone.wait()
    (plane.directory / "attached.json").write_text(json.dumps({**holder, "pid": gone.pid}))
    keptplane.take(plane, tmp_path / "second")
    assert json.loads((plane.directory / "attached.json").read_text())["testbed"] == str(tmp_path / "second")


def test_the_attach_stops_the_kept_controller_manager_alone_and_plane_json_stops_naming_it(tmp_path):
    """No binaries needed: of the plane's processes only the kube-controller-manager (its argv names it) is stopped,
    plane.json is rewritten without its pid (load() then finds every named process alive) and the rest run on."""
    import sys
    import time

    from pytest_dgxspark.testbed import keptplane, realplane

    directory = tmp_path / "plane"
    directory.mkdir()
    hold = "import time; time.sleep(60)"
    others = subprocess.Popen([sys.executable, "-c", hold, str(directory)], start_new_session=True)
    kcm = subprocess.Popen(["bash", "-c", f'exec -a {realplane.CONTROLLER_MANAGER} "$0" -c "$1" "$2"',
                            sys.executable, hold, str(directory)], start_new_session=True)
    try:
        doc = {"netns": "ns", "host_ifname": "if", "host_ip": "172.29.250.1", "address": "172.29.250.2", "prefix": 30,
               "pids": [others.pid, kcm.pid], "token": "t", "baseline": {}}
        (directory / keptplane.PLANE_FILE).write_text(json.dumps(doc))
        deadline = time.monotonic() + 10  # until both have exec'd (a forked child's cmdline is still its parent's)
        while not (keptplane._is_controller_manager(kcm.pid) and realplane.is_ours(others.pid, directory)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        kept = keptplane.load(directory)
        assert [keptplane._is_controller_manager(p) for p in kept.pids] == [False, True]
        keptplane._without_controller_manager(kept)
        assert kcm.wait(10) is not None and others.poll() is None
        assert kept.pids == [others.pid]
        assert json.loads((directory / keptplane.PLANE_FILE).read_text()) == {**doc, "pids": [others.pid]}
        assert keptplane.load(directory).pids == [others.pid]
    finally:
        for proc in (others, kcm):
            proc.kill()
            proc.wait()


class _FakeApi:
    """Answers realworld's requests from a script: (method, path) -> list of (status, body), one per call."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def request(self, method, path, body=None, **_):
        self.calls.append((method, path, body))
        return self.script[(method, path)].pop(0)

    def call(self, method, path, body=None, **_):
        status, answer = self.request(method, path, body)
        assert status in (200, 201), (method, path, status)
        return answer


def test_a_status_write_a_controller_raced_is_written_again_on_the_latest_version():
    from pytest_dgxspark.testbed.realworld import _put_status

    created = {"kind": "Node", "metadata": {"name": "gpu-01", "resourceVersion": "5"}}
    latest = {"kind": "Node", "metadata": {"name": "gpu-01", "resourceVersion": "6"}, "spec": {"taints": [{"key": "k"}]}}
    api = _FakeApi({("PUT", "/api/v1/nodes/gpu-01/status"): [(409, {"message": "the object has been modified"}), (200, {})],
                    ("GET", "/api/v1/nodes/gpu-01"): [(200, latest)]})
    _put_status(api, "/api/v1/nodes/gpu-01", created, {"kind": "Node", "status": {"phase": "x"}})
    puts = [body for method, _, body in api.calls if method == "PUT"]
    assert [b["metadata"]["resourceVersion"] for b in puts] == ["5", "6"] and puts[-1]["status"] == {"phase": "x"}


def test_a_refused_status_write_other_than_a_conflict_is_an_error_naming_it():
    from pytest_dgxspark.testbed.realapi import ApiError
    from pytest_dgxspark.testbed.realworld import _put_status

    api = _FakeApi({("PUT", "/api/v1/nodes/gpu-01/status"): [(422, {"message": "status.phase: Unsupported value"})]})
    with pytest.raises(ApiError, match="HTTP 422: status.phase: Unsupported value"):
        _put_status(api, "/api/v1/nodes/gpu-01", {"metadata": {}}, {"kind": "Node", "status": {"phase": "x"}})


def test_a_ready_node_left_tainted_not_ready_ends_the_wait_with_its_name():
    from pytest_dgxspark.testbed.realworld import WorldError, wait_nodes_settled

    world = _world("healthy")
    tainted = {"items": [{"metadata": {"name": "gpu-01"},
                          "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}}]}
    api = _FakeApi({("GET", "/api/v1/nodes"): [(200, tainted)] * 100})
    with pytest.raises(WorldError, match="left the not-ready taint on Ready nodes gpu-01"):
        wait_nodes_settled(api, world, timeout_s=0.2)
    api = _FakeApi({("GET", "/api/v1/nodes"): [(200, {"items": [{"metadata": {"name": "gpu-01"}, "spec": {}}]})]})
    wait_nodes_settled(api, world, timeout_s=0.2)
