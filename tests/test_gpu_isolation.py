"""GPU isolation (issue 22): the probe's log parsed, and what the testbed's containers see of their node's GPUs."""
from __future__ import annotations

from pytest_dgxspark.kube.isolation import PROBE_COMMAND, parse_probe
from pytest_dgxspark.kube.podrun import cuda_pod, pinned_pod
from pytest_dgxspark.testbed import containers
from pytest_dgxspark.testbed.images import DEFAULT_IMAGES

CUDA = DEFAULT_IMAGES["nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"]
BUSYBOX = DEFAULT_IMAGES["docker.io/library/busybox:1.36"]
GB10 = {"uuid": "GPU-5e4c3a8e-8f0b-6d2a-91c7-3b1f0e2d4a67", "name": "NVIDIA GB10", "minor": 0}
HEALTHY = {"gpus": [GB10], "registered": 1, "default_runtime": "runc", "accept_envvar_unprivileged": True}
LEAKY = {**HEALTHY, "default_runtime": "nvidia"}
PROBE = {"name": "gpu-none", "command": PROBE_COMMAND}
NODE = {"metadata": {"name": "gpu-01", "labels": {"kubernetes.io/hostname": "gpu-01"}}, "spec": {}}


def probe_log(devices: dict, allocated: list[str], container: dict = PROBE, image: dict = CUDA) -> tuple[str, int]:
    ran = containers.run_shell(container, image, containers.visible(devices, allocated, container, image))
    assert ran is not None
    return ran


def test_a_container_without_a_gpu_on_healthy_gets_no_device_node_and_no_nvidia_smi():
    log, status = probe_log(HEALTHY, [])
    assert (log, status) == ("ls: cannot access '/dev/nvidia*': No such file or directory\n"
                             "dgxspark-probe ls exit 2\n"
                             "sh: 1: nvidia-smi: not found\n"
                             "dgxspark-probe nvidia-smi exit 127\n", 0)
    view = parse_probe(log)
    assert view.ran and view.devices == () and view.gpus == () and (view.ls_exit, view.smi_exit) == (2, 127)
    assert view.smi_said == "sh: 1: nvidia-smi: not found"


def test_a_container_given_the_gb10_lists_its_device_node_and_its_uuid():
    log, _ = probe_log(HEALTHY, [GB10["uuid"]])
    assert log.splitlines()[:5] == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl",
                                    "dgxspark-probe ls exit 0"]
    assert f"GPU 0: NVIDIA GB10 (UUID: {GB10['uuid']})" in log.splitlines()
    view = parse_probe(log)
    assert [g.uuid for g in view.gpus] == [GB10["uuid"]] and view.gpu_minors == (0,) and view.smi_exit == 0


def test_the_nvidia_default_runtime_honouring_the_cuda_image_envvar_gives_every_gpu_to_an_unrequesting_pod():
    assert containers.visible(LEAKY, [], PROBE, CUDA) == [GB10]
    assert parse_probe(probe_log(LEAKY, [])[0]).gpus[0].uuid == GB10["uuid"]
    # not honoured for an unprivileged container when the toolkit says so, nor for an image without the variable
    assert containers.visible({**LEAKY, "accept_envvar_unprivileged": False}, [], PROBE, CUDA) == []
    assert containers.visible(LEAKY, [], PROBE, BUSYBOX) == []
    # a privileged container's variable is always honoured; runc never reads it
    privileged = {**PROBE, "securityContext": {"privileged": True}}
    assert containers.visible({**LEAKY, "accept_envvar_unprivileged": False}, [], privileged, CUDA) == [GB10]
    assert containers.visible(HEALTHY, [], privileged, CUDA) == []
    # the pod's own env wins over the image's
    void = {**PROBE, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}
    assert containers.visible(LEAKY, [], void, CUDA) == []


def test_busybox_words_its_errors_as_busybox_does():
    log, _ = probe_log(HEALTHY, [], image=BUSYBOX)
    assert log.splitlines()[0] == "ls: /dev/nvidia*: No such file or directory"
    assert "sh: nvidia-smi: not found" in log.splitlines()


def test_only_a_sh_c_of_plain_commands_is_run_by_the_simulation():
    assert containers.run_shell({"command": ["/cuda-samples/vectorAdd"]}, CUDA, []) is None
    assert containers.run_shell({"command": ["sh", "-c", "sleep 3600"]}, CUDA, []) is None
    assert containers.run_shell({"command": ["sh", "-c", "ls -l /dev"]}, CUDA, []) is None
    assert containers.run_shell({"command": ["sh"], "args": ["-c", "echo hi"]}, CUDA, []) == ("hi\n", 0)


def test_the_node_view_reads_the_toolkit_config_and_the_default_runtime_from_the_host():
    host = {"toolkit": True, "driver": {"loaded": True}, "gpus": [{"uuid": GB10["uuid"], "name": "NVIDIA GB10"}],
            "containerd_default_runtime": "nvidia",
            "files": {containers.TOOLKIT_CONFIG: "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"}}
    view = containers.node_devices(host, 1)
    assert view == {"gpus": [GB10], "registered": 1, "replicas": 1, "default_runtime": "nvidia",
                    "accept_envvar_unprivileged": False}
    assert containers.node_devices({**host, "files": {}}, 1)["accept_envvar_unprivileged"] is True  # the toolkit's default
    assert containers.node_devices({**host, "driver": {"loaded": False}}, 0)["gpus"] == []


def test_a_log_cut_short_or_of_another_program_is_no_view():
    assert not parse_probe("").ran
    assert not parse_probe("/dev/nvidia0\ndgxspark-probe ls exit 0\n").ran
    assert not parse_probe("[Vector addition of 50000 elements]\nTest PASSED\n").ran


def test_a_probe_pod_asks_for_no_gpu_at_all_or_for_the_given_count_and_the_cuda_sample_pod_is_unchanged():
    none = pinned_pod("gpu-none-0", "img", NODE, app="gpu-none", gpus=None, command=PROBE_COMMAND)
    container = none["spec"]["containers"][0]
    assert container["resources"] == {} and container["command"] == PROBE_COMMAND
    assert none["spec"]["restartPolicy"] == "Never" and none["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-01"}
    sample = cuda_pod("cuda-vectoradd-0", "img", NODE)["spec"]["containers"][0]
    assert sample["name"] == "cuda-vectoradd" and sample["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "command" not in sample


TIME_SLICING = """version: v1
flags:
  migStrategy: none
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def test_the_site_declares_sharing_by_a_time_slicing_config_of_its_device_plugin():
    from pytest_dgxspark.kube.sharing import CONFIG_LABEL, site_sharing

    assert site_sharing({"driver": {"enabled": True}}) is None
    values = {"devicePlugin": {"config": {"create": True, "name": "time-slicing-config", "default": "any",
                                          "data": {"any": TIME_SLICING, "plain": "version: v1\n"}}}}
    sharing = site_sharing(values)
    assert sharing is not None and sharing.configured and sharing.replicas == {"any": 4, "plain": 1}
    assert sharing.for_node({}) == ("any", 4)
    assert sharing.for_node({CONFIG_LABEL: "plain"}) == ("plain", 1)
    undefaulted = site_sharing({"devicePlugin": {"config": {"name": "time-slicing-config", "data": {"any": TIME_SLICING}}}})
    assert undefaulted is not None and undefaulted.for_node({}) == (None, 1)  # no default, no label: no config runs
    named = site_sharing({"devicePlugin": {"config": {"name": "made-apart"}}}, {"any": TIME_SLICING})
    assert named is not None and named.replicas == {"any": 4}
    broken = site_sharing({"devicePlugin": {"config": {"name": "x", "data": {"any": "- not a config"}}}})
    assert broken is not None and broken.problems and broken.problems[0].startswith("devicePlugin.config.data.any: ")


def test_the_testbed_device_plugin_serves_the_replicas_of_the_config_its_node_runs():
    from pytest_dgxspark.testbed.gpuoperator import time_slicing

    config = {"devicePlugin": {"config": {"name": "time-slicing-config", "data": {"any": TIME_SLICING}}}}
    assert time_slicing(config, {}) == 1  # no default and no node label
    assert time_slicing({"devicePlugin": {"config": {**config["devicePlugin"]["config"], "default": "any"}}}, {}) == 4
    assert time_slicing(config, {"labels": {"nvidia.com/device-plugin.config": "any"}}) == 4
    assert time_slicing({}, {}) == 1


def test_the_testbed_kubelet_allocates_a_time_sliced_gpu_as_often_as_its_replicas():
    from pytest_dgxspark.testbed.kubelet import Kubelet
    from pytest_dgxspark.testbed.store import Store

    store = Store()
    kubelet = Kubelet(store, {"devices": {"gpu-01": {**HEALTHY, "registered": 2, "replicas": 2}}}, {})
    pods = [{"metadata": {"name": f"p{i}", "namespace": "ns"},
             "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
             "status": {"phase": "Running"}} for i in range(3)]
    for pod in pods:
        store.put("/pods", pod, event=False)
        kubelet._allocate(pod, "gpu-01")
    assert [kubelet.allocated[f"ns/p{i}"][1] for i in range(3)] == [[GB10["uuid"]], [GB10["uuid"]], []]
