"""Probe of the host network: its addresses (`ip -j addr`), netplan's definitions and NetworkManager's method."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pytest_dgxspark.data.values import as_bool
from pytest_dgxspark.data.yamlload import loads_all, loads_json
from pytest_dgxspark.probes import Command, Reading, Settings, quoted

NAME = "network"
IP_ADDR = "ip -j addr show"
NETPLAN = "for f in /etc/netplan/*.yaml /etc/netplan/*.yml; do [ -f \"$f\" ] && { echo '---'; cat \"$f\"; }; done; true"


def nmcli_device(iface: str) -> str:
    """The NetworkManager connection of an interface (nothing when nmcli is absent or the device unmanaged)."""
    return quoted("command -v nmcli >/dev/null && nmcli -t -g GENERAL.CONNECTION device show {}", iface)


def nmcli_method(connection: str) -> str:
    """A NetworkManager connection's IPv4 method (manual, auto = DHCP)."""
    return quoted("nmcli -t -g ipv4.method connection show {}", connection)


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    return (Command(IP_ADDR), Command(NETPLAN))


def followups(spec: Any, settings: Settings, answers: Mapping[str, Any]) -> tuple[Command, ...]:
    """nmcli for the interface that carries the inventory address."""
    ip_addr = answers.get(IP_ADDR)
    if ip_addr is None or ip_addr.rc != 0:
        return ()
    try:
        found = parse_ip_addr_json(ip_addr.stdout)
    except (ValueError, TypeError, AttributeError):
        return ()  # the check says why the addresses cannot be read
    wanted = addresses_of(spec.address)
    return tuple(Command(nmcli_device(a.ifname)) for a in found if a.address in wanted)[:1]


@dataclass(frozen=True)
class HostAddress:
    """An address of `ip -j addr`, with whether the kernel marks it dynamic (DHCP lease)."""

    ifname: str
    address: str
    prefixlen: int
    dynamic: bool


def parse_ip_addr_json(text: str) -> list[HostAddress]:
    """Addresses of `ip -j addr show`."""
    result = []
    for iface in loads_json(text or "[]", "ip -j addr"):
        for info in iface.get("addr_info", []):
            if "local" in info:
                result.append(
                    HostAddress(iface.get("ifname", ""), info["local"], int(info.get("prefixlen", 0)), bool(info.get("dynamic")))
                )
    return result


def netplan_dhcp_interfaces(documents: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, Any]]:
    """Netplan interface definitions (ethernets, bonds, bridges, vlans, wifis) keyed by id."""
    found: dict[str, dict[str, Any]] = {}
    for document in documents:
        network = (document or {}).get("network") or {}
        for group in ("ethernets", "bonds", "bridges", "vlans", "wifis"):
            for name, definition in (network.get(group) or {}).items():
                found[str(name)] = {**found.get(str(name), {}), **(definition or {})}
    return found


def netplan_uses_dhcp(definition: Mapping[str, Any]) -> bool:
    """Whether a netplan interface definition asks for DHCP (v4 or v6)."""
    return as_bool(definition.get("dhcp4")) or as_bool(definition.get("dhcp6"))


def addresses_of(host: str) -> set[str]:
    """The IP addresses a host name (or literal address) stands for; the name itself when it does not resolve."""
    import ipaddress
    import socket

    host = host.strip("[]")
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None)} or {host}
    except OSError:
        return {host}


class Network(Reading):
    """The network of one host: its addresses, netplan's definitions and NetworkManager's view of an interface."""

    @property
    def ip_addr(self) -> Any:
        return self.answer(IP_ADDR)

    @cached_property
    def addresses(self) -> tuple[HostAddress, ...]:
        """The addresses of `ip -j addr`; ValueError (or TypeError) when it is not ip's JSON."""
        return tuple(parse_ip_addr_json(self.ip_addr.stdout))

    @property
    def netplan(self) -> Any:
        return self.answer(NETPLAN)

    @cached_property
    def netplan_documents(self) -> tuple[dict[str, Any], ...]:
        """The netplan YAML documents (mappings only); ValueError when a file is not YAML (or past the loader's
        budgets)."""
        return tuple(d for d in loads_all(self.netplan.stdout or "", "/etc/netplan/*.yaml") if isinstance(d, dict))

    def nm_connection(self, iface: str) -> Any:
        """NetworkManager's connection of an interface (nothing when nmcli is absent or the device unmanaged)."""
        return self.answer(nmcli_device(iface))

    def nm_method(self, connection: str) -> Any:
        """A NetworkManager connection's IPv4 method."""
        return self.answer(nmcli_method(connection))


def read(target: Any, settings: Settings) -> Network:
    """The network probe of one host."""
    return Network(target, settings)
