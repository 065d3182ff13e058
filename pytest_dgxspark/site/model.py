"""The site model: inventory, RKE2 vars and the GPU Operator HelmChart, validated before anything connects."""
from __future__ import annotations

import difflib
import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from pytest_dgxspark.data.redact import is_secret_key
from pytest_dgxspark.data.yamlload import load_yaml, loads
from pytest_dgxspark.site.hardening import site_problems as hardening_problems
from pytest_dgxspark.site.schemas import HELMCHART_SCHEMA, INVENTORY_SCHEMA, VARS_SCHEMA

SERVER_GROUP = "rke2_servers"
AGENT_GROUP = "rke2_agents"
DEFAULT_CUDA_SAMPLE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04"


class SiteError(Exception):
    """The site files are invalid; the message lists every problem with its file and key."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    address: str
    port: int = 22
    user: str = "root"
    identity_file: str | None = None
    ssh_config: str | None = None
    role: str = "server"
    gpu: bool = True
    # host vars may hold ansible_password / ansible_become_password: never in a repr (failure messages)
    vars: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    connection: str = "ssh"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.address}:{self.port})"

    @property
    def where(self) -> str:
        """The host as messages name it, as HostTarget.where does ('gpu-01 (local)' on the machine the suite runs on)."""
        return f"{self.name} (local)" if self.connection == "local" else self.label


@dataclass(frozen=True)
class Site:
    name: str
    root: Path
    vars: Mapping[str, Any]
    helmchart: Mapping[str, Any]
    inventory: Mapping[str, Any]
    hosts: tuple[HostSpec, ...]
    kubeconfig: Path | None

    def __repr__(self) -> str:
        """Name, root and host names only: vars and inventory may hold passwords (a failure message shows reprs)."""
        return f"Site(name={self.name!r}, root={str(self.root)!r}, hosts={[h.name for h in self.hosts]!r})"

    @property
    def context(self) -> str:
        return self.vars["rke2_context_name"]

    @property
    def management_context(self) -> str | None:
        return self.vars.get("argocd_context")

    @property
    def argocd_namespace(self) -> str:
        return self.vars.get("argocd_namespace", "argocd")

    @property
    def airgap(self) -> bool:
        return bool(self.vars.get("airgap", False))

    @property
    def mirror_registry(self) -> str | None:
        return self.vars.get("mirror_registry")

    @property
    def cuda_sample_image(self) -> str:
        return self.vars.get("cuda_sample_image", DEFAULT_CUDA_SAMPLE_IMAGE)

    @property
    def helm_values(self) -> dict[str, Any]:
        """The HelmChart's valuesContent as a mapping ({} when empty)."""
        return helm_values(self.helmchart)


def helm_values(helmchart: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """The HelmChart's spec.valuesContent parsed as YAML ({} when empty) through the bounded loader; ValueError
    naming `where` (else the chart) when it is no YAML or past the loader's budgets (an alias bomb)."""
    content = (helmchart.get("spec") or {}).get("valuesContent") or ""
    if not where:
        meta = helmchart.get("metadata") or {}
        where = f"HelmChart {meta.get('namespace', '?')}/{meta.get('name', '?')} spec.valuesContent"
    values = loads(content, where) if content.strip() else {}
    return values if isinstance(values, dict) else {}


def _schema_problems(data: Any, schema: dict, path: Path) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        if any(is_secret_key(str(part)) for part in error.absolute_path):
            problems.append(f"{path}: {key} (its value is not shown: a secret) {_without_value(error)}")
        else:
            problems.append(f"{path}: {key}: {error.message}{_typo_hint(error)}")
    return problems


def _without_value(error: jsonschema.ValidationError) -> str:
    """The schema's complaint without the value it is about ("12345 is not of type 'string'" -> "is not of ...")."""
    shown = repr(error.instance)
    if error.message.startswith(shown):
        return error.message[len(shown):].strip()
    return f"fails the schema's {error.validator!r} check"


def _typo_hint(error: jsonschema.ValidationError) -> str:
    """'; did you mean ...' for keys a schema does not know that are close to ones it does (rke2_cnii)."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
        return ""
    known = set((error.schema or {}).get("properties") or {})
    hints = []
    for unknown in sorted(k for k in error.instance if isinstance(k, str) and k not in known):
        close = difflib.get_close_matches(unknown, sorted(known), n=1, cutoff=0.75)
        if close:
            hints.append(f"{unknown!r} -> {close[0]!r}")
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def _load(path: Path, schema: dict, problems: list[str]) -> Any:
    if not path.is_file():
        problems.append(f"{path}: missing (expected by ADR 0001 §5 / ADR 0002 §8)")
        return None
    try:
        data = load_yaml(path)
    except ValueError as exc:
        problems.append(str(exc))
        return None
    found = _schema_problems(data, schema, path)
    problems.extend(found)
    return None if found else data


# Ansible's own connection and privilege variables (docs: "Connecting to hosts: behavioral inventory parameters");
# any other ansible_* key is a typo Ansible would silently ignore (ansible_hots: the alias becomes the address).
ANSIBLE_HOST_VARS = frozenset({
    "ansible_host", "ansible_port", "ansible_user", "ansible_password", "ansible_connection",
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args",
    "ansible_sftp_extra_args", "ansible_scp_extra_args", "ansible_ssh_pipelining", "ansible_ssh_executable",
    "ansible_ssh_pass", "ansible_ssh_host", "ansible_ssh_port", "ansible_ssh_user", "ansible_host_key_checking",
    "ansible_ssh_host_key_checking", "ansible_timeout", "ansible_ssh_timeout", "ansible_become",
    "ansible_become_method", "ansible_become_user", "ansible_become_password", "ansible_become_pass",
    "ansible_become_exe", "ansible_become_flags", "ansible_shell_type", "ansible_shell_executable",
    "ansible_python_interpreter",
})
KNOWN_GROUPS = (SERVER_GROUP, AGENT_GROUP)
LOCAL_CONNECTION = "local"


def _did_you_mean(word: str, known: Any) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def inventory_problems(inventory: Mapping[str, Any], path: Path | str) -> list[str]:
    """Typos Ansible accepts silently: unknown ansible_* keys, group names near rke2_servers/rke2_agents, and hosts
    without ansible_host (whose alias would be used as the address)."""
    problems: list[str] = []

    def keys(where: str, mapping: Mapping[str, Any] | None) -> None:
        for key in (mapping or {}):
            if isinstance(key, str) and key.startswith("ansible_") and key not in ANSIBLE_HOST_VARS:
                problems.append(f"{path}: {where}.{key}: not an Ansible connection variable"
                                f"{_did_you_mean(key, ANSIBLE_HOST_VARS)}")

    def walk(group: Mapping[str, Any], where: str) -> None:
        keys(f"{where}.vars", group.get("vars"))
        for name, hvars in (group.get("hosts") or {}).items():
            keys(f"{where}.hosts.{name}", hvars)
        for child, sub in (group.get("children") or {}).items():
            if child not in KNOWN_GROUPS and difflib.get_close_matches(child, KNOWN_GROUPS, n=1, cutoff=0.75):
                problems.append(f"{path}: {where}.children.{child}: not a group the suite reads "
                                f"(expected {' or '.join(KNOWN_GROUPS)}){_did_you_mean(child, KNOWN_GROUPS)}")
            walk(sub or {}, f"{where}.children.{child}")

    walk(inventory.get("all") or {}, "all")
    for name, (_, hv) in _collect_hosts(inventory).items():
        if not hv.get("ansible_host"):
            local = hv.get("ansible_connection") == LOCAL_CONNECTION
            problems.append(f"{path}: host {name}: ansible_host is missing; expected the host's address "
                            + ("(with ansible_connection: local it is not used to connect, but the checks compare it "
                               "with the Node's InternalIP)" if local else
                               f"(the alias {name!r} is not used as an address)"))
    return problems


def _collect_hosts(inventory: Mapping[str, Any]) -> dict[str, tuple[str, dict]]:
    found: dict[str, tuple[str, dict]] = {}

    def walk(group: Mapping[str, Any], role: str | None, inherited: dict) -> None:
        group_vars = {**inherited, **(group.get("vars") or {})}
        for name, hvars in (group.get("hosts") or {}).items():
            merged = {**group_vars, **(hvars or {})}
            prev_role = found.get(name, (None, {}))[0]
            found[name] = (role or prev_role or "server", {**found.get(name, (None, {}))[1], **merged})
        for child_name, child in (group.get("children") or {}).items():
            child_role = {SERVER_GROUP: "server", AGENT_GROUP: "agent"}.get(child_name, role)
            walk(child or {}, child_role, group_vars)

    walk(inventory.get("all") or {}, None, {})
    return found


def hosts_from_inventory(inventory: Mapping[str, Any], ssh_config: str | None = None) -> tuple[HostSpec, ...]:
    """Hosts of the rke2_servers and rke2_agents groups (walking nested children), servers first.

    The inventory must have passed `inventory_problems` (every SSH host has ansible_host)."""
    specs = []
    for name, (role, hv) in _collect_hosts(inventory).items():
        local = hv.get("ansible_connection") == LOCAL_CONNECTION
        specs.append(HostSpec(
            name=name,
            address=str(hv["ansible_host"]),
            port=int(hv.get("ansible_port", 22)),
            user=str(hv.get("ansible_user", "root")),
            identity_file=hv.get("ansible_ssh_private_key_file"),
            ssh_config=ssh_config,
            role=role,
            gpu=bool(hv.get("dgxspark_gpu", True)),
            vars=hv,
            connection=LOCAL_CONNECTION if local else "ssh",
        ))
    return tuple(sorted(specs, key=lambda s: (s.role != "server", s.name)))


def _ini_booleans(hostvars: dict) -> dict:
    """INI inventories give `dgxspark_gpu=false` as text; read it as Ansible's boolean filter would."""
    words = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
    return {k: words.get(v.lower(), v) if k == "dgxspark_gpu" and isinstance(v, str) else v for k, v in hostvars.items()}


def ansible_inventory(path: Path) -> dict:
    """Any inventory Ansible reads (INI, YAML, a directory) as the YAML form, through `ansible-inventory --list`."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    cmd = [str(exe) if exe.exists() else "ansible-inventory", "-i", str(path), "--list"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SiteError(f"{path}: cannot run ansible-inventory: {exc}") from None
    if proc.returncode != 0:
        raise SiteError(f"{path}: ansible-inventory cannot read it: {proc.stderr.strip()[-500:]}")
    listed = json.loads(proc.stdout)
    hostvars = {h: _ini_booleans(v) for h, v in ((listed.get("_meta") or {}).get("hostvars") or {}).items()}

    def group(name: str) -> dict:
        entry = listed.get(name) or {}
        out: dict = {}
        if entry.get("hosts"):
            out["hosts"] = {h: hostvars.get(h) or None for h in entry["hosts"]}
        if entry.get("children"):
            out["children"] = {c: group(c) for c in entry["children"]}
        return out

    return {"all": group("all")}


def load_inventory(path: Path, ssh_config: str | None = None) -> tuple[dict, tuple[HostSpec, ...]]:
    """Load and validate an inventory (Ansible YAML, or anything ansible-inventory reads); raise SiteError."""
    problems: list[str] = []
    path = Path(path)
    if path.is_dir() or path.suffix not in (".yml", ".yaml"):
        data = ansible_inventory(path)
        problems.extend(_schema_problems(data, INVENTORY_SCHEMA, path))
        data = None if problems else data
    else:
        data = _load(path, INVENTORY_SCHEMA, problems)
    if data is not None:
        problems.extend(inventory_problems(data, path))
    if data is not None and not problems:
        hosts = hosts_from_inventory(data, ssh_config)
        if not hosts:
            problems.append(f"{path}: all.children.{SERVER_GROUP}.hosts: expected at least one host")
    if problems:
        raise SiteError("\n".join(problems))
    return data, hosts


def site_name(root: Path, vars_: dict[str, Any] | None) -> str:
    """A site is named by its folder (sites/<site>/). A testbed scenario's own `site/` folder is a copy of a site and
    takes that site's name, the first part of the context it names (tirosh-home/rke2/gpu -> tirosh-home), so its runs
    compare with the site's and its bundles verify against the site's allowed_signers."""
    context = str((vars_ or {}).get("rke2_context_name") or "")
    if root.name == "site" and (root.parent / "scenario.yaml").is_file() and "/" in context:
        return context.split("/", 1)[0]
    return root.name


def load_site(root: Path) -> Site:
    """Load sites/<name>/ and validate every file; raise SiteError listing every problem."""
    root = Path(root)
    if not root.is_dir():
        raise SiteError(f"{root}: site directory not found (expected sites/<name>/ with inventory.yml and rke2/)")
    problems: list[str] = []
    vars_ = _load(root / "rke2" / "vars.yml", VARS_SCHEMA, problems)
    helmchart = _load(root / "rke2" / "gpu-operator.helmchart.yaml", HELMCHART_SCHEMA, problems)
    inventory = _load(root / "inventory.yml", INVENTORY_SCHEMA, problems)
    hosts: tuple[HostSpec, ...] = ()
    if helmchart is not None:
        values = helmchart["spec"].get("valuesContent")
        where = f"{root / 'rke2' / 'gpu-operator.helmchart.yaml'}: spec.valuesContent"
        try:  # the same budget as the files themselves: an alias bomb inside valuesContent is refused too
            parsed = loads(values or "", where)
            if parsed is not None and not isinstance(parsed, dict):
                problems.append(f"{where}: not YAML values: expected a mapping, got {type(parsed).__name__}")
        except ValueError as exc:
            problems.append(str(exc).replace(f"{where}: ", f"{where}: not YAML values: ", 1))
    if inventory is not None:
        problems.extend(inventory_problems(inventory, root / "inventory.yml"))
    if inventory is not None and not problems:
        hosts = hosts_from_inventory(inventory)
        if not hosts:
            problems.append(f"{root / 'inventory.yml'}: all.children.{SERVER_GROUP}.hosts: expected at least one host")
    if vars_ is not None:
        problems.extend(hardening_problems(root, vars_))
    if vars_ is not None and vars_.get("airgap") and not vars_.get("mirror_registry"):
        problems.append(f"{root / 'rke2' / 'vars.yml'}: mirror_registry: required when airgap is true")
    if problems:
        raise SiteError("\n".join(problems))
    kubeconfig = root / "rke2" / "kubeconfig.yml"
    return Site(
        name=site_name(root, vars_), root=root, vars=vars_, helmchart=helmchart, inventory=inventory, hosts=hosts,
        kubeconfig=kubeconfig if kubeconfig.is_file() else None,
    )
