"""Real servers on loopback for the connection tests: a free port, a host target on the `sshd` fixture, a JSON
HTTP handler and a kubeconfig pointing at one (the `sshd` fixture itself is in tests/conftest.py)."""
from __future__ import annotations

import json
import socket
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from pytest_dgxspark.site.model import HostSpec
from pytest_dgxspark.targets.connections import HostTarget


def free_port() -> int:
    """A loopback port nothing listens on (a refused connection, or a port for a server to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_target(sshd: dict[str, Any], tmp_path: Path, **changes: Any) -> HostTarget:
    """gpu-01 as root on the fixture's sshd with its key and ssh_config; `changes` replace HostSpec fields."""
    spec = HostSpec(name="gpu-01", address="127.0.0.1", port=sshd["port"], user="root", identity_file=sshd["key"],
                    ssh_config=sshd["ssh_config"])
    control = tmp_path / "ctl"
    control.mkdir(exist_ok=True)
    return HostTarget(replace(spec, **changes), str(control), 0)


class JsonHandler(BaseHTTPRequestHandler):
    """An API server's handler that answers JSON and logs nothing; subclasses write do_GET."""

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def write_kubeconfig(path: Path, server: str, token: str, context: str = "site/rke2/gpu",
                     ca_file: Path | None = None) -> Path:
    """A one-cluster, one-user kubeconfig (JSON is YAML) whose `context` serves `server` with a bearer token."""
    cluster: dict[str, Any] = {"server": server}
    if ca_file is not None:
        cluster["certificate-authority"] = str(ca_file)
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
    }))
    return path
