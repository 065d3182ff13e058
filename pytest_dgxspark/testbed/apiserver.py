"""The simulated Kubernetes API server: HTTPS, auth, fault injection, request recording, self-identification.

Routing and verbs live in `handlers` and `writes`, which see a request only through `reply.Exchange`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pytest_dgxspark.testbed import (
    bootstrap,
    crdschemas,
    defaults,
    differential,
    faults,
    fieldmanager,
    handlers,
    podshape,
    resources,
    writes,
)
from pytest_dgxspark.testbed.kubelet import Kubelet
from pytest_dgxspark.testbed.reply import status_body
from pytest_dgxspark.testbed.requestinfo import forbidden_body, request_info
from pytest_dgxspark.testbed.store import Store

IDENTITY_HEADER = "X-Dgxspark-Testbed"
ARGOCD_MANAGER = {"username": "system:serviceaccount:kube-system:argocd-manager",
                  "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]}


class Server(ThreadingHTTPServer):
    """Holds the cluster's state; each connection is served on its own thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], directory: Path, cluster: str, world: dict[str, Any], tokens: list[str],
                 fault_spec: dict[str, Any], tls: ssl.SSLContext) -> None:
        super().__init__(address, Handler)
        self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.directory, self.cluster = directory, cluster
        # bearer token -> its user: the Argo CD manager's (from the PKI), and those TokenRequests mint (tokens.py)
        self.tokens: dict[str, dict[str, Any]] = {token: ARGOCD_MANAGER for token in tokens}
        self.scenario = str(world.get("scenario") or "unnamed")
        self.settings = world.get("settings") or {}
        self.store = Store()
        self.logs: dict[str, str] = dict(world.get("logs") or {})
        self.kubelet = Kubelet(self.store, self.settings.get("workload") or {}, self.logs)
        self.faults = faults.Faults(fault_spec or {})
        self.record_lock = threading.Lock()
        self.requests_path = directory / "requests.jsonl"
        # the differential test's recording (differential.py): whole exchanges, Secret data masked; off by default
        self.exchanges_path = directory / "exchanges.jsonl" if os.environ.get(differential.RECORD_ENV) == "1" else None
        self.started = time.time()
        self.dead = threading.Event()
        self.open_connections: set[socket.socket] = set()
        objects = list(world.get("objects") or [])
        present = {(o.get("kind"), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")) for o in objects}
        nodes = [o for o in objects if o.get("kind") == "Node"]
        for extra in (bootstrap.kubernetes_service(address[0], address[1]) + bootstrap.leases(nodes, self.started)
                      + bootstrap.control_plane_configmaps(self.started, self.ca_pem())):
            if (extra["kind"], extra["metadata"]["namespace"], extra["metadata"]["name"]) not in present:
                objects.append(extra)
        bootstrap.controller_marks(objects)
        for obj in objects:
            r = resources.for_object(obj)
            if r is None:
                continue
            if r.plural == "nodes":
                bootstrap.identify(obj, self.scenario)
            # what the real server's create path adds when the real plane writes the world (defaults.py)
            defaults.apply(obj, None if r.builtin else crdschemas.schema(r.plural, r.group))
            if writes.has_generation(r):
                obj["metadata"].setdefault("generation", 1)
            if not obj["metadata"].get("managedFields"):  # the real plane's world is written by the testbed's client
                fieldmanager.record_update(None, obj, "dgxspark-testbed", r.group_version)
            self.store.put(r.key, obj, event=False)
        for r in resources.RESOURCES:
            if not r.builtin:
                crd = resources.crd(r)
                for condition in crd["status"]["conditions"]:
                    condition["lastTransitionTime"] = podshape.ts(self.started)
                fieldmanager.record_update(None, crd, "dgxspark-testbed", "apiextensions.k8s.io/v1")
                self.store.put("apiextensions.k8s.io/customresourcedefinitions", crd, event=False)
        threading.Thread(target=bootstrap.renew_node_leases, args=(self.store, self.dead), daemon=True).start()

    def ca_pem(self) -> str:
        """The cluster CA's PEM (what the token controller and kube-system's authentication ConfigMap carry)."""
        path = self.directory / "pki" / f"{self.cluster}-ca.crt"
        return path.read_text() if path.is_file() else ""

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

    def record_exchange(self, entry: dict[str, Any]) -> None:
        if self.exchanges_path is None:
            return
        line = json.dumps({"cluster": self.cluster, **entry}) + "\n"
        with self.record_lock, open(self.exchanges_path, "a") as handle:
            handle.write(line)

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.dead.is_set():
            request.close()
            return
        with self.record_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.record_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def stop_listening(self) -> None:
        """First half of the fault `die_after`, before the fatal answer goes out: later connects are refused."""
        if self.dead.is_set():
            return
        self.dead.set()
        print(f"{time.strftime('%H:%M:%S')} apiserver {self.cluster}: dying (fault die_after)", flush=True)
        try:  # shutdown takes the socket out of LISTEN at once, even while serve_forever's poll still holds it
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        threading.Thread(target=self.shutdown, daemon=True).start()

    def die(self) -> None:
        """The fault `die_after`: stop listening and cut every open connection, as a crashed kube-apiserver does.

        The process stays until `down`, so teardown is unchanged.
        """
        self.stop_listening()
        with self.record_lock:
            doomed = list(self.open_connections)
        for conn in doomed:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


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
        self.answer: tuple[bytes, str] | None = None  # what was sent, for the differential recording
        self.user = None  # type: ignore[assignment]  # set by _authenticate, per request (a connection serves many)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        decision = self.server.faults.decide(method, parts.path)
        faults.sleep(decision)
        self.fatal = self.server.faults.fatal(method, parts.path)
        self.died = False
        try:
            if decision.drop:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            elif decision.status:
                reason, message = faults.MESSAGES[decision.status]
                causes = {"causes": [{"message": "etcdserver: request timed out"}]} if decision.status == 500 else {}
                self.send_json(decision.status, status_body(decision.status, reason, message, causes or None))
            elif not self._authenticate():
                self.send_json(401, status_body(401, "Unauthorized", "Unauthorized"))
            elif self.server.faults.forbidden and self.server.faults.denies(
                    self.user["username"], info := request_info(method, parts.path, query)):
                self.send_json(403, forbidden_body(self.user["username"], info))
            else:
                handlers.dispatch(self, method, parts.path, query, body)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        finally:
            died = self.died
            fault = "die" if died else decision.name
            self.server.record({"method": method, "path": parts.path, "query": query, "status": self.status_sent,
                                **({"user": self.user["username"]} if getattr(self, "user", None) else {}),
                                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z",
                                "duration_ms": round((time.monotonic() - start) * 1000, 1),
                                "user_agent": self.headers.get("User-Agent", ""), **({"fault": fault} if fault else {}),
                                **({"latency_ms": round(decision.latency * 1000)} if decision.latency else {})})
            if self.server.exchanges_path is not None:
                self._record_exchange(method, parts.path, parts.query, body)
            if died:
                self.close_connection = True
                self.server.die()

    def _record_exchange(self, method: str, path: str, query: str, body: bytes) -> None:
        content_type = self.headers.get("Content-Type", "")
        raw, answer_type = self.answer or (b"", "")
        self.server.record_exchange({
            "method": method, "path": path, "query": query, "content_type": content_type,
            "accept": self.headers.get("Accept", ""),
            "body": differential.scrub(differential.decoded(body, content_type)), "status": self.status_sent,
            "answer": differential.scrub(differential.decoded(raw, answer_type)),
            **({"stream": True} if self.answer is None and self.status_sent == 200 and method == "GET" else {})})

    def _authenticate(self) -> bool:
        """A known bearer token (the Argo CD manager's) or a client certificate of the cluster CA; sets `self.user`."""
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer ") and header[7:].strip() in self.server.tokens:
            self.user = dict(self.server.tokens[header[7:].strip()])
            return True
        try:
            cert = self.connection.getpeercert()  # type: ignore[attr-defined]
        except (ValueError, AttributeError):
            cert = None
        if not cert:
            return False
        subject = [entry for rdn in cert.get("subject", ()) for entry in rdn]
        self.user = {"username": next((v for k, v in subject if k == "commonName"), ""),
                     "groups": [v for k, v in subject if k == "organizationName"] + ["system:authenticated"]}
        return True

    def send_response(self, code: int, message: str | None = None) -> None:
        """Every answer, errors included, names the testbed scenario (how a client knows it reached a simulation)."""
        if getattr(self, "fatal", False) and 200 <= code < 300 and self.server.faults.count_death():
            self.died = True
            self.server.stop_listening()
        super().send_response(code, message)
        self.send_header(IDENTITY_HEADER, self.server.scenario)

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
        self.answer = (raw, content_type)

    def send_text(self, code: int, text: str) -> None:
        self.send_bytes(code, text.encode(), "text/plain")

    def send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)
        self.status_sent = code
        self.answer = (data, content_type)

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
    server.socket.close()
    if server.dead.is_set():  # died by fault: the kubelets live on; `down` ends the process
        while True:
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
