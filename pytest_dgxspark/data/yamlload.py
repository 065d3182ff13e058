"""The one loader of every YAML and JSON the suite reads (site, scenario, targets): duplicate keys, alias bombs,
oversized or too deeply nested documents, NaN and non-UTF-8 bytes refused, naming the file (or object) and line.

Errors never quote the document's text (PyYAML's snippet of the offending line could be a password or, through a
symlink, another file's content): only the line and column."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# An inventory or site file expands to a few hundred nodes; a billion-laughs file to billions. Anything past
# these budgets is refused before it is built.
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 200_000
MAX_BYTES = 4 * 1024 * 1024  # a site file, a host's config or an API object's embedded YAML: a few KiB to a MiB
MAX_DEPTH = 64  # nesting of mappings and sequences (a kubeconfig or HelmChart values need about 10)


class BudgetError(ValueError):
    """A document past the loader's size, depth or alias budget."""


class DuplicateKeyError(yaml.YAMLError):
    """A mapping repeats a key (plain PyYAML silently keeps the last one)."""


class AliasBudgetError(yaml.YAMLError):
    """A document's aliases expand past the budget (a YAML alias bomb)."""


# libyaml's parser where PyYAML was built with it (the wheels are): the suite parses its catalog, site and every
# scenario file at each run, and the C parser takes a tenth of the pure-Python one's CPU; the constructors (duplicate
# keys, dates) and the budget stay this module's, on the same nodes
_SafeBase: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeBase):
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

    def size(node: yaml.Node, depth: int = 1) -> int:
        nonlocal aliases
        if depth > MAX_DEPTH:
            raise AliasBudgetError(f"nested deeper than {MAX_DEPTH} levels at line {node.start_mark.line + 1}")
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
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        if total > MAX_EXPANDED_NODES:
            raise AliasBudgetError(
                f"expands to more than {MAX_EXPANDED_NODES} nodes through aliases at line {node.start_mark.line + 1} "
                "(a YAML alias bomb?)"
            )
        sizes[key] = total
        return total

    size(root)


def _read(path: Path, max_bytes: int = MAX_BYTES) -> str:
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    if len(raw) > max_bytes:
        raise BudgetError(f"{path}: larger than {max_bytes} bytes (the loader's budget); refused unread")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save the file as UTF-8"
        ) from None


def describe(exc: yaml.YAMLError) -> str:
    """A YAML error as PyYAML says it, with line and column but without its snippet of the document's text."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return str(exc)
    parts = []
    for text, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark)):
        if text:
            parts.append(text)
        if mark is not None and (text or mark is exc.problem_mark):
            parts.append(f"at line {mark.line + 1}, column {mark.column + 1}")
    if exc.note:
        parts.append(exc.note)
    return " ".join(parts) or type(exc).__name__


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


def _parse(text: str, where: str, max_bytes: int) -> list[Any]:
    if len(text) > max_bytes and len(text.encode("utf-8")) > max_bytes:
        raise BudgetError(f"{where}: larger than {max_bytes} bytes (the loader's budget); refused unparsed")
    try:
        return _documents(text)
    except (DuplicateKeyError, AliasBudgetError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: {describe(exc)}") from None
    except RecursionError:
        raise BudgetError(f"{where}: nested deeper than {MAX_DEPTH} levels (the loader's budget)") from None


def loads(text: str, where: str = "<text>", max_bytes: int = MAX_BYTES) -> Any:
    """One YAML document from text, strictly; ValueError naming `where` on any problem."""
    docs = _parse(text, where, max_bytes)
    if len(docs) > 1:
        raise ValueError(f"{where}: expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def loads_all(text: str, where: str = "<text>", max_bytes: int = MAX_BYTES) -> list[Any]:
    """Every document of a multi-document YAML text, strictly (empty documents left out)."""
    return [d for d in _parse(text, where, max_bytes) if d is not None]


def load_yaml(path: Path, max_bytes: int = MAX_BYTES) -> Any:
    """Load one YAML document strictly; raise ValueError naming the file on any problem."""
    return loads(_read(path, max_bytes), str(path), max_bytes)


def load_yaml_all(path: Path, max_bytes: int = MAX_BYTES) -> list[Any]:
    """Load every document of a multi-document YAML file strictly."""
    return loads_all(_read(path, max_bytes), str(path), max_bytes)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON number")


def _json_depth(doc: Any, max_depth: int) -> bool:
    """Whether doc nests no deeper than max_depth (iterative: a deep document costs no recursion here)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                return False
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return True


def loads_json(text: str | bytes, where: str = "<text>", max_bytes: int = MAX_BYTES,
               max_depth: int | None = MAX_DEPTH) -> Any:
    """One JSON document from text within the size and depth budgets (max_depth None: only the parser's own
    recursion bound), NaN and Infinity refused; ValueError naming `where` (with line and column) on any problem."""
    if len(text) > max_bytes:
        raise BudgetError(f"{where}: larger than {max_bytes} bytes (the loader's budget); refused unparsed")
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise BudgetError(f"{where}: nested deeper than {max_depth or 'the parser allows'} levels (the loader's "
                          "budget)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: not JSON: {exc}") from None
    if max_depth is not None and not _json_depth(doc, max_depth):
        raise BudgetError(f"{where}: nested deeper than {max_depth} levels (the loader's budget)")
    return doc


def load_json(path: Path, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """One JSON file within the loader's budgets; ValueError naming the file on any problem."""
    return loads_json(_read(path, max_bytes), str(path), max_bytes, max_depth)
