"""Tolerant readers of Kubernetes objects and site values the checks read.

Host command outputs are parsed by the host probes (`pytest_dgxspark.probes`); checks import those parsers from there."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from pytest_dgxspark.probes.network import addresses_of

# --- rke2 config ----------------------------------------------------------------------------


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """['k=v', 'k2='] -> {'k': 'v', 'k2': ''}."""
    labels = {}
    for item in items:
        key, _, value = str(item).partition("=")
        labels[key.strip()] = value.strip()
    return labels


@dataclass(frozen=True, order=True)
class Taint:
    """A node taint as key, value and effect."""

    key: str
    value: str
    effect: str


def parse_taint(text: str) -> Taint:
    """'key=value:NoSchedule' or 'key:NoSchedule' -> Taint."""
    body, _, effect = str(text).rpartition(":")
    if not body:
        body, effect = effect, ""
    key, _, value = body.partition("=")
    return Taint(key.strip(), value.strip(), effect.strip())


def node_taints(node: Mapping[str, Any]) -> list[Taint]:
    """Taints of a Node object as Taint values."""
    return [
        Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
        for t in (node.get("spec") or {}).get("taints") or []
    ]


def same_endpoint(url_a: str, url_b: str) -> bool:
    """Two https://host:port URLs reach the same API: same port, and host names that share an address."""
    from urllib.parse import urlsplit

    a, b = urlsplit(url_a.rstrip("/")), urlsplit(url_b.rstrip("/"))
    if (a.port or 443) != (b.port or 443) or not a.hostname or not b.hostname:
        return False
    return a.hostname == b.hostname or bool(addresses_of(a.hostname) & addresses_of(b.hostname))


# --- Kubernetes objects ---------------------------------------------------------------------


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Whether a Pod is Running with its Ready condition True."""
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready") == "True"


def pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Pod an auditor reads: name, node, phase, readiness, waiting reasons, images."""
    status = pod.get("status") or {}
    waiting = []
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if "waiting" in state:
            waiting.append(f"{cs.get('name')}: {state['waiting'].get('reason')}")
    return {
        "name": pod["metadata"]["name"],
        "namespace": pod["metadata"].get("namespace"),
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": status.get("phase"),
        "ready": pod_ready(pod),
        "waiting": waiting,
        "images": [c.get("image") for c in (pod.get("spec") or {}).get("containers") or []],
    }


def owner_kinds(obj: Mapping[str, Any]) -> list[str]:
    """'Kind/name' of an object's ownerReferences."""
    return [f"{o.get('kind')}/{o.get('name')}" for o in (obj.get("metadata") or {}).get("ownerReferences") or []]



def node_condition(node: Mapping[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    """A Node condition by type."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


# ClusterPolicy condition reasons (gpu-operator v26.3.2 internal/conditions/consts.go) that say the OPERATOR itself
# found nothing to manage or could not reconcile; OperandNotReady/DriverNotReady say an operand is not ready yet.
OPERATOR_FAULT_REASONS = frozenset({"NoGPUNodes", "NFDLabelsMissing", "ReconcileFailed"})
_STATES_NOT_READY = re.compile(r"states not ready:\s*\[([^\]]*)\]")


@dataclass(frozen=True)
class PolicyReadiness:
    """What a ClusterPolicy status says, and whether it is truly ready."""

    ready: bool
    state: str | None
    reason: str | None
    message: str | None
    reasons: tuple[str, ...] = ()  # reasons of the Ready condition and of an Error condition that is True

    @property
    def operator_fault(self) -> bool:
        """The operator found no GPU node / NFD labels, or failed to reconcile (not an operand problem)."""
        return any(reason in OPERATOR_FAULT_REASONS for reason in self.reasons)

    @property
    def states_not_ready(self) -> tuple[str, ...]:
        """The operand states named in 'ClusterPolicy is not ready, states not ready: [state-driver ...]'."""
        match = _STATES_NOT_READY.search(self.message or "")
        return tuple(match.group(1).replace(",", " ").split()) if match else ()


def clusterpolicy_readiness(policy: Mapping[str, Any]) -> PolicyReadiness:
    """Ready only with state 'ready' AND a Ready=True condition with reason Reconciled.

    `state: ready` is also set with NoGPUNodes or NFDLabelsMissing; those are not ready here. The reason shown is
    the Error condition's when it is True (the operator puts OperandNotReady there), else the Ready condition's.
    """
    status = policy.get("status") or {}
    state = status.get("state")
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    ready_condition = next((c for c in conditions if c.get("type") == "Ready"), None)
    error_condition = next((c for c in conditions if c.get("type") == "Error" and c.get("status") == "True"), None)
    shown = error_condition if error_condition is not None else ready_condition
    reasons = tuple(str(c.get("reason")) for c in (ready_condition, error_condition) if c is not None and c.get("reason"))
    ok = (
        state == "ready"
        and ready_condition is not None
        and ready_condition.get("status") == "True"
        and ready_condition.get("reason") == "Reconciled"
    )
    return PolicyReadiness(ok, state, (shown or {}).get("reason"), (shown or {}).get("message"), reasons)


_EXACT_CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def exact_chart_version(version: Any) -> bool:
    """Whether a chart version pins one release (no range, no wildcard, not 'latest')."""
    return isinstance(version, str) and bool(_EXACT_CHART_VERSION.match(version.strip()))
