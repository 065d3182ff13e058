"""Plain value helpers the parsers and checks share: versions, dotted lookups, YAML/CLI booleans and lists."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def version_tuple(text: str) -> tuple[int, ...]:
    """Leading numeric dotted components of a version: 'v2.1.5-k3s1' -> (2, 1, 5)."""
    match = re.search(r"(\d+(?:\.\d+)*)", text or "")
    if match is None:
        return ()
    return tuple(int(part) for part in match.group(1).split("."))


def as_list(value: Any) -> list[str]:
    """A config value as a list of strings (None -> [], 'a,b' -> ['a', 'b'])."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def as_bool(value: Any, default: bool = False) -> bool:
    """A YAML/CLI boolean ('true', True, 'yes') as bool."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in {"true", "yes", "1", "on"}


def dig(data: Mapping[str, Any] | None, dotted: str, default: Any = None) -> Any:
    """data['a']['b'] for 'a.b', default when a step is missing."""
    current: Any = data
    for part in dotted.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return default
        current = current[part]
    return current


def image_tag(image: str) -> str | None:
    """Tag (or digest) of an image reference; None when it has neither."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def image_registry(image: str) -> str:
    """Registry host of an image reference ('docker.io' when it names none)."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"
