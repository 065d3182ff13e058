"""The GPU Operator release table (gpu-operator-releases.yaml): each chart version's operand images, read once."""
from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.values import image_tag
from pytest_dgxspark.data.yamlload import load_yaml

RELEASES_FILE = Path(__file__).parent / "gpu-operator-releases.yaml"
OPERAND_KEYS = frozenset({"kind", "workload", "values", "image"})
RELEASE_KEYS = frozenset({"chart", "found", "sources", "images"})
WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment"})
# The operator appends the node's OS to driver.version (580.126.20-ubuntu24.04): its tag starts with the version.
OS_SUFFIXED = frozenset({"driver"})


class ReleaseTableError(Exception):
    """The release table is malformed; the message names the file and every problem."""


@dataclass(frozen=True)
class Operand:
    """Where one operand runs: its workload (kind, name), the chart values key of its image, the image's name."""

    name: str
    kind: str
    workload: str
    values_key: str
    image: str


@dataclass(frozen=True)
class Release:
    """One chart version: its operand images (empty when NVIDIA's sources did not give them) and its sources."""

    chart: str
    found: bool
    images: Mapping[str, str]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseTable:
    operands: Mapping[str, Operand]
    releases: Mapping[str, Release]  # by normalized chart version (no leading v)
    path: Path

    def release(self, chart_version: str | None) -> Release | None:
        """The table's entry for a chart version (v26.3.2 or 26.3.2), None when the table has none."""
        return self.releases.get(normalized(chart_version)) if chart_version else None

    def known(self) -> list[str]:
        return [r.chart for r in self.releases.values() if r.found]


def normalized(version: str | None) -> str:
    return str(version or "").strip().lstrip("vV")


@functools.lru_cache(maxsize=4)
def load_releases(path: Path = RELEASES_FILE) -> ReleaseTable:
    """Read and check the table once: unknown keys, an image per operand of every found release, sources named."""
    where = str(path)
    doc = load_yaml(path)
    problems: list[str] = []
    if not isinstance(doc, dict) or set(doc) != {"operands", "releases"}:
        raise ReleaseTableError(f"{where}: must be a mapping with exactly the keys operands and releases")
    operands: dict[str, Operand] = {}
    for name, entry in (doc["operands"] or {}).items():
        if not isinstance(entry, dict) or set(entry) != OPERAND_KEYS or entry.get("kind") not in WORKLOAD_KINDS:
            problems.append(f"{where}: operands.{name}: expected {sorted(OPERAND_KEYS)}, kind one of {sorted(WORKLOAD_KINDS)}")
            continue
        operands[str(name)] = Operand(str(name), entry["kind"], str(entry["workload"]), str(entry["values"]),
                                      str(entry["image"]))
    releases: dict[str, Release] = {}
    for index, entry in enumerate(doc["releases"] or []):
        at = f"{where}: releases[{index}]"
        if not isinstance(entry, dict) or set(entry) - RELEASE_KEYS or not {"chart", "found", "sources"} <= set(entry):
            problems.append(f"{at}: expected chart, found, sources (and images when found), got {entry!r}")
            continue
        chart, found, images = str(entry["chart"]), entry["found"] is True, dict(entry.get("images") or {})
        if normalized(chart) in releases:
            problems.append(f"{at}: chart {chart} is listed twice")
        if not entry["sources"]:
            problems.append(f"{at} ({chart}): no sources named")
        if found and set(images) != set(operands):
            problems.append(f"{at} ({chart}): images must name every operand {sorted(operands)}, got {sorted(images)}")
        if not found and images:
            problems.append(f"{at} ({chart}): found: false with images; a version not found has none")
        for name, image in images.items():
            if name in operands and _image_name(image) != operands[name].image:
                problems.append(f"{at} ({chart}): images.{name} {image!r} is not a {operands[name].image} image")
        releases[normalized(chart)] = Release(chart, found, images, tuple(str(s) for s in entry["sources"]))
    if problems:
        raise ReleaseTableError("; ".join(problems))
    return ReleaseTable(operands, releases, path)


def _image_name(image: str) -> str:
    """'nvcr.io/nvidia/k8s/container-toolkit:v1.19.1' -> 'container-toolkit' (tag and digest dropped)."""
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def chart_images(release: Release, values: Mapping[str, Any], table: ReleaseTable | None = None) -> dict[str, str]:
    """The image each operand of `release` runs under the chart values `values` (their <key>.repository, .image and
    .version replace the default's parts, as the chart's templates do)."""
    table = table or load_releases()
    out = {}
    for name, default in release.images.items():
        section = values.get(table.operands[name].values_key) if isinstance(values, Mapping) else None
        section = section if isinstance(section, Mapping) else {}
        base, _, tag = default.rpartition(":")
        repo, _, image = base.rpartition("/")
        nested = section.get("image")
        if isinstance(nested, Mapping):  # a subchart's image: {repository: <full path>, tag}
            out[name] = f"{nested.get('repository') or base}:{nested.get('tag') or tag}"
            continue
        out[name] = f"{section.get('repository') or repo}/{nested or image}:{section.get('version') or tag}"
    return out


def tag_matches(operand: str, found: str | None, wanted: str) -> bool:
    """Whether an image tag found in the cluster is the wanted one (the driver's may carry the node's OS after it)."""
    if found is None:
        return False
    if found == wanted or normalized(found) == normalized(wanted):
        return True
    return operand in OS_SUFFIXED and normalized(found).startswith(normalized(wanted) + "-")


@dataclass(frozen=True)
class Running:
    """An operand's workload as found in the cluster: where, which container, its image and tag."""

    operand: str
    where: str  # "DaemonSet gpu-operator/nvidia-device-plugin-daemonset"
    container: str
    image: str
    tag: str | None


def running_operands(workloads: Mapping[str, list[dict[str, Any]]], namespace: str | None = None,
                     table: ReleaseTable | None = None) -> dict[str, Running]:
    """Each operand whose workload is listed in `workloads` (kind -> the objects listed: DaemonSet, Deployment) ->
    its image: the main container of the operand's image name, else the first main container (what runs there
    instead)."""
    table = table or load_releases()
    found: dict[str, Running] = {}
    for operand in table.operands.values():
        for item in workloads.get(operand.kind) or []:
            meta = item.get("metadata") or {}
            if meta.get("name") != operand.workload or (namespace is not None and meta.get("namespace") != namespace):
                continue
            containers = (((item.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
            chosen = next((c for c in containers if _image_name(c.get("image", "")) == operand.image),
                          containers[0] if containers else None)
            if chosen is not None:
                image = str(chosen.get("image", ""))
                found[operand.name] = Running(operand.name, f"{operand.kind} {meta.get('namespace')}/{meta.get('name')}",
                                              str(chosen.get("name", "")), image, image_tag(image))
                break
    return found
