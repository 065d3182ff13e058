"""The support table (support-lifecycle.yaml): each pinned component's lines with the day they were deprecated and
the last day of their support, from their sources, read once; judged against a run's date, never today's."""
from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pytest_dgxspark.data.yamlload import load_yaml

SUPPORT_FILE = Path(__file__).parent / "support-lifecycle.yaml"
LINE_KEYS = frozenset({"line", "deprecated", "end", "sources"})
COMPONENT_KEYS = frozenset({"what", "lines", "unknown"})
ENDED, DEPRECATED, SUPPORTED, UNKNOWN = "ended", "deprecated", "supported", "unknown"


class SupportTableError(Exception):
    """The support table is malformed; the message names the file and every problem."""


@dataclass(frozen=True)
class Line:
    line: str
    deprecated: datetime.date | None
    end: datetime.date | None
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Component:
    name: str
    what: str
    lines: tuple[Line, ...]
    unknown: str  # why a version no line covers is not judged


@dataclass(frozen=True)
class Support:
    """One component version's status on a day: ended (past `end`), deprecated, supported, or unknown (`reason`)."""

    component: str
    what: str
    version: str
    status: str
    line: Line | None
    reason: str = ""


@dataclass(frozen=True)
class SupportTable:
    components: Mapping[str, Component]
    path: Path

    def status(self, component: str, version: str, on: datetime.date) -> Support:
        """`version` of `component` on the day `on`; a version no line covers is unknown, saying why."""
        entry = self.components[component]
        bare = str(version).strip().lstrip("vV").split("+", 1)[0]
        line = next((ln for ln in entry.lines if bare == ln.line.lstrip("vV") or bare.startswith(ln.line.lstrip("vV") + ".")),
                    None)
        if line is None:
            reason = entry.unknown or f"the table ({self.path.name}) has no line of {entry.what} covering {version}"
            return Support(component, entry.what, version, UNKNOWN, None, f"{entry.what} {version}: {reason}")
        if line.end is not None and on > line.end:
            return Support(component, entry.what, version, ENDED, line)
        if line.deprecated is not None and on >= line.deprecated:
            return Support(component, entry.what, version, DEPRECATED, line)
        return Support(component, entry.what, version, SUPPORTED, line)


def _date(value: object, at: str, problems: list[str]) -> datetime.date | None:
    if value is None or isinstance(value, datetime.date):
        return value if not isinstance(value, datetime.datetime) else value.date()
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        problems.append(f"{at}: {value!r} is not a date (YYYY-MM-DD) or null")
        return None


@functools.lru_cache(maxsize=4)
def load_support(path: Path = SUPPORT_FILE) -> SupportTable:
    """Read and check the table once: known keys, dates, sources named for every line."""
    where = str(path)
    doc = load_yaml(path)
    if not isinstance(doc, dict) or set(doc) != {"components"} or not isinstance(doc["components"], dict):
        raise SupportTableError(f"{where}: must be a mapping with exactly the key components")
    problems: list[str] = []
    components: dict[str, Component] = {}
    for name, entry in doc["components"].items():
        at = f"{where}: components.{name}"
        if not isinstance(entry, dict) or not {"what", "lines"} <= set(entry) or set(entry) - COMPONENT_KEYS:
            problems.append(f"{at}: expected what, lines (and unknown)")
            continue
        lines = []
        for index, item in enumerate(entry["lines"] or []):
            here = f"{at}.lines[{index}]"
            if not isinstance(item, dict) or set(item) != LINE_KEYS:
                problems.append(f"{here}: expected {sorted(LINE_KEYS)}")
                continue
            if not item["sources"]:
                problems.append(f"{here} ({item['line']}): no sources named")
            lines.append(Line(str(item["line"]), _date(item["deprecated"], here, problems), _date(item["end"], here, problems),
                              tuple(str(s) for s in item["sources"] or ())))
        if not lines and not entry.get("unknown"):
            problems.append(f"{at}: no lines and no `unknown` saying why")
        components[str(name)] = Component(str(name), str(entry["what"]), tuple(lines), str(entry.get("unknown") or ""))
    if problems:
        raise SupportTableError("; ".join(problems))
    return SupportTable(components, path)
