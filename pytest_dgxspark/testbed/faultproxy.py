"""The faults a real kube-apiserver cannot be asked to make (5xx bursts, latency, dropped connections, dying mid-run),
made by a TLS proxy in front of it: the scenario's `cluster.faults` (faults.Faults) decide, the real server answers.

The proxy terminates TLS with the API server's own serving certificate and passes the client's identity on the way the
aggregation layer does: its front-proxy client certificate plus X-Remote-User / X-Remote-Group from the client's
verified certificate (a bearer token is passed as it came). Incoming X-Remote-* headers are dropped.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pytest_dgxspark.testbed.faults import MESSAGES, Faults, sleep

HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer", "host",
                 "content-length"})


class Proxy(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], upstream: tuple[str, int], cp_dir: Path, faults: Faults) -> None:
        super().__init__(listen, Handler)
        self.upstream, self.faults = upstream, faults
        self.serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.serving.load_cert_chain(cp_dir / "apiserver.crt", cp_dir / "apiserver.key")
        self.serving.load_verify_locations(cp_dir / "ca.crt")
        self.serving.verify_mode = ssl.CERT_OPTIONAL
        self.client = ssl.create_default_context(cafile=str(cp_dir / "ca.crt"))
        self.client.check_hostname = False
        self.client.load_cert_chain(cp_dir / "front-proxy-client.crt", cp_dir / "front-proxy-client.key")
        self.socket = self.serving.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self.dying = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Proxy

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _identity(self) -> dict[str, str | list[str]]:
        try:
            cert = self.connection.getpeercert()  # type: ignore[attr-defined]
        except (AttributeError, ValueError):
            cert = None
        if not cert:
            return {}
        subject = [pair for rdn in cert.get("subject", ()) for pair in rdn]
        user = next((v for k, v in subject if k == "commonName"), "")
        return {"X-Remote-User": user, "X-Remote-Group": [v for k, v in subject if k == "organizationName"]}

    def _serve(self) -> None:
        faults = self.server.faults
        path = self.path.split("?", 1)[0]
        decision = faults.decide(self.command, path)
        sleep(decision)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if decision.drop:
            self.close_connection = True
            self.connection.close()
            return
        if decision.status:
            reason, message = MESSAGES[decision.status]
            data = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                               "reason": reason, "code": decision.status}).encode()
            self.send_response(decision.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        fatal = faults.fatal(self.command, path)
        status = self._forward(body)
        if fatal and 200 <= status < 300 and faults.count_death():
            self.wfile.flush()
            os._exit(0)  # the API server "dies": every connection resets, every later connect is refused

    def _forward(self, body: bytes | None) -> int:
        upstream = http.client.HTTPSConnection(*self.server.upstream, context=self.server.client, timeout=3600)
        try:
            upstream.putrequest(self.command, self.path, skip_accept_encoding=True)
            for key, value in self.headers.items():
                if key.lower() not in HOP and not key.lower().startswith("x-remote-"):
                    upstream.putheader(key, value)
            for key, value in self._identity().items():
                for one in [value] if isinstance(value, str) else value:  # one header per group, as requestheader reads them
                    upstream.putheader(key, one)
            upstream.putheader("Content-Length", str(len(body or b"")))
            upstream.endheaders(body)
            resp = upstream.getresponse()
        except OSError as exc:
            upstream.close()
            self.send_error(502, f"fault proxy: upstream kube-apiserver unreachable: {exc}")
            return 502
        self.send_response_only(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP:
                self.send_header(key, value)
        streamed = resp.getheader("Content-Length") is None
        if streamed:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        self.end_headers()
        try:
            while True:
                chunk = resp.read1(65536) if streamed else resp.read()
                if not chunk:
                    break
                if streamed:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                else:
                    self.wfile.write(chunk)
                    break
            if streamed:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            upstream.close()
        return resp.status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="ADDRESS:PORT the suite connects to")
    parser.add_argument("--upstream", required=True, help="ADDRESS:PORT of the real kube-apiserver")
    parser.add_argument("--dir", required=True, type=Path, help="the testbed's controlplane/ folder (certificates)")
    parser.add_argument("--faults", required=True, type=Path, help="a JSON file holding the scenario's cluster.faults")
    args = parser.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    up_host, up_port = args.upstream.rsplit(":", 1)
    proxy = Proxy((host, int(port)), (up_host, int(up_port)), args.dir, Faults(json.loads(args.faults.read_text())))
    print(f"fault proxy on {args.listen} -> {args.upstream}", flush=True)
    proxy.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
