"""One SSH route per inventory host, built the way Ansible's ssh connection builds its command line.

Ansible dials `ansible_host` (the alias only when there is none) and puts `-o Port=`, `-o IdentityFile=` and
`-o User=` from the inventory before `ansible_ssh_common_args` and `ansible_ssh_extra_args`; OpenSSH takes the first
value it obtains, so those beat the OpenSSH config, whose `Host` lines are matched against the dialled name. The
suite, its run plan and Ansible (`make rke2/*`, the operator preflight) use this one route, so one inventory and one
config serve all of them. `ssh -G` tells what a route resolves to without connecting.
"""
from __future__ import annotations

import fnmatch
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PORT_VARS = ("ansible_port", "ansible_ssh_port")
USER_VARS = ("ansible_user", "ansible_ssh_user")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
ARG_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")


class SshRouteError(Exception):
    """A route that cannot be used as given (the message names the file or inventory key and what was expected)."""


@dataclass(frozen=True)
class SshRoute:
    """What ssh is given for one host: the destination, the config file and the options, in Ansible's order."""

    alias: str
    destination: str
    config: str | None
    options: tuple[str, ...]  # inventory options first, then ansible_ssh_common_args, then ansible_ssh_extra_args
    user: str | None  # ansible_user when the inventory sets it (else ssh decides: the config's User, or the login)

    def argv(self, *before: str) -> list[str]:
        """ssh's arguments up to and including the destination (`before` goes after -F)."""
        return [*(["-F", self.config] if self.config else []), *before, *self.options, self.destination]


def _first(hostvars: Any, names: tuple[str, ...]) -> Any:
    return next((hostvars[n] for n in names if hostvars.get(n) not in (None, "")), None)


def route(spec: Any) -> SshRoute:
    """The route of a HostSpec: its inventory vars and its OpenSSH config (the plan's --dgxspark-ssh-config)."""
    hostvars = dict(spec.vars or {})
    if not hostvars:  # a HostSpec made in code, not read from an inventory: its fields are what was asked for
        hostvars = {"ansible_host": spec.address, "ansible_port": spec.port, "ansible_user": spec.user,
                    "ansible_ssh_private_key_file": spec.identity_file}
    options: list[str] = []
    port = _first(hostvars, PORT_VARS)
    if port is not None:
        options += ["-o", f"Port={port}"]
    key = _first(hostvars, KEY_VARS)
    if key is not None:
        options += ["-o", f"IdentityFile={Path(str(key)).expanduser()}"]
    user = _first(hostvars, USER_VARS)
    if user is not None:
        options += ["-o", f"User={user}"]
    for name in ARG_VARS:
        if hostvars.get(name):
            try:
                options += shlex.split(str(hostvars[name]))
            except ValueError as exc:
                raise SshRouteError(f"host {spec.name}: {name}: not a shell word list ({exc})") from None
    destination = str(hostvars.get("ansible_host") or spec.address or spec.name)
    return SshRoute(alias=spec.name, destination=destination, config=spec.ssh_config, options=tuple(options),
                    user=str(user) if user is not None else None)


def resolved(r: SshRoute, timeout: float = 10) -> dict[str, list[str]]:
    """What ssh makes of the route (`ssh -G`: the config applied, nothing dialled): keyword -> values."""
    try:
        proc = subprocess.run(["ssh", "-G", *r.argv("-o", "BatchMode=yes")], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SshRouteError(f"host {r.alias}: cannot run ssh -G to read the SSH configuration: {exc}") from None
    if proc.returncode != 0:
        raise SshRouteError(f"host {r.alias}: ssh cannot use this configuration "
                            f"({r.config or '~/.ssh/config'}): {proc.stderr.strip()[-300:]}")
    found: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        word, _, value = line.partition(" ")
        found.setdefault(word.lower(), []).append(value.strip())
    return found


def alias_only_blocks(config: str | None, alias: str, destination: str) -> list[str]:
    """`Host` lines of `config` that name the inventory alias but match no name ssh is given: ssh (for the suite and
    for Ansible alike) dials `destination`, so such a block is never read. One line per block, with its line number."""
    if not config or alias == destination:
        return []
    try:
        lines = Path(config).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for number, line in enumerate(lines, 1):
        words = line.replace("=", " ", 1).split()
        if len(words) < 2 or words[0].lower() != "host":
            continue
        patterns = [p for w in words[1:] for p in w.split(",")]
        if alias in patterns and not any(fnmatch.fnmatchcase(destination, p) for p in patterns if not p.startswith("!")):
            found.append(f"{config}:{number}: '{line.strip()}' names the inventory alias {alias!r}, but Ansible and "
                         f"the suite dial ansible_host {destination!r}, so this block is never read: name the address "
                         f"too ('Host {alias} {destination}')")
    return found
