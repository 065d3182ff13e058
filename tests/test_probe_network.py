"""The host network probe's parsers: `ip -j addr` and netplan."""

from __future__ import annotations

import json

from pytest_dgxspark.probes import network as p


def test_ip_addr_json_dynamic_flag() -> None:
    text = json.dumps([{"ifname": "enP7s7", "addr_info": [
        {"family": "inet", "local": "192.168.10.21", "prefixlen": 24, "dynamic": True},
        {"family": "inet6", "local": "fe80::1", "prefixlen": 64}]}])
    addresses = p.parse_ip_addr_json(text)
    assert addresses[0] == p.HostAddress("enP7s7", "192.168.10.21", 24, True)
    assert not addresses[1].dynamic


def test_netplan_dhcp_detection() -> None:
    defs = p.netplan_dhcp_interfaces([{"network": {"ethernets": {"enP7s7": {"dhcp4": True}}}},
                                      {"network": {"ethernets": {"eth1": {"dhcp4": False, "addresses": ["10.0.0.2/24"]}}}}])
    assert p.netplan_uses_dhcp(defs["enP7s7"]) and not p.netplan_uses_dhcp(defs["eth1"])
