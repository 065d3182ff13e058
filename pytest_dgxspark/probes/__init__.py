"""Host probes: each module names the commands one host fact needs and parses their output into frozen values.

The gathering step (`pytest_dgxspark.gather`) runs every probe's commands once per host, all hosts at once, before the
first host check; the checks then read those answers (`HostTarget.run`/`cached` serve them) and judge them per test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

COMMAND_TIMEOUT_S = 60  # the SSH backend's default per-command limit (targets_conn/ssh.py)


@dataclass(frozen=True)
class Command:
    """One shell command a probe needs, with the limit after which the host kills it (exit 124)."""

    text: str
    timeout_s: int = COMMAND_TIMEOUT_S


@dataclass(frozen=True)
class Settings:
    """What the run decides about probe commands (timeouts from the run plan)."""

    smi_timeout_s: int = 30


def modules() -> tuple[Any, ...]:
    """The probe modules, in the order their commands are gathered."""
    from pytest_dgxspark.probes import containerd, network, nvidia_driver, nvml, rke2, system

    return (system, nvidia_driver, nvml, rke2, containerd, network)


def _unique(commands: list[Command]) -> tuple[Command, ...]:
    seen: dict[str, Command] = {}
    for command in commands:
        seen.setdefault(command.text, command)
    return tuple(seen.values())


def commands_for(spec: Any, settings: Settings) -> tuple[Command, ...]:
    """Every command the probes need on one host (first round), each once."""
    found: list[Command] = []
    for module in modules():
        found.extend(module.commands(spec, settings))
    return _unique(found)


def followups_for(spec: Any, settings: Settings, answers: Mapping[str, Any]) -> tuple[Command, ...]:
    """Commands whose text depends on first-round answers (a config file named on a command line), each once."""
    found: list[Command] = []
    for module in modules():
        follow = getattr(module, "followups", None)
        if follow is not None:
            found.extend(c for c in follow(spec, settings, answers) if c.text not in answers)
    return _unique(found)
