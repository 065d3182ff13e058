"""API faults of a scenario (`cluster.faults`): latency, per-path error rates, dropped connections, the server dying.

All draws come from one seeded generator, so a scenario fails the same requests on every run with the same traffic.
"""

from __future__ import annotations

import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

KEYS = {"latency_ms", "error_rate", "drop_rate", "paths", "seed", "errors", "die_after", "forbidden"}
# a `forbidden` entry: what RBAC denies (kube-apiserver's authorization attributes; absent keys match anything)
FORBIDDEN_KEYS = {"verb", "resource", "group", "namespace", "user"}
# the Status a real kube-apiserver answers for each code a scenario may inject
MESSAGES = {
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out"),
    502: ("InternalError", "an error on the server (\"\") has prevented the request from succeeding"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request"),
    429: ("TooManyRequests", "the server has received too many requests and has asked us to try again later"),
}


class FaultSpecError(ValueError):
    """A `cluster.faults` value the testbed cannot honour (named by key)."""


@dataclass(frozen=True)
class Decision:
    """What to do with one request: sleep `latency`, then answer `status` (an error), drop it, or serve it."""

    latency: float = 0.0
    status: int | None = None
    drop: bool = False

    @property
    def name(self) -> str | None:
        return "error" if self.status else "drop" if self.drop else None


@dataclass(frozen=True)
class ErrorRule:
    pattern: re.Pattern[str]
    status: int
    rate: float


def _regex(where: str, text: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise FaultSpecError(f"cluster.faults.{where}: {text!r} is not a regular expression: {exc}") from None


def _rate(where: str, value: Any) -> float:
    try:
        rate = float(value)
    except (TypeError, ValueError):
        rate = -1.0
    if not 0.0 <= rate <= 1.0:
        raise FaultSpecError(f"cluster.faults.{where}: {value!r} is not a fraction between 0 and 1")
    return rate


def _number(where: str, value: Any, whole: bool = False) -> float:
    """A count or a length of time: a number of at least 0 (a whole one where `whole`), never a word or a boolean."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (whole and value != int(value)):
        raise FaultSpecError(f"cluster.faults.{where}: {value!r}, expected a {'whole ' if whole else ''}number of at "
                             "least 0")
    return float(value)


class Faults:
    """Deterministic (seeded) faults for the requests whose path matches: see docs/scenarios.md, `cluster.faults`."""

    def __init__(self, spec: dict[str, Any] | None, where: str = "cluster.faults") -> None:
        if spec is not None and not isinstance(spec, dict):
            raise FaultSpecError(f"{where}: expected a mapping, got {type(spec).__name__}")
        spec = dict(spec or {})
        try:
            self._load(spec)
        except FaultSpecError as exc:
            raise FaultSpecError(str(exc).replace("cluster.faults", where, 1)) from None
        self.rng = random.Random(spec.get("seed", 0))
        self.lock = threading.Lock()
        self.seen_for_death = 0

    def _load(self, spec: dict[str, Any]) -> None:
        unknown = sorted(set(spec) - KEYS)
        if unknown:
            raise FaultSpecError(f"cluster.faults: unknown keys {unknown}; known: {sorted(KEYS)}")
        self.latency = _number("latency_ms", spec.get("latency_ms", 0)) / 1000.0
        self.paths = _regex("paths", spec.get("paths") or ".*")
        self.error_rate = _rate("error_rate", spec.get("error_rate", 0))
        self.drop_rate = _rate("drop_rate", spec.get("drop_rate", 0))
        self.errors: list[ErrorRule] = []
        if not isinstance(spec.get("errors") or {}, dict):
            raise FaultSpecError(f"cluster.faults.errors: expected a mapping of path regex to {{status: <HTTP code>, "
                                 f"rate: <0..1>}}, got {spec.get('errors')!r}")
        for pattern, rule in (spec.get("errors") or {}).items():
            where = f"errors[{pattern!r}]"
            if not isinstance(rule, dict) or set(rule) - {"status", "rate"}:
                raise FaultSpecError(f"cluster.faults.{where}: expected {{status: <HTTP code>, rate: <0..1>}}, got {rule!r}")
            status = rule.get("status", 500)
            if isinstance(status, bool) or status not in MESSAGES:
                raise FaultSpecError(f"cluster.faults.{where}.status: {status} is not one of {sorted(MESSAGES)}")
            self.errors.append(ErrorRule(_regex(where, pattern), status, _rate(f"{where}.rate", rule.get("rate", 1))))
        self.forbidden = _forbidden(spec.get("forbidden"))
        self.die = dict(spec.get("die_after") or {})
        if self.die:
            allowed = {"path", "method", "count", "pod_created_in"}
            if set(self.die) - allowed or not ({"path", "pod_created_in"} & set(self.die)):
                raise FaultSpecError("cluster.faults.die_after: expected {path: <regex>, method: <verb>, count: <n>} or "
                                     f"{{pod_created_in: <namespace regex>}}, got {self.die!r}")
            self.die_path = _regex("die_after.path", self.die.get("path", "$^"))
            self.die_ns = _regex("die_after.pod_created_in", self.die.get("pod_created_in", "$^"))
            self.die_count = int(_number("die_after.count", self.die.get("count", 1), whole=True))

    def denies(self, user: str, info: Any) -> bool:
        """Whether a `forbidden` entry denies `user` the request of RequestInfo `info` (checked after authentication,
        as kube-apiserver authorizes; discovery and other non-resource paths are never denied here)."""
        if info.resource is None:
            return False
        return any(all(rule.get(k) in (None, "*", have) for k, have in (
            ("verb", info.verb), ("resource", info.resource_path), ("group", info.group),
            ("namespace", info.namespace), ("user", user))) for rule in self.forbidden)

    def decide(self, method: str, path: str) -> Decision:
        """The fault for one request (drawn before it is served)."""
        matched = bool(self.paths.search(path))
        latency = self.latency if matched else 0.0
        for rule in self.errors:
            if rule.pattern.search(path):
                return Decision(latency, rule.status if self._roll() < rule.rate else None)
        if not matched or not (self.drop_rate or self.error_rate):
            return Decision(latency)
        roll = self._roll()
        if roll < self.drop_rate:
            return Decision(latency, drop=True)
        if roll < self.drop_rate + self.error_rate:
            return Decision(latency, 500)
        return Decision(latency)

    def _roll(self) -> float:
        with self.lock:
            return self.rng.random()

    def fatal(self, method: str, path: str) -> bool:
        """Whether this request is one `die_after` counts (the server dies once the counted one is answered with 2xx)."""
        if not self.die:
            return False
        if "pod_created_in" in self.die:
            m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path)
            return method == "POST" and m is not None and bool(self.die_ns.search(m[1]))
        return bool(self.die_path.search(path)) and method == str(self.die.get("method", method)).upper()

    def count_death(self) -> bool:
        """Count one successful fatal request; True when it is the last the server answers."""
        with self.lock:
            self.seen_for_death += 1
            return self.seen_for_death == (1 if "pod_created_in" in self.die else self.die_count)


def _forbidden(value: Any) -> list[dict[str, str]]:
    """`cluster.faults.forbidden`: a list of {verb, resource, group, namespace, user} (strings; '*' or absent: any)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise FaultSpecError(f"cluster.faults.forbidden: expected a list of {{verb, resource, group, namespace, user}}, "
                             f"got {value!r}")
    rules = []
    for i, rule in enumerate(value):
        if not isinstance(rule, dict) or not rule or set(rule) - FORBIDDEN_KEYS or \
                not all(isinstance(v, str) for v in rule.values()):
            raise FaultSpecError(f"cluster.faults.forbidden[{i}]: expected a mapping of {sorted(FORBIDDEN_KEYS)} to "
                                 f"strings (e.g. {{verb: list, resource: pods}}), got {rule!r}")
        rules.append(dict(rule))
    return rules


def sleep(decision: Decision) -> None:
    if decision.latency:
        time.sleep(decision.latency)
