"""Known causes per rule (known-causes.yaml): the cause an observed message names, the part of it that decides the
cause, and that cause's fix (ko, en) with its source; page 1 shows them instead of the rule's generic fix."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from pytest_dgxspark.judge.status import Status

CATALOG = Path(__file__).with_name("known-causes.yaml")
_KEYS = frozenset({"id", "rules", "pattern", "decisive", "title", "fix", "source"})


@dataclass(frozen=True)
class KnownCause:
    id: str
    rules: tuple[str, ...]
    pattern: re.Pattern[str]
    decisive: re.Pattern[str] | None
    title_en: str
    title_ko: str
    fix_en: str
    fix_ko: str
    source: str


@lru_cache(maxsize=1)
def catalog() -> tuple[KnownCause, ...]:
    """The known causes, validated: every key known, every entry complete, every pattern a regular expression."""
    entries = yaml.safe_load(CATALOG.read_text(encoding="utf-8")) or []
    causes, problems = [], []
    for index, entry in enumerate(entries):
        where = f"{CATALOG}: entry {index + 1} ({entry.get('id') if isinstance(entry, dict) else '?'})"
        if not isinstance(entry, dict) or set(entry) - _KEYS or not {"id", "rules", "pattern", "title", "fix",
                                                                       "source"} <= set(entry):
            problems.append(f"{where}: needs id, rules, pattern, title, fix, source (and optional decisive), no others")
            continue
        try:
            causes.append(KnownCause(
                str(entry["id"]), tuple(entry["rules"]), re.compile(entry["pattern"], re.I),
                re.compile(entry["decisive"], re.I) if entry.get("decisive") else None,
                entry["title"]["en"], entry["title"]["ko"], " ".join(entry["fix"]["en"].split()),
                " ".join(entry["fix"]["ko"].split()), str(entry["source"])))
        except (re.error, KeyError, TypeError) as exc:
            problems.append(f"{where}: {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(causes)


def match(rule: str, messages: list[str]) -> tuple[KnownCause, str] | None:
    """The first known cause of rule that one of messages names, with the decisive excerpt of that message."""
    for cause in catalog():
        if rule not in cause.rules:
            continue
        for message in messages:
            found = cause.pattern.search(message)
            if found is None:
                continue
            decisive = cause.decisive.search(message) if cause.decisive else None
            return cause, (decisive or found).group(0) if decisive else clause(message, found.start(), found.end())
    return None


def clause(message: str, start: int, end: int) -> str:
    """The '; '-separated clause of message around [start, end)."""
    left = message.rfind("; ", 0, start)
    right = message.find("; ", end)
    return message[left + 2 if left >= 0 else 0:right if right >= 0 else len(message)]


def excerpt(message: str, keep: str, limit: int = 300) -> str:
    """message cut to about limit characters, never cutting `keep` (the decisive part): head … keep … when needed."""
    if len(message) <= limit or not keep:
        return message if len(message) <= limit else message[:limit].rstrip() + " …"
    at = message.find(keep)
    if at < 0 or at + len(keep) <= limit:
        return message[:max(limit, at + len(keep))].rstrip() + (" …" if max(limit, at + len(keep)) < len(message) else "")
    head = message[:max(0, limit - len(keep) - 4)].rstrip()
    tail = " …" if at + len(keep) < len(message) else ""
    return f"{head} … {keep}{tail}"


def annotate(cause: dict[str, Any], rule: dict[str, Any]) -> dict[str, Any]:
    """A root cause (matrix.root_causes) with its known cause: `known` (id, titles, source, decisive) and the fix."""
    messages = [str(cause.get("observed") or "")] + [str(t.get("message") or "") for t in rule.get("tests") or []
                                                     if isinstance(t, dict) and t.get("outcome") != Status.PASSED]
    found = match(str(rule.get("id")), [m for m in messages if m])
    if found is None:
        return {**cause, "known": None, "observed_text": excerpt(str(cause.get("observed") or ""), "")}
    known, decisive = found
    return {**cause, "remediation": known.fix_en, "remediation_ko": known.fix_ko,
            "known": {"id": known.id, "title_en": known.title_en, "title_ko": known.title_ko,
                      "source": known.source, "decisive": decisive},
            "observed_text": excerpt(str(cause.get("observed") or ""), decisive)}
