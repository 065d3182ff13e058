"""What one simulated API server serves (`World`), what its generators share (`Context`) and the object helpers."""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pytest_dgxspark.testbed.podshape import container, meta, status_for, suffix
from pytest_dgxspark.testbed.scenario import Scenario

PREVIOUS = "#previous"  # World.logs key suffix of a container's previous (crashed) instance


@dataclass
class World:
    """Everything one API server serves: objects, container logs (`ns/pod/container`, `...#previous`) and settings."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def add(self, obj: dict[str, Any], logs: dict[str, str] | None = None) -> dict[str, Any]:
        self.objects.append(obj)
        for name, text in (logs or {}).items():
            self.logs[f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}/{name}"] = text
        return obj

    def find(self, kind: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    def to_json(self) -> str:
        return json.dumps({"objects": self.objects, "logs": self.logs, "settings": self.settings})


@dataclass(frozen=True)
class Context:
    """What the generators need besides the scenario: node addresses, a seeded RNG and the clock. Never the site."""

    scenario: Scenario
    node_ips: dict[str, str]
    rng: random.Random
    now: float

    @property
    def created(self) -> float:
        return self.now - 2 * 86400


def make_context(scenario: Scenario, node_ips: dict[str, str]) -> Context:
    return Context(scenario, node_ips, random.Random(scenario.name), time.time())


def rand_name(ctx: Context, prefix: str, rs: bool = False) -> str:
    """`prefix-xxxxx`, or `prefix-<rs hash>-xxxxx` for Deployment pods."""
    return f"{prefix}-{suffix(ctx.rng, 10 if rs else 5)[:9 if rs else 5]}" + (f"-{suffix(ctx.rng)}" if rs else "")


def c(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return container(name, image, **extra)


def namespace(ctx: Context, name: str, labels: dict[str, str] | None = None, cluster: str = "workload") -> dict[str, Any]:
    """A Namespace whose uid is the same on every start of the scenario's lineage (the kube-system UID names the
    cluster: a rehearsal against an earlier testbed bundle compares the same cluster, as on a real site)."""
    md = meta(name, None, ctx.created, {"kubernetes.io/metadata.name": name, **(labels or {})})
    md["uid"] = namespace_uid(ctx.scenario.lineage, cluster, name)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": md,
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}


def namespace_uid(lineage: str, cluster: str, name: str) -> str:
    """The uid of Namespace `name` in the `cluster` (workload | management) of a scenario lineage."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://testbed.dgxspark.io/{lineage}/{cluster}/namespaces/{name}"))


def node_uid(lineage: str, name: str) -> str:
    """The uid of Node `name` in a scenario lineage: a node keeps its uid until it is deleted and registers again, so a
    rehearsal against an earlier bundle of the same lineage (or one extending it) sees no re-registration."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"https://testbed.dgxspark.io/{lineage}/workload/nodes/{name}"))


def owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def pod(ctx: Context, name: str, namespace_: str, node_name: str, containers: list[dict[str, Any]], *,
        labels: dict[str, str] | None = None, init: list[dict[str, Any]] | None = None, state: str = "running",
        owner: dict[str, Any] | None = None, host_network: bool = False, created: float | None = None,
        annotations: dict[str, str] | None = None, **status_args: Any) -> dict[str, Any]:
    """A scheduled Pod with a kubelet-shaped status for `state` (see podshape.status_for)."""
    made = created if created is not None else ctx.created
    spec: dict[str, Any] = {"containers": containers, "nodeName": node_name, "restartPolicy": "Always",
                            "schedulerName": "default-scheduler", "serviceAccountName": "default",
                            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
                            "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "securityContext": {}}
    if init:
        spec["initContainers"] = init
    if host_network:
        spec["hostNetwork"] = True
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": meta(name, namespace_, made, labels, annotations=annotations,
                            ownerReferences=[owner] if owner else None),
           "spec": spec}
    obj["status"] = status_for(obj, state, ctx.node_ips.get(node_name, ""), made, **status_args)
    return obj

