"""Whether the targets are a testbed, from the targets themselves (API header, Node annotation, host file)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_dgxspark.probes.system import IDENTITY as HOST_COMMAND  # the host file, gathered with the probes
from pytest_dgxspark.probes.system import IDENTITY_FILE as HOST_FILE
from pytest_dgxspark.probes.system import MACHINE_ID as MACHINE_ID_COMMAND

# What a testbed says on every interface (docs/internals.md "Self-identification"); a real site never does.
API_HEADER = "X-Dgxspark-Testbed"
NODE_ANNOTATION = "testbed.dgxspark.io/scenario"
# The organizational unit of the testbed's CA and serving certificate: not removable through the API.
CERT_UNIT = "dgxspark-testbed"
# The testbed's sshd says it in its version banner (VersionAddendum), from a config outside the simulated host's files.
SSH_BANNER_MARK = "dgxspark-testbed"
BANNER_TIMEOUT_S = 3.0

identity_key = pytest.StashKey["TargetIdentity"]()


@dataclass
class TargetIdentity:
    """Every sign, seen on a target, that it is simulated; empty for a real site."""

    signs: list[str] = field(default_factory=list)
    machine_ids: dict[str, str] = field(default_factory=dict)  # host -> /etc/machine-id ("" when it has none)
    node_machine_ids: dict[str, str] = field(default_factory=dict)  # Node -> status.nodeInfo.machineID
    _hosts_seen: set[str] = field(default_factory=set)
    _clusters_seen: set[str] = field(default_factory=set)

    @property
    def simulated(self) -> bool:
        return bool(self.signs)

    def add(self, sign: str) -> None:
        if sign not in self.signs:
            self.signs.append(sign)


def of(config: pytest.Config) -> TargetIdentity:
    if identity_key not in config.stash:
        config.stash[identity_key] = TargetIdentity()
    return config.stash[identity_key]


def observe_host(config: pytest.Config, target: Any) -> None:
    """Read the host's /etc/dgxspark-testbed once (over the connection already open; a missing file is a real host)."""
    identity = of(config)
    if target.name in identity._hosts_seen or not getattr(target, "connected", False):
        return
    identity._hosts_seen.add(target.name)
    try:
        result = target.cached(HOST_COMMAND, timeout=15)
    except Exception:  # noqa: BLE001 - an unreachable host is reported by its checks, not here
        return
    scenario = (result.stdout or "").strip().splitlines()[0] if result.rc == 0 and (result.stdout or "").strip() else ""
    if scenario:
        identity.add(f"host {target.name}: {HOST_FILE} names testbed scenario {scenario!r}")
    try:
        machine = target.cached(MACHINE_ID_COMMAND, timeout=15)
        identity.machine_ids[target.name] = (machine.stdout or "").strip() if machine.rc == 0 else ""
    except Exception:  # noqa: BLE001 - the host's checks report a host that does not answer
        pass
    spec = getattr(target, "spec", None)
    if spec is not None and getattr(spec, "connection", "ssh") == "ssh":
        sign = ssh_banner_sign(target.name, str(spec.address), int(spec.port))
        if sign:
            identity.add(sign)


def ssh_banner_sign(name: str, address: str, port: int, timeout: float = BANNER_TIMEOUT_S) -> str | None:
    """A sign when the host's SSH server names the testbed in its version banner (read before any authentication:
    a file removed on the host changes nothing)."""
    import socket

    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            banner = b""
            while b"\n" not in banner and len(banner) < 512:
                chunk = conn.recv(256)
                if not chunk:
                    break
                banner += chunk
    except OSError:
        return None
    line = next((ln for ln in banner.decode("ascii", "replace").splitlines() if ln.startswith("SSH-")), "")
    if SSH_BANNER_MARK in line.split():
        return f"host {name}: its SSH server's banner names the testbed ({line.strip()})"
    return None


def observe_cluster(config: pytest.Config, cluster: Any) -> None:
    """One GET /version read for the testbed's header (once per context; a failure says nothing either way)."""
    identity = of(config)
    if cluster.context in identity._clusters_seen:
        return
    identity._clusters_seen.add(cluster.context)
    try:
        api = cluster.api
        method, url, headers, _, _ = api.param_serialize("GET", "/version", header_params={"Accept": "application/json"},
                                                         auth_settings=["BearerToken"])
        response = api.call_api(method, url, header_params=headers, _request_timeout=(5, 15))
        response.read()
        value = response.getheader(API_HEADER)
    except Exception:  # noqa: BLE001 - the API's own checks report an unreachable API
        return
    if value:
        identity.add(f"Kubernetes API of context {cluster.context!r}: answers with {API_HEADER}: {value}")


def observe_nodes(config: pytest.Config, cluster: Any) -> None:
    """Nodes already listed in this run (the cache only: never an API call) carrying the testbed's annotation."""
    nodes = cluster.cached("nodes") if cluster is not None else None
    for node in nodes or []:
        node_name = (node.get("metadata") or {}).get("name")
        machine = ((node.get("status") or {}).get("nodeInfo") or {}).get("machineID")
        if node_name and machine:
            of(config).node_machine_ids[str(node_name)] = str(machine)
        scenario = ((node.get("metadata") or {}).get("annotations") or {}).get(NODE_ANNOTATION)
        if scenario:
            name = (node.get("metadata") or {}).get("name")
            of(config).add(f"Node {name}: annotation {NODE_ANNOTATION}: {scenario}")


def certificate_unit(pem: bytes) -> str | None:
    """The organizational unit of a PEM certificate's subject, or None (unreadable or none)."""
    try:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        cert = x509.load_pem_x509_certificate(pem)
    except Exception:  # noqa: BLE001 - a certificate that does not parse is no sign either way
        return None
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    return str(units[0].value) if units else None


def kubeconfig_ca_sign(kubeconfig: Any, context: str) -> str | None:
    """A sign when the CA the kubeconfig trusts for `context` is a testbed's (read from the file: no connection)."""
    import base64
    from pathlib import Path

    from pytest_dgxspark.data.yamlload import load_yaml

    try:
        data = load_yaml(Path(kubeconfig)) or {}
        ctx = next(c.get("context") or {} for c in data.get("contexts") or [] if c.get("name") == context)
        cluster = next(c.get("cluster") or {} for c in data.get("clusters") or [] if c.get("name") == ctx.get("cluster"))
        if cluster.get("certificate-authority-data"):
            pem = base64.b64decode(cluster["certificate-authority-data"])
        elif cluster.get("certificate-authority"):
            pem = Path(cluster["certificate-authority"]).read_bytes()
        else:
            return None
    except (OSError, ValueError, StopIteration, AttributeError, TypeError):
        return None
    if certificate_unit(pem) == CERT_UNIT:
        return f"kubeconfig {kubeconfig} context {context!r}: its CA is a testbed's (OU={CERT_UNIT})"
    return None


def served_certificate_sign(server: str, context: str) -> str | None:
    """A sign when the API at `server` serves a testbed's certificate (its TLS handshake alone; no request)."""
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(server)
    if parts.scheme != "https" or not parts.hostname:
        return None
    try:
        pem = ssl.get_server_certificate((parts.hostname, parts.port or 443), timeout=5).encode()
    except (OSError, ValueError):
        return None
    if certificate_unit(pem) == CERT_UNIT:
        return f"Kubernetes API of context {context!r}: serves a testbed's certificate (OU={CERT_UNIT})"
    return None


def observe_certificates(config: pytest.Config, kubeconfig: Any, context: str | None, serve: bool = True) -> None:
    """The kubeconfig's CA for the context, and the certificate its server presents (once per context)."""
    if not kubeconfig or not context:
        return
    identity = of(config)
    key = f"certificates:{context}:{serve}"
    if key in identity._clusters_seen:
        return
    identity._clusters_seen.add(key)
    sign = kubeconfig_ca_sign(kubeconfig, context)
    if sign:
        identity.add(sign)
    if not serve:
        return
    try:
        from pathlib import Path

        from pytest_dgxspark.data.yamlload import load_yaml

        data = load_yaml(Path(kubeconfig)) or {}
        ctx = next(c.get("context") or {} for c in data.get("contexts") or [] if c.get("name") == context)
        server = next((c.get("cluster") or {}).get("server") for c in data.get("clusters") or []
                      if c.get("name") == ctx.get("cluster"))
    except (OSError, ValueError, StopIteration, AttributeError, TypeError):
        return
    served = served_certificate_sign(str(server or ""), context)
    if served:
        identity.add(served)


def hardware_problems(config: pytest.Config, hosts: Any) -> list[str]:
    """Why the hosts' machine identity is not confirmed for a handover: each host's /etc/machine-id must be its Node's
    nodeInfo.machineID (the kubelet reads the same file), seen in this run; empty when every host agrees."""
    identity = of(config)
    problems = []
    for host in hosts:
        seen, node = identity.machine_ids.get(host), identity.node_machine_ids.get(host)
        if not seen:
            problems.append(f"host {host}: its /etc/machine-id was not read in this run, so the machine handed over "
                            "is not identified")
        elif node is None:
            problems.append(f"host {host}: no Node {host} with a nodeInfo.machineID was seen, so the host and the Node "
                            "are not shown to be one machine")
        elif node != seen:
            problems.append(f"host {host}: /etc/machine-id {seen} differs from Node {host}'s machineID {node}: the "
                            "host checked and the Node checked are not one machine")
    return problems


def signs(config: pytest.Config, connections: Any = None) -> list[str]:
    """Every sign of a testbed seen so far (Node annotations from the cache included)."""
    if connections is not None:
        observe_nodes(config, connections.cluster_if_open())
    return list(of(config).signs)


def simulation_signs(config: pytest.Config, targets: Any) -> list[str]:
    """Why this run is SIMULATED: --testbed, and every sign the targets gave (API header, Node annotation, host file)."""
    from pytest_dgxspark.targets.connections import connections_key

    given = [f"--testbed {targets.testbed_ref}"] if targets.simulated else []
    connections = config.stash.get(connections_key, None)
    # the kubeconfig's CA from the file; the served certificate only when the run reached the API anyway
    reached = connections is not None and connections.cluster_if_open() is not None
    observe_certificates(config, getattr(targets, "kubeconfig", None), getattr(targets, "context", None), reached)
    return given + signs(config, connections)
