"""Evidence a check records for the report, redacted (through the one redaction layer) before it is stored."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pytest_dgxspark.data.redact import REDACTED, redact, redact_text

__all__ = ["REDACTED", "Evidence", "decode_b64", "evidence_key", "for_item", "redact", "redact_text"]

evidence_key = pytest.StashKey[list]()

def decode_b64(value: str) -> str:
    """Base64 data of a Secret as text (empty when it does not decode)."""
    try:
        return base64.b64decode(value).decode("utf-8", "replace")
    except (ValueError, TypeError):
        return ""


class Evidence:
    """What one check saw: recorded values and commands, kept in the test item's stash."""

    def __init__(self, store: list[dict[str, Any]], where: str = "evidence") -> None:
        self._store = store
        self._where = where

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The recorded entries (already redacted)."""
        return self._store

    def record(self, label: str, value: Any) -> Any:
        """Store a redacted copy of value under label; returns value unchanged."""
        clean = redact_text(str(label), f"{self._where}: label")
        self._store.append({"label": clean, "value": redact(bounded(value), f"{self._where}: {clean}")})
        return value

    def warn(self, message: str) -> None:
        """Record a warning that does not fail the check."""
        self.record("warning", message)

    def command(self, target: Any, cmd: str, timeout: int | None = None) -> Any:
        """Run cmd on a host target, record command, exit status and output; return the CommandResult."""
        return self.answer(target, cmd, target.run(cmd, timeout=timeout))

    def answer(self, target: Any, cmd: str, result: Any) -> Any:
        """Record a probe's answer to cmd on a host target as `command` does (command, exit status, output); return
        the CommandResult."""
        self.record(
            f"{target.name}: {cmd}",
            {
                "host": target.name,
                "command": cmd,
                "exit_status": result.rc,
                "stdout": _tail(result.stdout),
                "stderr": _tail(result.stderr),
            },
        )
        return result


MAX_VALUE_CHARS = 64 * 1024  # one recorded string (an API object's embedded YAML): more is left out, and said


def bounded(value: Any, limit: int = MAX_VALUE_CHARS) -> Any:
    """value with every string longer than limit cut to its head and a note of how much was left out (before
    redaction: a 15 MB API field costs no 30 s of redaction)."""
    if isinstance(value, str):
        return value if len(value) <= limit else f"{value[:limit]}...({len(value) - limit} characters left out)"
    if isinstance(value, dict):
        return {k: bounded(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [bounded(v, limit) for v in value]
    return value


def _tail(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else "...(truncated)...\n" + text[-limit:]


def for_item(item: pytest.Item) -> Evidence:
    """The Evidence of a test item (created on first use)."""
    store = item.stash.setdefault(evidence_key, [])
    return Evidence(store, f"evidence of {getattr(item, 'nodeid', 'a test')}")
