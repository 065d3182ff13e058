"""The simulated Kubernetes API server: HTTPS, auth, REST verbs, watch streams, fault injection, request recording."""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pytest_dgxspark.testbed import handlers, resources
from pytest_dgxspark.testbed.kubelet import Kubelet
from pytest_dgxspark.testbed.store import Store


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A metav1.Status, the body of every API error."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                            "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


class Faults:
    """Deterministic (seeded) latency, 500 errors and dropped connections for requests whose path matches `paths`."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.latency = float(spec.get("latency_ms", 0)) / 1000.0
        self.error_rate = float(spec.get("error_rate", 0))
        self.drop_rate = float(spec.get("drop_rate", 0))
        self.paths = re.compile(spec.get("paths") or ".*")
        self.rng = random.Random(spec.get("seed", 0))
        self.lock = threading.Lock()

    def decide(self, path: str) -> str | None:
        """None, "error" or "drop"; latency is slept here."""
        if not self.paths.search(path):
            return None
        with self.lock:
            roll = self.rng.random()
        if self.latency:
            time.sleep(self.latency)
        if roll < self.drop_rate:
            return "drop"
        if roll < self.drop_rate + self.error_rate:
            return "error"
        return None


class Server(ThreadingHTTPServer):
    """Holds the cluster's state; each connection is served on its own thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], directory: Path, cluster: str, world: dict[str, Any], tokens: list[str],
                 faults: dict[str, Any], tls: ssl.SSLContext) -> None:
        super().__init__(address, Handler)
        self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.directory, self.cluster, self.tokens = directory, cluster, set(tokens)
        self.settings = world.get("settings") or {}
        self.store = Store()
        self.logs: dict[str, str] = dict(world.get("logs") or {})
        self.kubelet = Kubelet(self.store, self.settings.get("workload") or {}, self.logs)
        self.faults = Faults(faults or {})
        self.record_lock = threading.Lock()
        self.requests_path = directory / "requests.jsonl"
        self.started = time.time()
        for obj in world.get("objects") or []:
            r = resources.for_object(obj)
            if r is not None:
                self.store.put(r.key, obj, event=False)
        for r in resources.RESOURCES:
            if not r.builtin:
                self.store.put("apiextensions.k8s.io/customresourcedefinitions", resources.crd(r), event=False)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup (socket.getfqdn), which hangs in a netns without DNS."""
        import socketserver

        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, TimeoutError)):
            super().handle_error(request, client_address)

    def record(self, entry: dict[str, Any]) -> None:
        line = json.dumps({"cluster": self.cluster, **entry}) + "\n"
        with self.record_lock, open(self.requests_path, "a") as handle:
            handle.write(line)


class Handler(BaseHTTPRequestHandler):
    """One HTTP/1.1 connection; routing and verbs live in `handlers`."""

    protocol_version = "HTTP/1.1"
    server: Server
    timeout = 300

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        start = time.monotonic()
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.status_sent: int | None = None
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        fault = self.server.faults.decide(parts.path)
        try:
            if fault == "drop":
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            elif fault == "error":
                self.send_json(500, status_body(500, "InternalError", "Internal error occurred: etcdserver: request timed out",
                                                {"causes": [{"message": "etcdserver: request timed out"}]}))
            elif not self._authenticated():
                self.send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            else:
                handlers.dispatch(self, method, parts.path, query, body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        finally:
            self.server.record({"method": method, "path": parts.path, "query": query, "status": self.status_sent,
                                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z",
                                "duration_ms": round((time.monotonic() - start) * 1000, 1),
                                "user_agent": self.headers.get("User-Agent", ""), **({"fault": fault} if fault else {})})

    def _authenticated(self) -> bool:
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:].strip() in self.server.tokens:
            return True
        try:
            cert = self.connection.getpeercert()  # type: ignore[attr-defined]
        except (ValueError, AttributeError):
            cert = None
        return bool(cert)

    def send_json(self, code: int, body: dict[str, Any], content_type: str = "application/json") -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Audit-Id", f"{random.getrandbits(64):016x}")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(raw)
        self.status_sent = code

    def send_text(self, code: int, text: str) -> None:
        raw = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)
        self.status_sent = code

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.status_sent = 200

    def chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def tls_context(pki_dir: Path, cluster: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(pki_dir / f"{cluster}-server.crt", pki_dir / f"{cluster}-server.key")
    ctx.load_verify_locations(cafile=str(pki_dir / f"{cluster}-ca.crt"))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_dgxspark.testbed.apiserver", description=__doc__)
    parser.add_argument("--dir", required=True, type=Path, help="the testbed directory")
    parser.add_argument("--cluster", required=True, choices=("workload", "management"))
    parser.add_argument("--listen", required=True, help="address to listen on (the server node's IP)")
    parser.add_argument("--port", type=int, default=6443)
    args = parser.parse_args(argv)
    config = json.loads((args.dir / f"{args.cluster}-world.json").read_text())
    secrets = json.loads((args.dir / "pki" / f"{args.cluster}-tokens.json").read_text())
    server = Server((args.listen, args.port), args.dir, args.cluster, config, secrets["tokens"], config.get("faults") or {},
                    tls_context(args.dir / "pki", args.cluster))
    print(f"{time.strftime('%H:%M:%S')} apiserver {args.cluster} listening on https://{args.listen}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
