"""The stand-in checked against the real kube-apiserver (issue 17 point 4): exchanges recorded on the stand-in, replayed
in order on a fresh stand-in and on the real control plane, answers compared after masking what differs between any
two servers (uids, resourceVersions, timestamps, addresses), every remaining difference explained by one row of the
accepted table (docs/differential.md) or counted as unexplained.

Recording: a stand-in started with DGXSPARK_TESTBED_EXCHANGES=1 writes DIR/exchanges.jsonl, one exchange a line
(request method, path, raw query, content type, body; answer status and body), Secret data and tokens masked.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORD_ENV = "DGXSPARK_TESTBED_EXCHANGES"
MASKED = "<masked>"
# keys whose values differ between any two servers by nature, wherever they appear
VOLATILE_KEYS = frozenset({"uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "managedFields",
                           "generation", "continue", "remainingItemCount", "selfLink", "lastTransitionTime",
                           "lastHeartbeatTime", "lastProbeTime", "lastUpdateTime", "startTime", "startedAt", "finishedAt",
                           "renewTime", "acquireTime", "firstTimestamp", "lastTimestamp", "eventTime", "time",
                           "expirationTimestamp", "containerID", "imageID", "podIP", "hostIP", "token"})
# label and annotation keys whose values are times or ids stamped by whoever wrote the object
VOLATILE_LABELS = frozenset({"nvidia.com/gfd.timestamp", "kubernetes.io/config.seen", "controller-uid",
                             "batch.kubernetes.io/controller-uid"})
_ADDRESS = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
_TOKEN_VOLUME = re.compile(r"\bkube-api-access-[a-z0-9]{5}\b")  # the ServiceAccount admission's random suffix
# a certificate, as PEM or as base64 of PEM (a Secret's ca.crt): each testbed makes its own CA
_PEM = re.compile(r"-----BEGIN [A-Z ]+-----[^-]*-----END [A-Z ]+-----\n?|\bLS0tLS1CRUdJTi[A-Za-z0-9+/]*={0,2}")
_SECRET_KINDS = ("Secret",)


def scrub(document: Any) -> Any:
    """A body fit to record: Secret data and stringData, and TokenRequest tokens, replaced by MASKED."""
    if isinstance(document, dict):
        kind = document.get("kind")
        out = {k: scrub(v) for k, v in document.items()}
        if kind in _SECRET_KINDS:
            for key in ("data", "stringData"):
                if isinstance(out.get(key), dict):
                    out[key] = {k: MASKED for k in out[key]}
        if kind == "TokenRequest" and isinstance(out.get("status"), dict) and "token" in out["status"]:
            out["status"] = {**out["status"], "token": MASKED}
        return out
    if isinstance(document, list):
        return [scrub(v) for v in document]
    return document


def decoded(raw: bytes, content_type: str) -> Any:
    """A body as JSON when it is JSON, else its text ('' for none)."""
    if not raw:
        return ""
    text = raw.decode("utf-8", errors="replace")
    if "json" in (content_type or "") or text[:1] in "{[":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


@dataclass(frozen=True)
class Exchange:
    """One recorded request and the stand-in's answer; `source` says who made it (suite, provisioning, kubectl)."""

    method: str
    path: str
    query: str
    content_type: str
    body: Any
    status: int | None
    answer: Any
    source: str = "suite"
    stream: bool = False
    cluster: str = "workload"
    accept: str = ""  # the request's Accept header, sent again as recorded (protobuf is asked for as JSON)

    @property
    def request(self) -> str:
        """'GET /api/v1/pods?limit=500': how the accepted table names requests (the Argo CD management cluster's
        begin 'management: ')."""
        return ("" if self.cluster == "workload" else f"{self.cluster}: ") + f"{self.method} {self.path}" + \
            (f"?{self.query}" if self.query else "")

    @classmethod
    def of(cls, record: dict[str, Any]) -> Exchange:
        return cls(record["method"], record["path"], record.get("query", ""), record.get("content_type", ""),
                   record.get("body", ""), record.get("status"), record.get("answer", ""), record.get("source", "suite"),
                   bool(record.get("stream")), record.get("cluster", "workload"), record.get("accept", ""))


def load(path: Path, source: str) -> list[Exchange]:
    """The exchanges a stand-in recorded in `path`, tagged with who made them."""
    if not path.is_file():
        return []
    return [Exchange.of({**json.loads(line), "source": source}) for line in path.read_text().splitlines() if line]


def mask(document: Any) -> Any:
    """A body with the per-server values masked: VOLATILE_KEYS and VOLATILE_LABELS, keys ending in Time/Timestamp,
    and inside strings IPv4 addresses, RFC 3339 times, uids, the token volume's random suffix and certificates."""
    if isinstance(document, dict):
        return {k: (MASKED if k in VOLATILE_KEYS or k in VOLATILE_LABELS or k.endswith(("Time", "Timestamp"))
                    else mask(v)) for k, v in document.items()}
    if isinstance(document, list):
        return [mask(v) for v in document]
    if isinstance(document, str):
        masked = _UUID.sub("<uid>", _TIME.sub("<time>", _ADDRESS.sub("<address>", document)))
        return _PEM.sub("<pem>", _TOKEN_VOLUME.sub("kube-api-access-<suffix>", masked))
    return document


@dataclass(frozen=True)
class Difference:
    """Where two answers to one request differ: `where` is a JSON path ('status', 'items[*].spec.nodeName')."""

    request: str
    source: str
    where: str
    standin: Any
    real: Any

    def row(self) -> str:
        return f"{self.source}: {self.request}: {self.where}: stand-in {_short(self.standin)} / real {_short(self.real)}"


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def differences(exchange: Exchange, standin: tuple[int | None, Any], real: tuple[int | None, Any]) -> list[Difference]:
    """Every difference between the two answers to `exchange`, status first, then the masked bodies by path (list
    items by index, named `[*]`, so one row covers the same field of every item)."""
    found: list[Difference] = []
    if standin[0] != real[0]:
        found.append(Difference(exchange.request, exchange.source, "status", standin[0], real[0]))
    if exchange.stream:  # a watch: what arrives depends on timing; its status is compared, not its events
        return found
    seen: set[str] = set()
    for where, a, b in _walk(mask(standin[1]), mask(real[1]), ""):
        if where not in seen:
            seen.add(where)
            found.append(Difference(exchange.request, exchange.source, where or "body", a, b))
    return found


def _walk(a: Any, b: Any, where: str) -> Iterable[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            child = f"{where}.{key}" if where else key
            if key not in a or key not in b:
                yield child, a.get(key, "<absent>"), b.get(key, "<absent>")
            else:
                yield from _walk(a[key], b[key], child)
    elif isinstance(a, list) and isinstance(b, list):
        ids_a, ids_b = _identities(a), _identities(b)
        if ids_a is not None and ids_b is not None:  # objects: compared by namespace/name, whatever the order
            only_a, only_b = sorted(set(ids_a) - set(ids_b)), sorted(set(ids_b) - set(ids_a))
            if only_a or only_b:
                yield f"{where}[*].identity", only_a or "<absent>", only_b or "<absent>"
            for key in sorted(set(ids_a) & set(ids_b)):
                yield from _walk(ids_a[key], ids_b[key], f"{where}[*]")
            return
        if len(a) != len(b):
            yield f"{where}.length", len(a), len(b)
        for x, y in zip(a, b):
            yield from _walk(x, y, f"{where}[*]")
    elif a != b:
        yield where, a, b


def _identities(items: list[Any]) -> dict[str, Any] | None:
    """'namespace/name' -> item when every item is an object with a name (a list's items), else None: two servers
    list the same objects in their own order (and an object only one of them has must not shift the rest)."""
    found: dict[str, Any] = {}
    for item in items:
        md = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(md, dict) or not isinstance(md.get("name"), str):
            return None
        found[f"{md.get('namespace') or ''}/{md['name']}"] = item
    return found if len(found) == len(items) and items else None


@dataclass(frozen=True)
class Accepted:
    """A row of the accepted table: requests matching `request` (a glob), fields matching `where` (a glob), why."""

    request: str
    where: str
    reason: str

    def covers(self, difference: Difference) -> bool:
        """`*` and `?` are wildcards; brackets are literal (paths say `items[*]`)."""
        return fnmatch.fnmatchcase(difference.request, _literal_brackets(self.request)) and \
            fnmatch.fnmatchcase(difference.where, _literal_brackets(self.where))


def _literal_brackets(pattern: str) -> str:
    return pattern.replace("[", "[[]")


def accepted_table(markdown: Path) -> list[Accepted]:
    """The rows of the accepted-differences table in docs/differential.md (`| request | where | reason |`)."""
    rows: list[Accepted] = []
    inside = False
    for line in markdown.read_text().splitlines():
        if line.startswith("## Accepted differences"):
            inside = True
            continue
        if inside and line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if inside and line.startswith("|") else []
        if len(cells) == 3 and not set(cells[0]) <= set("-: ") and cells[0] != "request":
            rows.append(Accepted(cells[0].strip("`"), cells[1].strip("`"), cells[2]))
    return rows


def unexplained(found: Iterable[Difference], table: list[Accepted]) -> list[Difference]:
    """The differences no accepted row covers."""
    return [d for d in found if not any(row.covers(d) for row in table)]


_PROTOBUF = "application/vnd.kubernetes.protobuf"
CONVERGE_S = 20.0


def replayable(exchange: Exchange) -> bool:
    """Whether a recorded request can be sent again: not when its body was protobuf (kubectl auth can-i sends its
    review as protobuf; the recording keeps JSON only), docs/differential.md says which."""
    return _PROTOBUF not in exchange.content_type


def replay_body(exchange: Exchange) -> bytes | None:
    """The request body to send again: JSON as recorded; masked Secret data becomes valid base64 ('masked')."""
    body = exchange.body
    if body in ("", None):
        return None
    if isinstance(body, (dict, list)):
        def unmask(node: Any) -> Any:
            if isinstance(node, dict):
                out = {k: unmask(v) for k, v in node.items()}
                if out.get("kind") == "Secret" and isinstance(out.get("data"), dict):
                    out["data"] = {k: ("bWFza2Vk" if v == MASKED else v) for k, v in out["data"].items()}
                return out
            if isinstance(node, list):
                return [unmask(v) for v in node]
            return node

        return json.dumps(unmask(body)).encode()
    return str(body).encode()


def replay(exchanges: Iterable[Exchange], kubeconfig: Path, context: str, timeout: float = 30.0) -> list[tuple[int | None, Any]]:
    """Send every exchange's request again, in order, to the API of `context` (as that context's user); each answer
    as (status, decoded body). The recorded Accept is sent, JSON where it asked for protobuf (bodies must compare);
    a watch is bounded to 1 s."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), context=context, client_configuration=configuration)
    api = client.ApiClient(configuration)
    answers: list[tuple[int | None, Any]] = []
    try:
        for exchange in exchanges:
            if not replayable(exchange):
                answers.append((exchange.status, exchange.answer))  # not sent: the same answer on both sides
                continue
            query = exchange.query
            if exchange.stream:
                query = re.sub(r"(^|&)timeoutSeconds=\d+", "", query).strip("&")
                query = (query + "&" if query else "") + "timeoutSeconds=1"
            url = configuration.host + exchange.path + (f"?{query}" if query else "")
            # the recorded Accept where it is plain media types (a pods/log GET that accepts only text/plain is a 406
            # on kube-apiserver); JSON where it named nothing, protobuf, or parameters (kubectl's Table and aggregated
            # discovery: docs/differential.md, what is not compared)
            accept = exchange.accept if exchange.accept and _PROTOBUF not in exchange.accept \
                and ";" not in exchange.accept else "application/json"
            headers = {"Accept": accept}
            if exchange.content_type:
                headers["Content-Type"] = exchange.content_type.split(";")[0]
            api.update_params_for_auth(headers, [], ["BearerToken"], exchange.path, exchange.method, None)
            # A read the recording answered 2xx is retried while the server converges (the CUDA pod's log before
            # the pod ran, an object a controller has not made yet): both servers get the same patience.
            deadline = time.monotonic() + (CONVERGE_S if exchange.method == "GET" and 200 <= (exchange.status or 0) < 300
                                           else 0)
            while True:
                try:  # the client's own connection pool (TLS and client certificate as configured), any status back
                    response = api.rest_client.pool_manager.request(exchange.method, url, body=replay_body(exchange),
                                                                    headers=headers, timeout=timeout, retries=False)
                    answer = (response.status, decoded(response.data, response.headers.get("Content-Type") or ""))
                except Exception as exc:  # noqa: BLE001 - a refused or reset request is an answer of its own
                    answer = (None, type(exc).__name__)
                settled = 200 <= (answer[0] or 0) < 300 and not (exchange.path.endswith("/log") and exchange.answer
                                                              and not answer[1])  # a log before its container ran
                if settled or time.monotonic() >= deadline:
                    break
                time.sleep(0.5)
            answers.append(answer)
    finally:
        api.close()
    return answers
