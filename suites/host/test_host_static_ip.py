"""Host layer: the node's address is static and is the one the inventory and Kubernetes use (ADR 0002 §5-4)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dgxspark.checking import completed, require, unreadable
from pytest_dgxspark.probes.network import (
    IP_ADDR,
    NETPLAN,
    Network,
    addresses_of,
    netplan_dhcp_interfaces,
    netplan_uses_dhcp,
    nmcli_method,
)
from pytest_dgxspark.site.model import HostSpec
from pytest_dgxspark.targets.cluster import node_internal_ips
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.rule("ADR-0002.host-static-ip")
def test_node_internal_ip_is_the_inventory_address(host_spec: HostSpec, host_node: dict[str, Any], evidence: Any) -> None:
    ips = node_internal_ips(host_node)  # what the API says: needs no SSH to the host
    inventory = addresses_of(host_spec.address)  # ansible_host may be a name
    evidence.record("node InternalIP", {"node": host_node["metadata"]["name"], "InternalIP": ips,
                                        "inventory": host_spec.address, "inventory addresses": sorted(inventory)})
    require(inventory & set(ips), (
        f"{host_spec.where}: Node {host_node['metadata']['name']} InternalIP is {', '.join(ips) or 'unset'}, the inventory says "
        f"{host_spec.address}; set node-ip or fix ansible_host"
    ))


@pytest.mark.rule("ADR-0002.host-static-ip")
def test_inventory_address_is_configured_statically(host_target: HostTarget, network_probe: Network, evidence: Any) -> None:
    addresses = addresses_of(host_target.spec.address)
    ip_addr = completed(evidence.answer(host_target, IP_ADDR, network_probe.ip_addr), host_target)
    if ip_addr.rc != 0:
        unreadable(f"{host_target.where}: `ip -j addr show` exited {ip_addr.rc} ({ip_addr.stderr.strip()[-200:]}): the "
                   "host's addresses cannot be read")
    matches = [a for a in network_probe.addresses if a.address in addresses]
    require(
        matches,
        f"{host_target.where}: no interface carries the inventory address {', '.join(sorted(addresses))} (ip -j addr)",
    )
    address = matches[0].address
    iface = matches[0].ifname
    require(not matches[0].dynamic, (
        f"{host_target.where}: {address} on {iface} is a DHCP lease (`dynamic` in ip addr); configure it statically"
    ))
    completed(evidence.answer(host_target, NETPLAN, network_probe.netplan), host_target)
    try:
        documents = network_probe.netplan_documents
    except ValueError as error:
        unreadable(f"{host_target.where}: /etc/netplan/*.yaml is not valid YAML, so how {address} is configured cannot "
                   f"be read: {str(error).splitlines()[0]}")
    definitions = netplan_dhcp_interfaces(documents)
    named = {
        name: d for name, d in definitions.items()
        if name == iface or any(str(a).split("/")[0] == address for a in d.get("addresses") or [])
        or (d.get("set-name") == iface)
    }
    dhcp_netplan = sorted(name for name, d in named.items() if netplan_uses_dhcp(d))
    nm_method = None
    nmcli = completed(network_probe.nm_connection(iface), host_target)
    connection = nmcli.stdout.strip() if nmcli.rc == 0 else ""
    if connection:
        method = completed(evidence.answer(host_target, nmcli_method(connection), network_probe.nm_method(connection)),
                           host_target)
        nm_method = method.stdout.strip() if method.rc == 0 else None
    evidence.record(
        "address configuration",
        {"interface": iface, "netplan": named, "networkmanager_connection": connection or None, "nm_ipv4_method": nm_method},
    )
    require(
        dhcp_netplan == [],
        f"{host_target.where}: netplan enables DHCP on {', '.join(dhcp_netplan)}, which carries {address}; set dhcp4: false "
        "and addresses",
    )
    require(nm_method != "auto", (
        f"{host_target.where}: NetworkManager connection {connection!r} on {iface} uses ipv4.method auto (DHCP); set manual"
    ))
