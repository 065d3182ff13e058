"""A scenario checked before bring-up: what the testbed would build from it is built once, dry (no process, no
namespace), so a wrong value is a usage error naming the file and key, never a raw exception at bring-up; and no
path of the scenario (its overlays, its site) resolves outside its folder."""
from __future__ import annotations

from typing import Any

from pytest_dgxspark.data.pathguard import outside_links


def bring_up_problems(scenario: Any) -> list[str]:
    """Every problem building the scenario's hosts and cluster objects would meet, each naming the file and key."""
    from pytest_dgxspark.testbed import node as nodes
    from pytest_dgxspark.testbed import objects
    from pytest_dgxspark.testbed.world import make_context

    path = scenario.directory / "scenario.yaml"
    problems: list[str] = []
    for directory in scenario.chain:
        problems += outside_links(directory, f"{directory / 'scenario.yaml'}")
    names = list(scenario.nodes)
    ctx = make_context(scenario, {name: f"10.255.{i // 250}.{i % 250 + 2}" for i, name in enumerate(names)})
    for name in names:
        spec = scenario.nodes.get(name)
        if spec is not None and not isinstance(spec, dict):
            problems.append(f"{path}: nodes.{name}: must be a mapping, got {type(spec).__name__}")
            continue
        for key in ("host", "kube", "inventory"):
            if (spec or {}).get(key) is not None and not isinstance(spec[key], dict):
                problems.append(f"{path}: nodes.{name}.{key}: must be a mapping, got {type(spec[key]).__name__}")
        for key in ("node_labels", "node_taints"):
            if (spec or {}).get(key) is not None and not isinstance(spec[key], list):
                problems.append(f"{path}: nodes.{name}.{key}: must be a list, got {type(spec[key]).__name__}")
        kube = (spec or {}).get("kube") if isinstance((spec or {}).get("kube"), dict) else {}
        for key, kind in (("labels", dict), ("annotations", dict), ("taints", list), ("kernel", str)):
            if kube.get(key) is not None and not isinstance(kube[key], kind):
                problems.append(f"{path}: nodes.{name}.kube.{key}: must be a {_KINDS[kind]}, got "
                                f"{type(kube[key]).__name__}")
        files = ((spec or {}).get("host") or {}).get("files") if isinstance((spec or {}).get("host"), dict) else None
        if files is not None and not isinstance(files, dict):
            problems.append(f"{path}: nodes.{name}.host.files: must map paths to text, got {type(files).__name__}")
    if problems:
        return problems
    for name in names:
        try:
            nodes.host_facts(ctx, name)
        except Exception as exc:  # noqa: BLE001 - any failure here is one bring-up would meet: said, not raised
            problems.append(f"{path}: nodes.{name}.host: {_said(exc)}")
    if problems:
        return problems
    try:
        objects.build_workload(ctx)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"{path}: the cluster cannot be built from nodes and cluster: {_said(exc)}")
    return problems


_KINDS = {dict: "mapping", list: "list", str: "string"}


def _said(exc: Exception) -> str:
    text = str(exc).strip()
    if isinstance(exc, KeyError):
        return f"the key {text} is missing where the testbed needs it"
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__
