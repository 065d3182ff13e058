"""The GPU Operator's operands against the chart version that pins them: the images the chart gives (release table,
under the HelmChart's values) beside the images their workloads run."""

from __future__ import annotations

from typing import Any

from pytest_dgxspark.catalog.releases import Release, chart_images, load_releases, running_operands, tag_matches
from pytest_dgxspark.data.values import image_tag


def with_set(values: dict[str, Any], overrides: Any) -> dict[str, Any]:
    """valuesContent with the HelmChart's `set` (dotted keys, applied after it by helm-controller) laid over it."""
    for dotted, value in (overrides or {}).items() if isinstance(overrides, dict) else ():
        *parents, key = str(dotted).split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[key] = value
    return values


def against_the_chart(release: Release, values: dict[str, Any], workloads: dict[str, list[dict[str, Any]]],
                       namespace: str) -> tuple[dict[str, Any], list[str]]:
    """(per operand: the image found and the chart's, for the evidence), [one line per operand whose tag differs]."""
    table = load_releases()
    wanted = chart_images(release, values, table)
    running = running_operands(workloads, namespace, table)
    seen: dict[str, Any] = {}
    wrong = []
    for operand, image in wanted.items():
        section = values.get(table.operands[operand].values_key)
        if isinstance(section, dict) and section.get("enabled") is False:
            seen[operand] = {"chart": image, "found": None, "note": "disabled in the chart values"}
            continue
        found = running.get(operand)
        if found is None:  # no workload: whether it must run is operator-components' question
            seen[operand] = {"chart": image, "found": None, "note": f"no {table.operands[operand].workload} in {namespace}"}
            continue
        want = image_tag(image) or ""
        seen[operand] = {"chart": image, "found": found.image, "where": found.where, "container": found.container}
        if (found.tag or "").startswith("sha256:") and not want.startswith("sha256:"):
            seen[operand]["note"] = "pinned by digest: its version cannot be read from the image reference"
        elif not tag_matches(operand, found.tag, want):
            wrong.append(f"{operand} runs {found.tag or found.image} ({found.where}), the chart gives {want}")
    return seen, wrong
