"""The rule catalog: every verification rule of the two ADRs, as data, with its dependency DAG."""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.data.yamlload import load_yaml

CATALOG_DIR = Path(__file__).parent

# Bottom-up: a layer can only be trusted when the layers below it hold.
LAYERS = (
    "site", "host", "rke2", "runtime", "network",
    "gpu-operator", "device-plugin", "allocatable", "workload", "gitops",
)
# Layers that belong wholly to the GPU chain; rules below them join it with `gpu: true`.
GPU_LAYERS = frozenset({"gpu-operator", "device-plugin", "allocatable", "workload"})
KINDS = ("required", "conditional", "informational", "forecast")
# Rules beyond the two ADRs live in their own file with their own id prefix (issue 22); the ADR files hold ADR- ids.
# Those of kind forecast are advisory; the others (GPU isolation) are judged like the ADR rules, in rules[].
BEYOND_FILE = "beyond.yaml"
BEYOND_PREFIX = "SPARK."
SEVERITIES = ("critical", "major", "minor", "info")

_REQUIRED_KEYS = (
    "id", "adr", "section", "statement_ko", "title", "layer",
    "severity", "kind", "depends_on", "remediation", "remediation_ko",
)
_OPTIONAL_KEYS = ("gpu", "applies_when", "symptom_of", "reaches", "judged_when")
# The targets a run reaches, each owned by the one rule whose subject is reaching it (its `reaches:` key): a fault of
# reaching the target is that rule's error, and every other check through the target is blocked by it.
REACHES = {
    "ssh": "SSH to an inventory host's address",
    "api": "the site's workload API context",
    "api-server": "the API's server on a single-server site (the API's prerequisite: that server's rke2-server)",
}
# When a conditional rule applies, decided from the site at configure time (kube-bench's `type: skip`):
# condition -> (what the site must say, where it says it).
APPLIES_WHEN = {
    "airgap": "the site is air-gapped (rke2/vars.yml airgap: true or a mirror_registry)",
    "management_cluster": "the site names an Argo CD management cluster (rke2/vars.yml argocd_context)",
    "gpu_sharing": "the site configures the device plugin, as GPU sharing needs (devicePlugin.config in its GPU "
                   "Operator HelmChart)",
}
# The site file that says whether a condition holds (rke2/vars.yml unless named here).
APPLIES_WHERE = {"gpu_sharing": "rke2/gpu-operator.helmchart.yaml"}

# When an informational rule is judged like a required one, decided from the site at configure time: it records
# what it reads where the site declares nothing, and fails on a declared item that is not in effect.
JUDGED_WHEN = {
    "hardening_declared": "the site declares hardening in rke2/vars.yml (rke2_profile, rke2_secrets_encryption, "
                          "rke2_audit_policy or rke2_pod_security_admission_config)",
}
HARDENING_KEYS = ("rke2_profile", "rke2_secrets_encryption", "rke2_audit_policy", "rke2_pod_security_admission_config")


class CatalogError(Exception):
    """The catalog is malformed; the message lists every problem with its file and entry."""


@dataclass(frozen=True)
class Rule:
    id: str
    adr: str
    section: str
    statement_ko: str
    title: str
    layer: str
    severity: str
    kind: str
    depends_on: tuple[str, ...]
    remediation: str
    gpu: bool
    source: str
    remediation_ko: str = ""
    applies_when: tuple[str, ...] = ()  # conditions of APPLIES_WHEN, all of which must hold
    # Rules whose failure explains a failure of this one on the same host, while its evidence stays meaningful: the
    # check still runs (a pass is a pass), and a failure under a broken one of them is its symptom (blocked).
    symptom_of: tuple[str, ...] = ()
    reaches: str | None = None  # the target kind of REACHES this rule owns reaching
    # Conditions of JUDGED_WHEN under which this informational rule is judged (Catalog.for_site makes it required).
    judged_when: tuple[str, ...] = ()

    @property
    def prerequisites(self) -> tuple[str, ...]:
        """depends_on and symptom_of: every rule that must be judged before this one."""
        return self.depends_on + tuple(r for r in self.symptom_of if r not in self.depends_on)

    def not_applicable_reason(self, site: Any) -> str | None:
        """Why this rule does not apply to `site`, or None when it applies (required rules always apply)."""
        for condition in self.applies_when:
            if not _holds(condition, site):
                where = APPLIES_WHERE.get(condition, "rke2/vars.yml")
                return f"{self.id} applies only when {APPLIES_WHEN[condition]}; {site.root}/{where} says otherwise"
        return None

    @property
    def marker(self) -> str:
        """The pytest marker of this rule's layer (underscores instead of hyphens)."""
        return self.layer.replace("-", "_")

    @property
    def layer_index(self) -> int:
        return LAYERS.index(self.layer)


@dataclass(frozen=True)
class Catalog:
    rules: Mapping[str, Rule]
    # advisory rules (kind forecast): checked by tests marked forecast(<id>), reported in results.json forecast[],
    # never part of rules[] or the verdict (unless the site enforces them)
    forecast: Mapping[str, Rule] = field(default_factory=dict)

    def __iter__(self):
        return iter(self.ordered())

    def __len__(self) -> int:
        return len(self.rules)

    def ordered(self) -> list[Rule]:
        """Rules bottom-up: by layer, then so that dependencies come first, then by id."""
        order = {rid: i for i, rid in enumerate(TopologicalSorter(
            {r.id: set(r.prerequisites) for r in sorted(self.rules.values(), key=lambda r: r.id)}
        ).static_order())}
        return sorted(self.rules.values(), key=lambda r: (r.layer_index, order[r.id]))

    def owner(self, reaches: str) -> str | None:
        """The rule that owns reaching a kind of target (`ssh`, `api`, `api-server`), None when no rule does."""
        return next((r.id for r in self.rules.values() if r.reaches == reaches), None)

    def for_site(self, site: Any) -> Catalog:
        """This catalog for one site: an informational rule whose `judged_when` holds there becomes required (severity
        major): what the site declares is a requirement, judged and able to be a root cause."""
        judged = {rid: replace(rule, kind="required", severity="major") for rid, rule in self.rules.items()
                  if rule.kind == "informational" and rule.judged_when
                  and all(_judged(condition, site) for condition in rule.judged_when)}
        return Catalog(rules={**self.rules, **judged}, forecast=self.forecast) if judged else self

    def ancestors(self, rule_id: str) -> set[str]:
        """Every rule that `rule_id` depends on, transitively."""
        seen: set[str] = set()
        stack = list(self.rules[rule_id].depends_on)
        while stack:
            rid = stack.pop()
            if rid not in seen:
                seen.add(rid)
                stack.extend(self.rules[rid].depends_on)
        return seen


def _holds(condition: str, site: Any) -> bool:
    if condition == "airgap":
        return bool(site.airgap or site.mirror_registry)
    if condition == "management_cluster":
        return bool(site.management_context)
    if condition == "gpu_sharing":
        config = ((site.helm_values or {}).get("devicePlugin") or {}).get("config") or {}
        return isinstance(config, dict) and bool(config.get("name") or config.get("data"))
    raise KeyError(condition)


def _judged(condition: str, site: Any) -> bool:
    if condition == "hardening_declared":
        return any(key in (site.vars or {}) for key in HARDENING_KEYS)
    raise KeyError(condition)


def _judged_when_problems(entry: dict, where: str) -> list[str]:
    return _condition_problems(entry, where, "judged_when", "informational", JUDGED_WHEN, "hardening_declared",
                               "a {kind} rule is always judged")


def _applies_when_problems(entry: dict, where: str) -> list[str]:
    if entry.get("applies_when") is None and entry.get("kind") == "conditional":
        return [f"{where}: a conditional rule needs applies_when (one of {', '.join(APPLIES_WHEN)}: true)"]
    return _condition_problems(entry, where, "applies_when", "conditional", APPLIES_WHEN, "airgap",
                               "a {kind} rule always applies")


def _condition_problems(entry: dict, where: str, key: str, kind: str, conditions: Mapping[str, str], example: str,
                        otherwise: str) -> list[str]:
    """Problems of a rule's condition mapping (`key`: {condition: true}), which only rules of `kind` may carry."""
    value = entry.get(key)
    if value is None:
        return []
    if entry.get("kind") != kind:
        return [f"{where}: {key} is only for {kind} rules; " + otherwise.format(kind=entry.get("kind"))]
    if not isinstance(value, dict) or not value:
        return [f"{where}: {key} must be a mapping of conditions to true, e.g. {{{example}: true}}"]
    problems = [f"{where}: {key}: unknown condition {k!r}, expected one of {', '.join(conditions)}"
                for k in value if k not in conditions]
    problems += [f"{where}: {key}: {k} must be true" for k, v in value.items() if k in conditions and v is not True]
    return problems


def _entry_problems(entry: object, where: str) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{where}: expected a mapping with keys {', '.join(_REQUIRED_KEYS)}, got {type(entry).__name__}"]
    problems = []
    unknown = sorted(set(entry) - set(_REQUIRED_KEYS) - set(_OPTIONAL_KEYS))
    if unknown:
        problems.append(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
    missing = [k for k in _REQUIRED_KEYS if k not in entry]
    if missing:
        problems.append(f"{where}: missing key(s) {', '.join(missing)}")
    for key, allowed in (("layer", LAYERS), ("kind", KINDS), ("severity", SEVERITIES)):
        if key in entry and entry[key] not in allowed:
            problems.append(f"{where}: {key} is {entry[key]!r}, expected one of {', '.join(allowed)}")
    for key in ("depends_on", "symptom_of"):
        if key in entry and not (isinstance(entry[key], list) and all(isinstance(d, str) for d in entry[key])):
            problems.append(f"{where}: {key} must be a list of rule ids")
    problems.extend(_applies_when_problems(entry, where))
    problems.extend(_judged_when_problems(entry, where))
    for key in ("id", "adr", "section", "statement_ko", "title", "remediation", "remediation_ko"):
        if key in entry and not (isinstance(entry[key], str) and entry[key].strip()):
            problems.append(f"{where}: {key} must be a non-empty string")
    if "gpu" in entry and not isinstance(entry["gpu"], bool):
        problems.append(f"{where}: gpu must be true or false")
    return problems


def load_catalog(paths: Iterable[Path] | None = None) -> Catalog:
    """Load and validate the catalog files (default: the packaged catalog/adr-*.yaml and catalog/beyond.yaml)."""
    files = sorted(paths) if paths is not None else [*sorted(CATALOG_DIR.glob("adr-*.yaml")), CATALOG_DIR / BEYOND_FILE]
    problems: list[str] = []
    rules: dict[str, Rule] = {}
    for path in files:
        try:
            data = load_yaml(path)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if not isinstance(data, list):
            problems.append(f"{path}: expected a list of rules, got {type(data).__name__}")
            continue
        for index, entry in enumerate(data):
            rid: str = entry.get("id") if isinstance(entry, dict) else None  # type: ignore[assignment]
            where = f"{path}: entry {index + 1}" + (f" ({rid})" if rid else "")
            entry_problems = _entry_problems(entry, where)
            if entry_problems:
                problems.extend(entry_problems)
                continue
            beyond = path.name == BEYOND_FILE
            if beyond != rid.startswith(BEYOND_PREFIX):
                problems.append(f"{where}: the ids of {BEYOND_FILE} (rules beyond the ADRs) start with {BEYOND_PREFIX}, "
                                "and only those")
                continue
            if entry["kind"] == "forecast" and not beyond:
                problems.append(f"{where}: kind forecast is only for the advisory rules of {BEYOND_FILE}")
                continue
            if rid in rules:
                problems.append(f"{where}: duplicate id {rid} (first in {rules[rid].source})")
                continue
            rules[rid] = Rule(
                id=rid, adr=entry["adr"], section=str(entry["section"]),
                statement_ko=entry["statement_ko"].strip(), title=entry["title"].strip(),
                layer=entry["layer"], severity=entry["severity"], kind=entry["kind"],
                depends_on=tuple(entry["depends_on"]), remediation=entry["remediation"].strip(),
                gpu=entry.get("gpu", entry["layer"] in GPU_LAYERS), source=str(path),
                remediation_ko=entry["remediation_ko"].strip(), applies_when=tuple(entry.get("applies_when") or ()),
                symptom_of=tuple(entry.get("symptom_of") or ()), reaches=entry.get("reaches"),
                judged_when=tuple(entry.get("judged_when") or ()),
            )
    for rule in rules.values():
        for key in ("depends_on", "symptom_of"):
            for dep in getattr(rule, key):
                if dep not in rules:
                    problems.append(f"{rule.source}: {rule.id}: {key} names unknown rule {dep}")
    owners: dict[str, list[str]] = {}
    for rule in rules.values():
        if rule.reaches is not None and rule.reaches not in REACHES:
            problems.append(f"{rule.source}: {rule.id}: reaches is {rule.reaches!r}, expected one of {', '.join(REACHES)}")
        elif rule.reaches is not None:
            owners.setdefault(rule.reaches, []).append(rule.id)
    for kind, ids in sorted(owners.items()):
        if len(ids) > 1:
            problems.append(f"reaches: {kind} is owned by {len(ids)} rules ({', '.join(sorted(ids))}), expected one")
    if not problems:
        try:
            TopologicalSorter({r.id: set(r.prerequisites) for r in rules.values()}).prepare()
        except CycleError as exc:
            cycle = " -> ".join(exc.args[1])
            source = rules[exc.args[1][0]].source
            problems.append(f"{source}: depends_on has a cycle: {cycle}")
    for rule in rules.values():
        for key in ("depends_on", "symptom_of"):
            for dep in getattr(rule, key):
                if rule.kind != "forecast" and dep in rules and rules[dep].kind == "forecast":
                    problems.append(f"{rule.source}: {rule.id}: {key} names advisory rule {dep}: a judged rule never "
                                    "waits for a forecast")
    if problems:
        raise CatalogError("rule catalog is invalid:\n  " + "\n  ".join(problems))
    return Catalog(rules={k: r for k, r in rules.items() if r.kind != "forecast"},
                   forecast={k: r for k, r in rules.items() if r.kind == "forecast"})


# The one catalog of a run, shared by the plugin core and the report (loaded once in pytest_configure).
catalog_key = pytest.StashKey[Catalog]()


@functools.cache
def bundled_catalog() -> Catalog:
    """The packaged catalog, loaded once per process (for code that is handed no catalog)."""
    return load_catalog()


def reaching_owner(kind: str) -> str | None:
    """The rule of the packaged catalog that owns reaching `kind` (see REACHES)."""
    return bundled_catalog().owner(kind)


def run_catalog(config: pytest.Config) -> Catalog:
    """The run's catalog (config.stash[catalog_key]), loaded on first use when the core has not loaded it."""
    if catalog_key not in config.stash:
        config.stash[catalog_key] = load_catalog()
    return config.stash[catalog_key]


def rule_of(item: pytest.Item) -> str | None:
    """The rule id of a test item (its closest `rule` marker), or None: the one rule lookup of plugin and report."""
    marker = item.get_closest_marker("rule")
    return str(marker.args[0]) if marker is not None and marker.args else None
