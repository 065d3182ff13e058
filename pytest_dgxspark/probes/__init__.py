"""Host probes: each module names the commands one host fact needs and parses their output into values.

Each probe module declares its `NAME`, the `commands(spec, settings)` it needs (and `followups` whose text depends on
first answers), and a `Reading` of one host: the raw answers (for `completed()` and the evidence) and the values
parsed from them. Checks take the probe's fixture (`driver_probe`, `nvml_probe`, ... in fixtures.py), which is how a
test declares the probes it reads: the gathering step (`pytest_dgxspark.probes.gather`) runs the commands of exactly the
probes the selected tests read (plus `system`, which identity and provenance read), once per host, all hosts at once,
before the first host check. A command that was not gathered runs when a check first reads it.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

COMMAND_TIMEOUT_S = 60  # the SSH backend's default per-command limit (targets_conn/ssh.py)


@dataclass(frozen=True)
class Command:
    """One shell command a probe needs, with the limit after which the host kills it (exit 124)."""

    text: str
    timeout_s: int = COMMAND_TIMEOUT_S
    keep_limit: bool = False  # a limit an option of its own sets (nvidia-smi's): never capped at the command limit


@dataclass(frozen=True)
class Settings:
    """What the run decides about probe commands (timeouts from the run plan)."""

    smi_timeout_s: int = 30
    command_timeout_s: int = COMMAND_TIMEOUT_S  # --dgxspark-command-timeout: the longest a host command may run

    def limit(self, timeout_s: int | None = None, keep: bool = False) -> int:
        """A command's limit on the host: its probe's own, at most the run's command limit; a kept limit (nvidia-smi's
        --dgxspark-smi-timeout, whose expiry is the hang that option times) is never capped."""
        if timeout_s is None:
            return self.command_timeout_s
        return timeout_s if keep else min(timeout_s, self.command_timeout_s)


# The probe every run gathers: identity (is this a testbed?) and provenance read it, whatever was selected.
ALWAYS = "system"


def quoted(template: str, *values: str) -> str:
    """A command naming host values (a path, an interface): each value shell-quoted into `template`'s `{}`."""
    return template.format(*(shlex.quote(str(v)) for v in values))


def split_cmdline(proc_cmdline: str) -> str:
    """/proc/<pid>/cmdline (NUL separated) as one space-separated line."""
    return " ".join(part for part in (proc_cmdline or "").replace("\x00", " ").split())


class Reading:
    """One host's answers to one probe's commands: the gathered answer, else the command runs when first read (once
    per run, `HostTarget.cached`), under the limit the probe gave it."""

    def __init__(self, target: Any, settings: Settings) -> None:
        self.target = target
        self.settings = settings

    def answer(self, text: str, timeout_s: int | None = None, keep_limit: bool = False) -> Any:
        """The CommandResult of one command on this host."""
        return self.target.cached(text, timeout=self.settings.limit(timeout_s, keep_limit))


def modules() -> tuple[Any, ...]:
    """The probe modules, in the order their commands are gathered."""
    from pytest_dgxspark.probes import containerd, hardening, network, nvidia_driver, nvml, rke2, system, upkeep

    return (system, nvidia_driver, nvml, rke2, containerd, network, hardening, upkeep)


def names() -> tuple[str, ...]:
    """Every probe's NAME."""
    return tuple(m.NAME for m in modules())


def _chosen(wanted: Collection[str] | None) -> tuple[Any, ...]:
    """The probe modules to gather: `wanted` by NAME (plus ALWAYS), or all of them when None."""
    if wanted is None:
        return modules()
    unknown = sorted(set(wanted) - set(names()))
    if unknown:
        raise KeyError(f"unknown probe(s) {', '.join(unknown)}; the probes are {', '.join(names())}")
    return tuple(m for m in modules() if m.NAME in wanted or m.NAME == ALWAYS)


def _unique(commands: list[Command]) -> tuple[Command, ...]:
    seen: dict[str, Command] = {}
    for command in commands:
        seen.setdefault(command.text, command)
    return tuple(seen.values())


def chosen_names(wanted: Collection[str] | None) -> tuple[str, ...]:
    """The NAMEs of the probes gathered for `wanted` (all when None), in gathering order."""
    return tuple(m.NAME for m in _chosen(wanted))


def commands_for(spec: Any, settings: Settings, wanted: Collection[str] | None = None) -> tuple[Command, ...]:
    """Every command the `wanted` probes (all when None) need on one host (first round), each once."""
    found: list[Command] = []
    for module in _chosen(wanted):
        found.extend(module.commands(spec, settings))
    return _unique(found)


def followups_for(spec: Any, settings: Settings, answers: Mapping[str, Any],
                  wanted: Collection[str] | None = None) -> tuple[Command, ...]:
    """Commands whose text depends on first-round answers (a config file named on a command line), each once."""
    found: list[Command] = []
    for module in _chosen(wanted):
        follow = getattr(module, "followups", None)
        if follow is not None:
            found.extend(c for c in follow(spec, settings, answers) if c.text not in answers)
    return _unique(found)


def read_by(fixturenames: Iterable[Iterable[str]]) -> frozenset[str]:
    """The probes a selection of tests reads: the probe fixtures (`<NAME>_probe`, fixtures.py) among their fixtures."""
    by_fixture = {f"{name}_probe": name for name in names()}
    return frozenset(by_fixture[f] for closure in fixturenames for f in closure if f in by_fixture)
