"""The GPU Operator as it really starts, derived from the scenario's host facts and its live HelmChart; its images
are those of the chart version the scenario gives (catalog/gpu-operator-releases.yaml, NVIDIA's release table).

Start-up order (shared/reference/gpu-operator-v26.3.2-*daemonset*.yaml, validator-strings.txt, troubleshooting):
NFD labels the node `pci-10de.present` -> the operator labels it `nvidia.com/gpu.deploy.*` -> the driver manager
finds a pre-installed driver (or the driver container builds one) -> `driver-validation` (toolkit and validator init
container, nvidia-smi in /host) -> the toolkit writes `toolkit-ready` -> device plugin, GFD and DCGM exporter leave
their `toolkit-validation` init container -> the device plugin registers `nvidia.com/gpu` -> the validator's
`cuda-validation` runs its workload pod and `plugin-validation` waits up to 30 x 5 s for GPU capacity. The
ClusterPolicy is notReady, naming every state whose DaemonSet has unavailable pods, while any operand is not ready.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from pytest_dgxspark.catalog.releases import chart_images, load_releases
from pytest_dgxspark.testbed import components, logs
from pytest_dgxspark.testbed.node import gpu_nodes, host_facts, node_kube
from pytest_dgxspark.testbed.operands import OPERANDS
from pytest_dgxspark.testbed.podshape import meta, ts
from pytest_dgxspark.testbed.scenario import deep_merge
from pytest_dgxspark.testbed.world import Context, World, c, namespace, pod, rand_name

FIXED_PLUGIN = (0, 17, 4)  # k8s-device-plugin v0.17.4 ignores GB10's "Not Supported" device memory (gpu-operator#1794)


@dataclass
class NodeOperands:
    """One GPU node's operand pods (short name -> pod spec for `components.workload`) and what they leave behind."""

    found: bool = False                                     # the operator sees a GPU node here (NFD's PCI label)
    labels: dict[str, str] = field(default_factory=dict)  # the operator's nvidia.com/gpu.present and gpu.deploy.* labels
    gfd_labels: bool = False                                # GFD ran and wrote its labels
    gpus: int = 0                                           # nvidia.com/gpu registered by the device plugin
    replicas: int = 1                                       # time-slicing replicas of each GPU (its plugin config)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    cuda_validator: str | None = None                       # nvidia-cuda-validator pod state, None = never created


@dataclass
class Plan:
    installed: bool
    chart_done: bool       # the pinned chart's install Job completed
    spec: dict[str, Any]
    values: dict[str, Any]
    nodes: dict[str, NodeOperands]
    running: bool = False  # a release runs: the pinned chart's, or the one deployed before a failed upgrade
    chart: str = ""        # the chart version whose operands run
    images: dict[str, str] = field(default_factory=dict)  # operand -> image (release table, under the values)


def _op(ctx: Context) -> dict[str, Any]:
    return ctx.scenario.cluster.get("gpu_operator") or {}


def _override(ctx: Context, short: str) -> dict[str, Any]:
    return dict((_op(ctx).get("components") or {}).get(short) or {})


def _enabled(values: dict[str, Any], key: str) -> bool:
    return bool((values.get(key) or {}).get("enabled", True))


def _version(image: str) -> tuple[int, ...]:
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image)
    return tuple(int(x) for x in found.groups()) if found else (999,)


def plan(ctx: Context) -> Plan:
    """Every GPU node's operand states, from its host facts and the live HelmChart's values."""
    op = _op(ctx)
    spec = dict(op.get("helmchart") or {})
    values = ctx.scenario.helm_values()
    installed = bool(op.get("installed", True))
    chart_done = installed and op.get("helm_job", "complete") == "complete"
    # a failed upgrade leaves the release helm deployed before it running (cluster.gpu_operator.deployed_chart)
    deployed = op.get("deployed_chart")
    running = chart_done or (installed and deployed is not None)
    chart = str(deployed or spec.get("version") or "")
    images = operand_images(ctx, chart, values) if running else {}
    operator_up = running and _override(ctx, "operator").get("state", "running") == "running"
    nodes = {name: _node_plan(ctx, name, values, images) if operator_up else NodeOperands() for name in gpu_nodes(ctx)}
    return Plan(installed, chart_done, spec, values, nodes, running, chart, images)


def operand_images(ctx: Context, chart: str, values: dict[str, Any]) -> dict[str, str]:
    """The images of chart version `chart` under `values` (the newest known release when the HelmChart pins none)."""
    table = load_releases()
    release = table.release(chart) if chart else table.release(table.known()[-1])
    if release is None or not release.found:
        key = "deployed_chart" if _op(ctx).get("deployed_chart") else "helmchart.version"
        raise ValueError(f"cluster.gpu_operator.{key}: {chart!r} has no operand versions in {table.path.name} (known: "
                         f"{', '.join(table.known())}), so the testbed cannot tell which images it runs")
    images = chart_images(release, values, table)
    return {**images, **{short: _override(ctx, short)["image"] for short in OPERANDS if _override(ctx, short).get("image")}}


def time_slicing(values: dict[str, Any], kube: dict[str, Any]) -> int:
    """The replicas of nvidia.com/gpu the node's device plugin serves (k8s-device-plugin config-manager): the config its
    nvidia.com/device-plugin.config label names, else devicePlugin.config.default, of devicePlugin.config.data; 1 when
    none applies (the plugin runs without a config) or the config shares nothing."""
    config = (values.get("devicePlugin") or {}).get("config") or {}
    name = str((kube.get("labels") or {}).get("nvidia.com/device-plugin.config") or config.get("default") or "")
    text = (config.get("data") or {}).get(name) if name else None
    doc = yaml.safe_load(text) if isinstance(text, str) else None
    resources = (((doc or {}).get("sharing") or {}).get("timeSlicing") or {}).get("resources") or [] \
        if isinstance(doc, dict) else []
    return next((int(r.get("replicas") or 1) for r in resources if isinstance(r, dict) and r.get("name") == "nvidia.com/gpu"), 1)


def _node_plan(ctx: Context, name: str, values: dict[str, Any], images: dict[str, str]) -> NodeOperands:
    kube, host = node_kube(ctx, name), host_facts(ctx, name)
    out = NodeOperands()
    removed = {k for k, v in (kube.get("labels") or {}).items() if v is None}
    if _override(ctx, "nfd-worker").get("state", "running") != "running" or \
            "feature.node.kubernetes.io/pci-10de.present" in removed:
        # NFD never labelled the NVIDIA PCI device: the operator sees no GPU node here and deploys nothing; a
        # nvidia.com/gpu.present set by RKE2 it resets to "false" (nodelabeling_controller, rke2-provisioning-facts)
        if any(str(item).startswith("nvidia.com/gpu.present=") for item in host.get("node_labels") or []):
            out.labels = {"nvidia.com/gpu.present": "false"}
        return out
    preinstalled = bool((host.get("driver") or {}).get("loaded", True))
    forced = str((kube.get("labels") or {}).get("nvidia.com/gpu.deploy.driver", "")) == "true"  # label set by hand
    container_driver = _enabled(values, "driver") and (not preinstalled or forced)
    out.found = True
    out.labels = {"nvidia.com/gpu.present": "true",
                  **{f"nvidia.com/gpu.deploy.{c}": "true" for c in (
                      "container-toolkit", "dcgm", "dcgm-exporter", "device-plugin", "gpu-feature-discovery",
                      "node-status-exporter", "operator-validator")},
                  # the driver manager finds the host's driver (F5) and relabels; else the driver container deploys
                  "nvidia.com/gpu.deploy.driver": "true" if container_driver else "pre-installed"}
    pods = out.pods
    if container_driver:  # it cannot build for the -nvidia kernel (F3), nor replace a driver in use (gpu-operator#126)
        text = logs.DRIVER_IN_USE if preinstalled else logs.DRIVER_BUILD_FAILED
        pods["driver"] = {"state": "crashloop", "restarts": 9, "log": text, "previous": text}
    smi = logs.smi_failure(host)
    driver_ok = smi is None and not container_driver  # with a driver container, validation waits for it to be ready
    validation = {"driver-validation": logs.driver_validation(host, smi, container_driver)}
    toolkit_on = _enabled(values, "toolkit")
    nri_mode = (values.get("cdi") or {}).get("nriPluginEnabled") is True
    if toolkit_on:
        toolkit: dict[str, Any] = {"state": "running" if driver_ok else "init", "init_running": 0, "logs": dict(validation)}
        if driver_ok and nri_mode and not _serves_nri(host):  # its NRI plugin has no socket to connect to (F14)
            toolkit.update(state="crashloop", restarts=8, log=logs.NRI_UNREACHABLE, previous=logs.NRI_UNREACHABLE)
        pods["toolkit"] = _facts(ctx, "toolkit", toolkit)
    toolkit_ready = toolkit_on and pods["toolkit"]["state"] == "running"
    plugin_image = images["device-plugin"]
    memory_unsupported = any(str(g.get("memory", "not-supported")) == "not-supported" for g in host.get("gpus") or [])
    for short in ("device-plugin", "gfd", "dcgm-exporter"):
        if not _enabled(values, OPERANDS[short][2]):
            continue
        if not toolkit_ready:  # toolkit-validation loops until /run/nvidia/validations/toolkit-ready exists (F21)
            pods[short] = {"state": "init", "init_running": 0, "logs": {"toolkit-validation": logs.WAITING_FOR_TOOLKIT}}
        elif short == "device-plugin" and memory_unsupported and _version(plugin_image) < FIXED_PLUGIN:
            crash = logs.plugin_memory_crash(plugin_image)
            pods[short] = {"state": "crashloop", "restarts": 14, "log": crash, "previous": crash}
        else:
            pods[short] = {"state": "running"}
        pods[short] = _facts(ctx, short, pods[short])
    registered = pods.get("device-plugin", {}).get("state") == "running"
    lost = bool(kube.get("gpus_lost"))  # the kubelet lost the plugin's registration after validation (F22, microk8s#5245)
    # GFD running writes its labels, unless it found no usable NVML at start and never retried (k8s-device-plugin#733)
    out.gfd_labels = pods.get("gfd", {}).get("state") == "running" and pods["gfd"].get("wrote_labels", True) is not False
    out.gpus = len(host.get("gpus") or []) if registered and not lost else 0
    out.replicas = time_slicing(values, kube) if registered and not lost else 1
    out.gpus *= out.replicas
    validator: dict[str, Any] = {"state": "running", "logs": dict(validation)}
    if not driver_ok:
        validator.update(state="init", init_running=0)
    elif not toolkit_ready:
        validator.update(state="init", init_running=1, logs={**validation, "toolkit-validation": logs.TOOLKIT_NOT_READY})
    else:
        out.cuda_validator = "completed"
        if not registered and not lost:  # plugin-validation gives up after 30 x 5 s and restarts (gpu-operator#486)
            validator.update(state="init-crashloop", init_running=3, restarts=6, exit_code=1,
                             logs={**validation, "plugin-validation": logs.plugin_retries(12)},
                             previous={"plugin-validation": logs.plugin_gave_up()})
    pods["validator"] = _facts(ctx, "validator", validator)
    if "driver" in pods:
        pods["driver"] = _facts(ctx, "driver", pods["driver"])
    return out


def _serves_nri(host: dict[str, Any]) -> bool:
    """RKE2's containerd serves /var/run/nri/nri.sock: NRI not disabled (`host.nri`) on containerd 2.x."""
    major = str(host.get("containerd_version", "2")).lstrip("v").split(".", 1)[0]
    return bool(host.get("nri", True)) and major.isdigit() and int(major) >= 2


def _facts(ctx: Context, short: str, derived: dict[str, Any]) -> dict[str, Any]:
    """A derived pod spec with the scenario's own facts about that component laid over it (an image, or a state
    such as `absent` for a DaemonSet whose pod is gone); what follows from it is derived from the result."""
    return deep_merge(derived, _override(ctx, short))


def install(ctx: Context, world: World, plan_: Plan) -> None:
    """The HelmChart as applied, its install Job and, once it completed, the operator, NFD and each node's operands."""
    op = _op(ctx)
    first = list(ctx.scenario.nodes)[0]
    helm_state = op.get("helm_job", "complete")
    world.add(components.helmchart(ctx, "gpu-operator", plan_.spec, helm_state))
    components.job(ctx, world, "kube-system", "helm-install-gpu-operator", "rancher/klipper-helm:v0.9.8-build20250709", first,
                   helm_state, _helm_log(op, helm_state), env=components.helm_job_env("gpu-operator", plan_.spec))
    if not plan_.running:
        return
    ns = plan_.spec.get("targetNamespace", "gpu-operator")
    world.add(namespace(ctx, ns, {"pod-security.kubernetes.io/enforce": "privileged"}))
    release = {"app.kubernetes.io/instance": "gpu-operator", "app.kubernetes.io/managed-by": "Helm"}
    not_ready = _states_not_ready(plan_)
    policy = _clusterpolicy(ctx, plan_, not_ready)
    components.workload(ctx, world, "Deployment", ns, "gpu-operator",
                        {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator", **release}, [], ["gpu-operator"],
                        plan_.images["operator"], [first], _override(ctx, "operator"),
                        logs={"gpu-operator": logs.operator(policy["status"]["conditions"][0]["message"], bool(not_ready))})
    nfd = {"app.kubernetes.io/name": "node-feature-discovery", **release}
    for role in ("master", "gc"):
        components.workload(ctx, world, "Deployment", ns, f"gpu-operator-node-feature-discovery-{role}", {**nfd, "role": role}, [],
                            [role if role == "master" else "gc"], plan_.images["nfd"], [first], _override(ctx, f"nfd-{role}"))
    components.workload(ctx, world, "DaemonSet", ns, "gpu-operator-node-feature-discovery-worker", {**nfd, "role": "worker"}, [],
                        ["worker"], plan_.images["nfd"], list(ctx.scenario.nodes), _override(ctx, "nfd-worker"))
    world.add(policy)
    for short, (ds, deploy, key, inits, mains, _state) in OPERANDS.items():
        if not _enabled(plan_.values, key):
            continue
        targets = [n for n, on in plan_.nodes.items() if short in on.pods]
        per_node = {n: plan_.nodes[n].pods[short] for n in targets}
        components.workload(ctx, world, "DaemonSet", ns, ds, {"app": ds, "app.kubernetes.io/managed-by": "gpu-operator"}, inits,
                            mains, plan_.images[short], targets, {},
                            node_selector={f"nvidia.com/gpu.deploy.{deploy}": "true"}, logs=logs.component(short, plan_.images[short]),
                            per_node=per_node, owner=policy)
    for node_name, on in plan_.nodes.items():
        if on.cuda_validator:
            world.add(_cuda_validator(ctx, ns, node_name, on.cuda_validator, plan_.images["validator"]))
    if op.get("runtimeclass_nvidia", False):
        world.add({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia",
                   "metadata": meta("nvidia", None, ctx.created, {"app.kubernetes.io/component": "gpu-operator"})})


def _states_not_ready(plan_: Plan) -> list[str]:
    """The operator's states (in its reconcile order) whose DaemonSet has a pod that is not ready."""
    bad = []
    for short, operand in OPERANDS.items():
        if any(on.pods.get(short, {}).get("state", "running") != "running" for on in plan_.nodes.values() if short in on.pods):
            bad.append(operand[5])
    return bad


def _clusterpolicy(ctx: Context, plan_: Plan, not_ready: list[str]) -> dict[str, Any]:
    """cluster-policy with the state and conditions the operator writes (clusterpolicy-status.txt)."""
    values = plan_.values
    cdi = dict(values.get("cdi") or {})
    if not any(on.found for on in plan_.nodes.values()):
        state, reason = "ready", "NoGPUNodes"
    elif not_ready:
        state, reason = "notReady", "OperandNotReady"
    else:
        state, reason = "ready", "Reconciled"
    message = logs.clusterpolicy_message(reason, not_ready)
    when = ts(ctx.created + 300)
    ready = {"type": "Ready", "status": "True" if state == "ready" else "False", "reason": reason, "message": message,
             "lastTransitionTime": when}
    error = {"type": "Error", "status": "False" if state == "ready" else "True", "reason": "Ready" if state == "ready" else reason,
             "message": "" if state == "ready" else message, "lastTransitionTime": when}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
            "metadata": meta("cluster-policy", None, ctx.created + 30,
                             {"app.kubernetes.io/component": "gpu-operator", "app.kubernetes.io/managed-by": "Helm"}, generation=1),
            # what the chart's templates/clusterpolicy.yaml always renders (the CRD requires daemonsets, dcgm and
            # nodeStatusExporter beside the operands below)
            "spec": {"hostPaths": {"rootFS": "/", "driverInstallDir": "/run/nvidia/driver"},
                     "operator": {"defaultRuntime": "containerd", "runtimeClass": "nvidia"},
                     "daemonsets": {"priorityClassName": "system-node-critical", "updateStrategy": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": "1"},
                                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
                     "dcgm": {"enabled": bool((values.get("dcgm") or {}).get("enabled", False))},
                     "nodeStatusExporter": {"enabled": bool((values.get("nodeStatusExporter") or {}).get("enabled", False))},
                     "driver": {"enabled": _enabled(values, "driver"), "kernelModuleType": "auto", "version": _tag(plan_, "driver")},
                     "toolkit": {"enabled": _enabled(values, "toolkit"), "version": _tag(plan_, "toolkit")},
                     "cdi": {"enabled": bool(cdi.get("enabled", True)), "nriPluginEnabled": bool(cdi.get("nriPluginEnabled", False))},
                     "devicePlugin": {"enabled": _enabled(values, "devicePlugin"), "version": _tag(plan_, "device-plugin")},
                     "gfd": {"enabled": _enabled(values, "gfd"), "version": _tag(plan_, "gfd")},
                     "dcgmExporter": {"enabled": _enabled(values, "dcgmExporter")}, "migManager": {"enabled": _enabled(values, "migManager")},
                     "validator": {"plugin": {"env": [{"name": "WITH_WORKLOAD", "value": "false"}]}}},
            "status": {"namespace": plan_.spec.get("targetNamespace", "gpu-operator"), "state": state, "conditions": [ready, error]}}


def _tag(plan_: Plan, short: str) -> str:
    return plan_.images[short].rsplit(":", 1)[-1]


def _helm_log(op: dict[str, Any], state: str) -> str:
    """The helm container's log: installed, or (an upgrade over a deployed release) the upgrade's failure."""
    if state == "complete":
        return logs.HELM_INSTALL
    if op.get("deployed_chart") is not None:
        return logs.helm_upgrade_failed("gpu-operator")
    return "Error: context deadline exceeded\n"


def _cuda_validator(ctx: Context, ns: str, node_name: str, state: str, image: str) -> dict[str, Any]:
    """The validator's CUDA workload pod (validator/manifests/cuda-workload-validation.yaml)."""
    init = [c("cuda-validation", image, command=["sh", "-c"], args=["vectorAdd"],
              env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], securityContext={"privileged": True})]
    made = pod(ctx, rand_name(ctx, "nvidia-cuda-validator"), ns, node_name,
               [c("nvidia-cuda-validator", image, command=["sh", "-c"], args=["echo cuda workload validation is successful"])],
               init=init, labels={"app": "nvidia-cuda-validator"}, state=state,
               annotations={"nvidia.cdi.k8s.io/container.cuda-validation": "management.nvidia.com/gpu=all"})
    made["spec"]["restartPolicy"] = "OnFailure"
    made["spec"]["serviceAccountName"] = "nvidia-operator-validator"
    made["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return made

