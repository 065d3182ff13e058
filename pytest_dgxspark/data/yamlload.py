"""YAML loading that refuses duplicate keys, alias bombs and non-UTF-8 bytes, naming the file and line."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# An inventory or site file expands to a few hundred nodes; a billion-laughs file to billions. Anything past
# these budgets is refused before it is built.
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 200_000


class DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key (plain PyYAML silently keeps the last one)."""


class AliasBudgetError(yaml.YAMLError):
    """A document's aliases expand past the budget (a YAML alias bomb)."""


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise DuplicateKeyError(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                f"(first at line {seen[key] + 1})"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


def _construct_timestamp(loader: _StrictLoader, node: yaml.ScalarNode) -> Any:
    """A date-looking scalar that is no real date (2027-02-30) stays text, so the schema names file and key."""
    try:
        return yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    except ValueError:
        return loader.construct_scalar(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)


def _check_budget(root: yaml.Node) -> None:
    """Count the nodes the document expands to (aliases are shared nodes: memoized, so this is linear)."""
    sizes: dict[int, int] = {}
    aliases = 0
    seen_once: set[int] = set()

    def size(node: yaml.Node) -> int:
        nonlocal aliases
        key = id(node)
        if key in sizes:
            aliases += 1
            if aliases > MAX_ALIASES:
                raise AliasBudgetError(f"more than {MAX_ALIASES} aliases (a YAML alias bomb?)")
            return sizes[key]
        if key in seen_once:  # a recursive alias
            raise AliasBudgetError(f"a recursive alias at line {node.start_mark.line + 1}")
        seen_once.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        if total > MAX_EXPANDED_NODES:
            raise AliasBudgetError(
                f"expands to more than {MAX_EXPANDED_NODES} nodes through aliases at line {node.start_mark.line + 1} "
                "(a YAML alias bomb?)"
            )
        sizes[key] = total
        return total

    size(root)


def _read(path: Path) -> str:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save the file as UTF-8"
        ) from None


def _documents(text: str) -> list[Any]:
    loader = _StrictLoader(text)
    try:
        out = []
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check_budget(node)
            out.append(loader.construct_document(node))
        return out
    finally:
        loader.dispose()


def loads(text: str, where: str = "<text>") -> Any:
    """One YAML document from text, strictly; ValueError naming `where` on any problem."""
    try:
        docs = _documents(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if len(docs) > 1:
        raise ValueError(f"{where}: expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def load_yaml(path: Path) -> Any:
    """Load one YAML document strictly; raise ValueError naming the file on any problem."""
    return loads(_read(path), str(path))


def load_yaml_all(path: Path) -> list[Any]:
    """Load every document of a multi-document YAML file strictly."""
    text = _read(path)
    try:
        return [d for d in _documents(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: {exc}") from None
