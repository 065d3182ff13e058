"""Probe of RKE2 on the host: its config files (config.yaml and drop-ins), its units, the apiserver's command line."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pytest_dgxspark.data.yamlload import loads
from pytest_dgxspark.probes import Command, Reading, Settings, split_cmdline

NAME = "rke2"

CONFIG_FILE = "/etc/rancher/rke2/config.yaml"
CONFIG = f"cat {CONFIG_FILE}"
DROPINS = (
    "for f in $(ls -1 /etc/rancher/rke2/config.yaml.d/*.yaml 2>/dev/null | LC_ALL=C sort); "
    "do echo \"### $f\"; cat \"$f\"; done; true"
)
UNIT_PROPERTIES = "LoadState,ActiveState,SubState,UnitFileState,ActiveEnterTimestamp"
UNITS = ("rke2-server", "rke2-agent")
APISERVER_CMDLINE = "pid=$(pgrep -o -x kube-apiserver) && cat /proc/$pid/cmdline"
POD_SECURITY = "cat /etc/rancher/rke2/rke2-pss.yaml 2>/dev/null || true"
REGISTRIES_FILE = "/etc/rancher/rke2/registries.yaml"
REGISTRIES = f"cat {REGISTRIES_FILE} 2>/dev/null; true"


def unit_show(unit: str) -> str:
    """systemd's own view of an RKE2 unit (`systemctl show`; LoadState not-found: the unit does not exist)."""
    return f"systemctl show -p {UNIT_PROPERTIES} {unit}.service"


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    found = [Command(CONFIG), Command(DROPINS), Command(POD_SECURITY), Command(REGISTRIES),
             *(Command(unit_show(unit)) for unit in UNITS)]
    if spec.role == "server":
        found.append(Command(APISERVER_CMDLINE))
    return tuple(found)


def merge_rke2_config(documents: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Effective RKE2 config: config.yaml then config.yaml.d/*.yaml in the order given.

    The last value wins; lists are replaced unless the key ends with '+', which appends.
    """
    merged: dict[str, Any] = {}
    for document in documents:
        for key, value in (document or {}).items():
            key = str(key)
            if key.endswith("+"):
                base = key[:-1]
                current = merged.get(base)
                current_list = [] if current is None else (current if isinstance(current, list) else [current])
                merged[base] = current_list + (value if isinstance(value, list) else [value])
            else:
                merged[key] = value
    return merged


@dataclass(frozen=True)
class Rke2Config:
    """config.yaml merged with config.yaml.d/*.yaml; `error` says why it could not be read."""

    merged: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def effective_config(base: Any, dropins: Any, where: str) -> Rke2Config:
    """The effective RKE2 config from the answers of CONFIG and DROPINS, as RKE2 reads it (last value wins, key+
    appends); a missing config.yaml or YAML that is not a mapping is an `error`, never an empty config."""
    if base.rc != 0:
        return Rke2Config(error=f"{where}: cannot read {CONFIG_FILE}: {base.stderr.strip() or base.rc}")
    try:  # through the one bounded loader: an alias bomb in a drop-in is refused, never expanded
        documents = [loads(base.stdout, f"{where}: {CONFIG_FILE}") or {}]
        for chunk in (c for c in dropins.stdout.split("### ") if c.strip()):
            name, _, body = chunk.partition("\n")
            documents.append(loads(body, f"{where}: {name.strip() or 'config.yaml.d'}") or {})
    except ValueError as error:
        return Rke2Config(error=f"RKE2 config is not valid YAML: {error}")
    if not all(isinstance(d, dict) for d in documents):
        return Rke2Config(error=f"{where}: RKE2 config files must be YAML mappings")
    return Rke2Config(merged=merge_rke2_config(documents))


def parse_unit_show(text: str) -> dict[str, str]:
    """`systemctl show -p ...` as a mapping (KEY=value lines)."""
    return dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)


class Rke2Host(Reading):
    """RKE2 on one host: its config files, units, Pod Security file, registries.yaml and the apiserver command line."""

    @property
    def config_file(self) -> Any:
        return self.answer(CONFIG)

    @property
    def dropins(self) -> Any:
        return self.answer(DROPINS)

    def effective(self) -> Rke2Config:
        """The effective config (config.yaml then its drop-ins, as RKE2 reads them), or why it cannot be read."""
        return effective_config(self.config_file, self.dropins, self.target.where)

    def unit(self, unit: str) -> Any:
        """`systemctl show` of an RKE2 unit (rke2-server, rke2-agent)."""
        return self.answer(unit_show(unit))

    def unit_state(self, unit: str) -> dict[str, str]:
        """systemd's properties of that unit (LoadState not-found: it does not exist)."""
        return parse_unit_show(self.unit(unit).stdout)

    @property
    def pod_security(self) -> Any:
        return self.answer(POD_SECURITY)

    @property
    def registries(self) -> Any:
        return self.answer(REGISTRIES)

    @property
    def apiserver(self) -> Any:
        return self.answer(APISERVER_CMDLINE)

    @cached_property
    def apiserver_cmdline(self) -> str:
        """The running kube-apiserver's command line (empty when none runs)."""
        return split_cmdline(self.apiserver.stdout) if self.apiserver.rc == 0 else ""


def read(target: Any, settings: Settings) -> Rke2Host:
    """The RKE2 probe of one host."""
    return Rke2Host(target, settings)
