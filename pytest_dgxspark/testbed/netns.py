"""Network namespaces and veth links of the testbed's simulated nodes."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Addressing convention (documented in docs/scenarios-hosts.md):
#   testbed slot N (1..250), node i (1-based, 1..63) gets the /30 network 172.29.N.(4*(i-1)),
#   host side .+1, node side .+2. 172.29.0.0/16 is reserved for testbeds on the machine that
#   runs them; one slot (a /24) per live testbed keeps concurrent testbeds apart.
SUBNET_BASE = "172.29"
MAX_SLOT = 250
MAX_NODES = 63
IFNAME_MAX = 15
NODE_IFNAME = "eth0"

_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Link:
    """One node's network namespace and the veth pair that reaches it from the host."""

    netns: str
    host_ifname: str
    host_ip: str
    node_ip: str
    prefix: int


def node_addresses(slot: int, index: int) -> tuple[str, str, int]:
    """Host-side address, node address and prefix of node `index` (1-based) in testbed `slot`."""
    if not 1 <= slot <= MAX_SLOT:
        raise ValueError(f"testbed slot must be in 1..{MAX_SLOT}, got {slot}")
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"node index must be in 1..{MAX_NODES} (one /30 each in a /24), got {index}")
    base = 4 * (index - 1)
    return f"{SUBNET_BASE}.{slot}.{base + 1}", f"{SUBNET_BASE}.{slot}.{base + 2}", 30


def names_for(slot: int, index: int) -> tuple[str, str]:
    """Namespace name and host-side interface name of node `index` in testbed `slot` (both <= 15 chars)."""
    name = f"dgxs{slot}n{index}"
    return name, name


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` must succeed, it exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def _check_name(kind: str, value: str, limit: int | None) -> None:
    if not _NAME_OK.match(value) or (limit is not None and len(value) > limit):
        bound = f" and at most {limit} characters" if limit else ""
        raise ValueError(f"{kind} must be [A-Za-z0-9_.-]{bound}, got {value!r}")


def create(netns: str, host_ifname: str, host_ip: str, node_ip: str, prefix: int = 30, *, default_route: bool = True,
           local: tuple[str, ...] = ()) -> Link:
    """Create `netns` with a veth pair: `host_ifname` (host_ip) outside, eth0 (node_ip) inside. Without
    `default_route` the namespace reaches only host_ip: a connect to any other address fails at once (ENETUNREACH).
    `local`: more addresses (/32 on lo) the namespace answers itself."""
    _check_name("netns name", netns, IFNAME_MAX)
    _check_name("host interface name", host_ifname, IFNAME_MAX)
    link = Link(netns, host_ifname, host_ip, node_ip, prefix)
    destroy(link)  # a leftover of a crashed run must not make this one fail
    try:
        _ip("netns", "add", netns)
        _ip("link", "add", host_ifname, "type", "veth", "peer", "name", NODE_IFNAME, "netns", netns)
        _ip("addr", "add", f"{host_ip}/{prefix}", "dev", host_ifname)
        _ip("link", "set", host_ifname, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "addr", "add", f"{node_ip}/{prefix}", "dev", NODE_IFNAME)
        _ip("-n", netns, "link", "set", NODE_IFNAME, "up")
        if default_route:
            _ip("-n", netns, "route", "add", "default", "via", host_ip)
        for address in local:
            _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")
    except BaseException:
        destroy(link)
        raise
    return link


def set_local(netns: str, addresses: Iterable[str]) -> None:
    """`netns` answers exactly `addresses` (/32 on lo) besides 127.0.0.1: what create's `local` gave, changed later (a
    kept control plane takes each attached testbed's node addresses: keptplane.py)."""
    shown = _ip("-n", netns, "-o", "-4", "addr", "show", "dev", "lo").stdout.split()
    have = {w.split("/")[0] for w in shown if "/" in w and w[0].isdigit()} - {"127.0.0.1"}
    want = set(addresses)
    for address in sorted(have - want):
        _ip("-n", netns, "addr", "del", f"{address}/32", "dev", "lo", check=False)
    for address in sorted(want - have):
        _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")


def destroy(link_or_netns_name: Link | str) -> None:
    """Delete the namespace and the host-side veth; never raises when they are already gone."""
    if isinstance(link_or_netns_name, Link):
        netns, host_ifname = link_or_netns_name.netns, link_or_netns_name.host_ifname
    else:
        netns, host_ifname = link_or_netns_name, None
    if host_ifname:
        _ip("link", "del", host_ifname, check=False)
    if Path("/run/netns", netns).exists():
        _ip("netns", "del", netns, check=False)


def _slot_dir() -> Path:
    for base in (Path("/run/dgxspark-testbed"), Path("/tmp/dgxspark-testbed")):
        try:
            path = base / "slots"
            path.mkdir(parents=True, exist_ok=True)
            return path
        except OSError:
            continue
    raise RuntimeError("no writable lock directory: /run/dgxspark-testbed and /tmp/dgxspark-testbed both failed")


def _owner(lock: Path) -> str | None:
    try:
        return lock.read_text().strip()
    except OSError:
        return None


def allocate_subnet(testbed_id: str) -> int:
    """Reserve a free slot (1..250) for `testbed_id`; the same id gets its slot back."""
    directory = _slot_dir()
    for lock in directory.glob("*.lock"):
        if _owner(lock) == testbed_id:
            return int(lock.stem)
    for slot in range(1, MAX_SLOT + 1):
        lock = directory / f"{slot}.lock"
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(testbed_id + "\n")
        return slot
    raise RuntimeError(f"all {MAX_SLOT} testbed slots under {directory} are taken; stop old testbeds or remove stale locks")


def release_subnet(testbed_id: str) -> None:
    """Release the slot held by `testbed_id` (no-op when it holds none)."""
    directory = _slot_dir()
    for lock in directory.glob("*.lock"):
        if _owner(lock) == testbed_id:
            lock.unlink(missing_ok=True)
