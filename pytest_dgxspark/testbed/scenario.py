"""Testbed scenarios: load a scenario directory, resolve `extends`, validate the top-level shape."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_yaml, load_yaml_all, loads
from pytest_dgxspark.testbed.faults import Faults, FaultSpecError

BUNDLED_DIR = Path(__file__).parent / "scenarios"
TOP_LEVEL_KEYS = frozenset({"format", "description", "extends", "nodes", "cluster", "management", "expect"})
RULE_STATUSES = frozenset({"passed", "failed", "blocked", "error", "not-applicable", "recorded"})
NODE_ROLES = frozenset({"server", "agent"})
NODE_KEYS = frozenset({"role", "gpu", "model", "node_labels", "node_taints", "inventory", "host", "kube"})
KUBE_KEYS = frozenset({"ready", "ready_status", "ready_reason", "ready_message", "taints", "unschedulable", "labels",
                       "allocatable_gpus", "gpus_lost", "kernel", "os_image", "container_runtime", "kubelet_version", "cpu",
                       "memory", "cpu_vendor", "gpu_product", "gpu_machine", "driver_version", "cuda_version"})
CLUSTER_KEYS = frozenset({"version", "unreachable", "faults", "cni", "kube_proxy", "cilium_values", "cilium_effective",
                          "gpu_operator", "workload", "objects", "images", "crds_absent"})
# custom resources a scenario may leave unserved (`cluster.crds_absent`): their lists answer 404 as without the CRD
CRD_PLURALS = frozenset({"helmcharts", "helmchartconfigs", "clusterpolicies", "ciliumnodes"})
IMAGE_KEYS = frozenset({"arch", "entrypoint", "log"})
OPERATOR_KEYS = frozenset({"installed", "helmchart", "helm_job", "runtimeclass_nvidia", "components", "deployed_chart"})
# The scenario format is a contract (docs/scenarios.md "Format changelog"). Each file names its format in `format`;
# a file without it was written before the key existed and is read as format 1, the earliest. A key format 2 removed
# or renamed is refused in any file with a message naming what replaces it; nothing is translated silently.
FORMAT_KEY = "format"
CURRENT_FORMAT = 2
FORMATS = (1, 2)
# Keys of format 1 that format 2 removed or renamed: where ("*" = a node's name) -> what to write instead ({node} is
# that name). Recovered from the format change (b93ce17: the live world became the scenario's own data and the
# GPU Operator's start-up order is derived from the host facts, never hand-written).
REMOVED_IN_FORMAT_2 = {
    "nodes.*.kube.gpus": "nvidia.com/gpu is what the device plugin registers, one per GPU in nodes.{node}.host.gpus; "
                         "write nodes.{node}.kube.gpus_lost: true for a node that lost it after validation (or "
                         "nodes.{node}.kube.allocatable_gpus for allocatable alone)",
    "nodes.*.kube.gfd_labels": "GFD writes its labels when it runs; write "
                               "cluster.gpu_operator.components.gfd.wrote_labels: false for a GFD that runs without them",
    "nodes.*.kube.operator_labels": "the operator labels the nodes NFD labelled; write nodes.{node}.kube.labels: "
                                    "{feature.node.kubernetes.io/pci-10de.present: null} for a node it does not see",
    "nodes.*.kube.driver_deploy": "the driver manager decides from nodes.{node}.host.driver.loaded (false: the "
                                  "operator's driver container is deployed); write nodes.{node}.kube.labels: "
                                  "{nvidia.com/gpu.deploy.driver: \"true\"} to deploy it beside a loaded driver",
    "cluster.gpu_operator.cuda_validator": "the validator's pods follow the start-up order; write "
                                           "cluster.gpu_operator.components.validator (state, logs) to override them",
    "cluster.gpu_operator.clusterpolicy": "the ClusterPolicy's state follows its operands' readiness; write "
                                          "cluster.gpu_operator.components.<component>.state (e.g. device-plugin: "
                                          "{state: crashloop})",
    "cluster.gpu_operator.helmchart_spec": "renamed cluster.gpu_operator.helmchart: the HelmChart spec as applied, "
                                           "merged over the extended scenario's, never over the site's",
    "cluster.cilium": "renamed cluster.cilium_values: the rke2-cilium HelmChartConfig's Helm values (hubble_enabled -> "
                      "hubble.enabled, kube_proxy_replacement -> kubeProxyReplacement, wireguard_enabled -> "
                      "encryption: {enabled: true, type: wireguard})",
    "cluster.cilium_config": "write cluster.cilium_values: null for no rke2-cilium HelmChartConfig (was cilium_config: false)",
}
# What a format 1 file without `extends` took from the site, which format 2 takes from the scenario itself.
FORMAT_1_FROM_SITE = ("nodes.<name>.node_labels", "cluster.cni", "cluster.cilium_values", "cluster.kube_proxy",
                      "cluster.gpu_operator.helmchart", "management.namespace")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Scenario:
    """One loaded scenario: `data` is the merged mapping, `directory` the scenario's own folder."""

    name: str
    description: str
    directory: Path
    data: dict[str, Any] = field(repr=False)
    expect: dict[str, Any] = field(repr=False)
    site_dir: Path | None = None
    chain: tuple[Path, ...] = ()

    @property
    def nodes(self) -> dict[str, dict[str, Any]]:
        return self.data.get("nodes") or {}

    @property
    def lineage(self) -> str:
        """The cluster this scenario simulates: the base of its `extends` chain (`healthy` for a scenario that
        extends healthy). A real cluster keeps its identity across upgrades and faults; so does a simulated one."""
        return self.chain[0].name if self.chain else self.name

    @property
    def cluster(self) -> dict[str, Any]:
        return self.data.get("cluster") or {}

    @property
    def management(self) -> dict[str, Any]:
        return self.data.get("management") or {}

    def server_name(self) -> str:
        """The node that runs the workload API server (the first `server`)."""
        for name, node in self.nodes.items():
            if (node or {}).get("role", "server") == "server":
                return name
        raise ScenarioError(f"{self.directory / 'scenario.yaml'}: nodes: at least one node with role 'server' is required")

    def object_files(self) -> list[Path]:
        """`objects/*.yaml` of every scenario in the extends chain, base first."""
        files: list[Path] = []
        for directory in self.chain:
            files.extend(sorted((directory / "objects").glob("*.yaml")))
        return files

    def objects(self) -> list[dict[str, Any]]:
        """Every non-empty document of the object files, through the strict loader (`load` has checked them)."""
        found: list[dict[str, Any]] = []
        for path in self.object_files():
            try:
                found.extend(doc for doc in load_yaml_all(path) if doc)
            except ValueError as exc:
                raise ScenarioError(str(exc)) from None
        return found

    def helm_values(self) -> dict[str, Any]:
        """The GPU Operator HelmChart's `valuesContent`, parsed by the strict loader (`load` has checked it)."""
        spec = (self.cluster.get("gpu_operator") or {}).get("helmchart") or {}
        where = f"{self.directory / 'scenario.yaml'}: cluster.gpu_operator.helmchart.valuesContent"
        try:
            values = loads(spec.get("valuesContent") or "", where) if isinstance(spec, dict) else None
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
        return values or {}

    def node_root_dirs(self, node: str) -> list[Path]:
        """`nodes/<node>/root/` trees of the extends chain, base first (later ones lie on top)."""
        return [d / "nodes" / node / "root" for d in self.chain if (d / "nodes" / node / "root").is_dir()]


def deep_merge(base: Any, override: Any) -> Any:
    """Maps merge key by key, anything else (lists included) replaces; a `None` value deletes the key."""
    if not isinstance(base, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif key in merged and isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def bundled() -> list[tuple[str, str]]:
    """(name, one-line description) of every bundled scenario, sorted by name."""
    found = []
    for path in sorted(BUNDLED_DIR.glob("*/scenario.yaml")):
        raw = _read(path)
        found.append((path.parent.name, str(raw.get("description", "")).strip().splitlines()[0] if raw.get("description") else ""))
    return found


def resolve(scenario: str | Path) -> Path:
    """The scenario directory of a bundled name, a directory or a scenario.yaml path."""
    text = str(scenario)
    candidate = Path(text)
    if "/" not in text and not candidate.suffix and (BUNDLED_DIR / text / "scenario.yaml").is_file():
        return BUNDLED_DIR / text
    if candidate.is_file() and candidate.name.endswith((".yaml", ".yml")):
        return candidate.parent.resolve()
    if (candidate / "scenario.yaml").is_file():
        return candidate.resolve()
    names = ", ".join(name for name, _ in bundled())
    raise ScenarioError(f"scenario {text!r}: not a bundled scenario ({names}) nor a directory holding scenario.yaml")


def load(scenario: str | Path) -> Scenario:
    """Load a scenario by bundled name or path, resolving `extends` (at most 8 levels)."""
    directory = resolve(scenario)
    chain: list[Path] = []
    layers: list[dict[str, Any]] = []
    current: Path | None = directory
    while current is not None:
        if current in chain or len(chain) >= 8:
            raise ScenarioError(f"{directory / 'scenario.yaml'}: extends: cycle or too deep through {[str(c) for c in chain]}")
        path = current / "scenario.yaml"
        raw = _read(path)
        unknown = sorted(set(raw) - TOP_LEVEL_KEYS)
        if unknown:
            raise ScenarioError(f"{path}: unknown top-level keys {unknown}; expected some of {sorted(TOP_LEVEL_KEYS)}")
        migrate = format_problems(raw, file_format(path, raw))
        if migrate:
            raise ScenarioError(f"{path}: " + "; ".join(migrate))
        chain.insert(0, current)
        layers.insert(0, raw)
        parent = raw.get("extends")
        if parent is not None and not (isinstance(parent, str) and (BUNDLED_DIR / parent / "scenario.yaml").is_file()):
            raise ScenarioError(f"{path}: extends: {parent!r} is not a bundled scenario")
        current = BUNDLED_DIR / parent if parent else None
    data: dict[str, Any] = {}
    for layer in layers:
        data = deep_merge(data, {k: v for k, v in layer.items() if k not in ("extends", FORMAT_KEY)})
    path = directory / "scenario.yaml"
    _validate(path, data, layers[-1])
    site_dir = next((d / "site" for d in reversed(chain) if (d / "site" / "rke2" / "vars.yml").is_file()), None)
    expect = layers[-1].get("expect") or {}
    expect = {"rules": dict(expect.get("rules") or {}), "root_causes": list(expect.get("root_causes") or []),
              "forecast": list(expect.get("forecast") or [])}
    loaded = Scenario(
        name=directory.name,
        description=str(data.get("description", "")).strip(),
        directory=directory,
        data=data,
        expect=expect,
        site_dir=site_dir,
        chain=tuple(chain),
    )
    # The YAML inside the scenario (object files, the HelmChart's values) is read now, so a bad one is a usage error
    # before any namespace is made, not a failed testbed start.
    loaded.objects()
    loaded.helm_values()
    return loaded


def _read(path: Path) -> dict[str, Any]:
    """A scenario file through the one strict loader: duplicate keys, alias bombs and non-UTF-8 bytes are refused."""
    try:
        raw = load_yaml(path)
    except ValueError as exc:  # the message names the file and what was found
        raise ScenarioError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: must be a mapping, got {type(raw).__name__}")
    return raw


def file_format(path: Path, raw: dict[str, Any]) -> int:
    """The format one scenario file is written in: its `format`, else 1 (written before the key existed)."""
    if FORMAT_KEY not in raw:
        return 1
    value = raw[FORMAT_KEY]
    if type(value) is not int or value not in FORMATS:
        raise ScenarioError(f"{path}: {FORMAT_KEY}: {value!r}, expected one of {list(FORMATS)} (the scenario format; "
                            f"{CURRENT_FORMAT} is the current one, docs/scenarios.md \"Format changelog\")")
    return value


def format_problems(raw: dict[str, Any], fmt: int) -> list[str]:
    """What one file (its own keys, before `extends` merges it) must change to be read in the current format: each key
    format 2 removed or renamed with what replaces it, in any file; and, for a format 1 file, what it took from the
    site. Empty when the file means the same in the current format."""
    problems = [f"{where}: removed in scenario format 2; {fix}" for where, fix in _removed_keys(raw)]
    if fmt == 1 and not raw.get("extends"):
        problems.append(f"extends: absent, and a format 1 scenario without it took {', '.join(FORMAT_1_FROM_SITE)} from "
                        "the site; format 2 takes them from the scenario: add 'extends: healthy' or write them")
    if problems and fmt == 1:
        said = f"{FORMAT_KEY}: 1" if FORMAT_KEY in raw else f"{FORMAT_KEY}: absent, so the file is read as format 1"
        problems.append(f"{said} (the earliest): make the changes above and add '{FORMAT_KEY}: {CURRENT_FORMAT}' "
                        "(docs/scenarios.md \"Format changelog\")")
    return problems


def _removed_keys(raw: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, what replaces it) of each key of REMOVED_IN_FORMAT_2 present in `raw`, in the table's order."""
    found = []
    for pattern, fix in REMOVED_IN_FORMAT_2.items():
        *parents, key = pattern.split(".")
        for where, node, mapping in _walk(raw, parents, "", None):
            if key in mapping:
                found.append((f"{where}{key}", fix.replace("{node}", node or "<name>")))
    return found


def _walk(mapping: Any, parts: list[str], where: str, node: str | None) -> list[tuple[str, str | None, dict[str, Any]]]:
    """The mappings at `parts` below `mapping` ("*" = every node name) with their dotted place and the node's name."""
    if not isinstance(mapping, dict):
        return []
    if not parts:
        return [(where, node, mapping)]
    head, rest = parts[0], parts[1:]
    if head == "*":
        return [hit for name, sub in mapping.items() for hit in _walk(sub, rest, f"{where}{name}.", str(name))]
    return _walk(mapping.get(head), rest, f"{where}{head}.", node)


def _image_problems(found: Any) -> list[str]:
    """`cluster.images`: image reference -> {arch: [amd64|arm64...], entrypoint, log}, or null to remove one."""
    if found is None:
        return []
    if not isinstance(found, dict):
        return [f"cluster.images: must map image references to {{arch, entrypoint, log}}, got {type(found).__name__}"]
    out = []
    for ref, entry in found.items():
        if entry is None:
            continue
        if not isinstance(entry, dict):
            out.append(f"cluster.images[{ref!r}]: must be a mapping {{arch, entrypoint, log}} or null")
            continue
        out += _unknown(f"cluster.images[{ref!r}]", entry, IMAGE_KEYS)
        arch = entry.get("arch", ["amd64", "arm64"])
        if not isinstance(arch, list) or not arch or not set(arch) <= {"amd64", "arm64"}:
            out.append(f"cluster.images[{ref!r}].arch: {arch!r}, expected a list of amd64/arm64")
    return out


def _unknown(where: str, mapping: dict[str, Any], known: frozenset[str]) -> list[str]:
    out = []
    for key in sorted(set(mapping) - known):
        out.append(f"{where}.{key}: unknown key; expected some of {sorted(known)}")
    return out


def _mapping_problems(data: dict[str, Any]) -> list[str]:
    """Where a section that must be a mapping is something else (a list, a word, a number)."""
    problems = []

    def need(where: str, value: Any) -> None:
        if value is not None and not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {type(value).__name__} {str(value)[:60]!r}")

    for section in ("cluster", "management"):
        need(section, data.get(section))
    if isinstance(data.get("cluster"), dict):
        need("cluster.gpu_operator", data["cluster"].get("gpu_operator"))
    if isinstance(data.get("nodes"), dict):
        for name, node in data["nodes"].items():
            need(f"nodes.{name}", node)
            if isinstance(node, dict):
                for part in ("kube", "host"):
                    need(f"nodes.{name}.{part}", node.get(part))
    return problems


def _validate(path: Path, data: dict[str, Any], own: dict[str, Any]) -> None:
    problems = []
    if not str(data.get("description", "")).strip():
        problems.append("description: a one-line description is required")
    nodes = data.get("nodes")
    shapes = _mapping_problems(data)
    if shapes:  # the checks below read these as mappings
        raise ScenarioError(f"{path}: " + "; ".join(shapes))
    if not isinstance(nodes, dict) or not nodes:
        problems.append("nodes: a mapping of at least one node is required")
    else:
        for name, node in nodes.items():
            role = (node or {}).get("role", "server")
            if role not in NODE_ROLES:
                problems.append(f"nodes.{name}.role: {role!r}, expected one of {sorted(NODE_ROLES)}")
            problems += _unknown(f"nodes.{name}", node or {}, NODE_KEYS)
            problems += _unknown(f"nodes.{name}.kube", (node or {}).get("kube") or {}, KUBE_KEYS)
    cluster = data.get("cluster") or {}
    problems += _unknown("cluster", cluster, CLUSTER_KEYS)
    problems += _unknown("cluster.gpu_operator", cluster.get("gpu_operator") or {}, OPERATOR_KEYS)
    problems += _image_problems(cluster.get("images"))
    absent = cluster.get("crds_absent") or []
    if not isinstance(absent, list) or set(map(str, absent)) - CRD_PLURALS:
        problems.append(f"cluster.crds_absent: {absent!r}, expected a list of {sorted(CRD_PLURALS)}")
    for section in ("cluster", "management"):
        try:
            Faults((data.get(section) or {}).get("faults"), f"{section}.faults")
        except FaultSpecError as exc:
            problems.append(str(exc))
    expect = own.get("expect") or {}
    if not isinstance(expect, dict) or set(expect) - {"rules", "root_causes", "forecast"}:
        problems.append("expect: only the keys 'rules', 'root_causes' and 'forecast' are allowed")
    else:
        for rule, status in (expect.get("rules") or {}).items():
            if status not in RULE_STATUSES:
                problems.append(f"expect.rules.{rule}: {status!r}, expected one of {sorted(RULE_STATUSES)}")
        if not isinstance(expect.get("root_causes") or [], list):
            problems.append("expect.root_causes: must be a list of rule ids")
        if not isinstance(expect.get("forecast") or [], list):
            problems.append("expect.forecast: must be a list of the forecast rule ids (SPARK.*) the run advises")
    if problems:
        raise ScenarioError(f"{path}: " + "; ".join(problems))
