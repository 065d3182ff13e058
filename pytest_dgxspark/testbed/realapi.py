"""A small JSON client for the real kube-apiserver, used by the testbed to write the scenario's world (never by checks)."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml


class ApiError(RuntimeError):
    """A request the real API server refused; `status` is the HTTP code, `body` its Status message."""

    def __init__(self, method: str, path: str, status: int, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.message = message


class Api:
    """HTTPS with the kubeconfig's CA and client certificate; one connection, re-opened when the server closes it."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext, timeout: float = 30.0) -> None:
        self.host, self.port, self.context, self.timeout = host, port, context, timeout
        self._conn: http.client.HTTPSConnection | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path, server: str | None = None) -> Api:
        config = yaml.safe_load(Path(path).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        url = urlsplit(server or cluster["server"])
        context = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        context.check_hostname = False  # the serving certificate names the address; the CA pins the server
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp) / "c.crt", Path(tmp) / "c.key"
            cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
            key.write_bytes(base64.b64decode(user["client-key-data"]))
            context.load_cert_chain(cert, key)
        return cls(url.hostname or "127.0.0.1", url.port or 443, context)

    def _connection(self) -> http.client.HTTPSConnection:
        if self._conn is None:
            self._conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        return self._conn

    def request(self, method: str, path: str, body: Any = None, *, raw: bool = False,
                content_type: str = "application/json") -> tuple[int, Any]:
        """(status, parsed JSON or text); OSError when the server cannot be reached."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json", "Content-Type": content_type}
        for attempt in (1, 2):
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt == 2:
                    raise
            except OSError:
                self.close()
                raise
        text = payload.decode(errors="replace")
        if raw:
            return resp.status, text
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, text

    def call(self, method: str, path: str, body: Any = None, *, ok: tuple[int, ...] = (200, 201),
             content_type: str = "application/json") -> Any:
        """The parsed answer; ApiError unless the status is in `ok`."""
        status, answer = self.request(method, path, body, content_type=content_type)
        if status not in ok:
            message = answer.get("message", answer) if isinstance(answer, dict) else answer
            raise ApiError(method, path, status, str(message)[:2000])
        return answer

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def watch(self, path: str, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        """The events of `path`?watch=1 from `resource_version` (a connection of its own, ended by the server after
        timeout_s); ApiError for a refused watch or an ERROR event (410 Gone: list again)."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout_s + 30)
        try:
            conn.request("GET", f"{path}?watch=1&resourceVersion={resource_version}&timeoutSeconds={timeout_s}",
                         headers={"Accept": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise ApiError("GET", path, resp.status, resp.read().decode(errors="replace")[:500])
            for line in resp:  # one JSON event per line (chunked)
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    raise ApiError("GET", path, int(obj.get("code") or 500), str(obj.get("message")))
                yield event
        finally:
            conn.close()
