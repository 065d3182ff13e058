"""Evidence a check records for the report, redacted of secrets before it is stored."""

from __future__ import annotations

import base64
import re
from typing import Any, Mapping

import pytest

evidence_key = pytest.StashKey[list]()

REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"(token|password|passwd|secret|bearer|private[-_]?key|client[-_]?key|key[-_]?data|"
    r"certificate[-_]?data|cert[-_]?data|keydata|certdata|authorization|credentials?)",
    re.IGNORECASE,
)
_TEXT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"-----BEGIN ([A-Z ]*)(PRIVATE KEY|CERTIFICATE)-----.*?-----END \1\2-----", re.DOTALL),
        REDACTED,
    ),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1" + REDACTED),
    (re.compile(r"K10[0-9a-fA-F]{16,}::[^\s\"']+"), REDACTED),
    (
        re.compile(
            r"(?im)^(\s*[\"']?[\w.-]*(?:token|password|passwd|secret|client-key-data|client-certificate-data)"
            r"[\w.-]*[\"']?\s*[:=]\s*)(?!\s*$)[^\n]+"
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)(--(?:token|agent-token|password)[= ])\S+"), r"\1" + REDACTED),
    (re.compile(r"(?i)(\"(?:bearerToken|keyData|certData|password|token)\"\s*:\s*\")[^\"]*(\")"), r"\1" + REDACTED + r"\2"),
)


def redact_text(text: str) -> str:
    """A string with tokens, keys, certificates and passwords replaced by <redacted>."""
    for pattern, replacement in _TEXT_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any) -> Any:
    """A JSON-able copy of value with secrets removed (Secret data, token/key fields, secret strings)."""
    if isinstance(value, Mapping):
        is_secret = value.get("kind") == "Secret"
        result: dict[str, Any] = {}
        for key, item in value.items():
            key = str(key)
            if is_secret and key in ("data", "stringData") and isinstance(item, Mapping):
                result[key] = {k: REDACTED for k in item}
            elif _SECRET_KEY.search(key) and not isinstance(item, (Mapping, list, bool)) and item not in (None, ""):
                result[key] = REDACTED
            else:
                result[key] = redact(item)
        return result
    if isinstance(value, (list, tuple, set)):
        return [redact(item) for item in value]
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace"))
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_text(str(value))


def decode_b64(value: str) -> str:
    """Base64 data of a Secret as text (empty when it does not decode)."""
    try:
        return base64.b64decode(value).decode("utf-8", "replace")
    except (ValueError, TypeError):
        return ""


class Evidence:
    """What one check saw: recorded values and commands, kept in the test item's stash."""

    def __init__(self, store: list[dict[str, Any]]) -> None:
        self._store = store

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The recorded entries (already redacted)."""
        return self._store

    def record(self, label: str, value: Any) -> Any:
        """Store a redacted copy of value under label; returns value unchanged."""
        self._store.append({"label": str(label), "value": redact(value)})
        return value

    def warn(self, message: str) -> None:
        """Record a warning that does not fail the check."""
        self.record("warning", message)

    def command(self, target: Any, cmd: str, timeout: int | None = None) -> Any:
        """Run cmd on a host target, record command, exit status and output; return the CommandResult."""
        result = target.run(cmd, timeout=timeout)
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


def _tail(text: str, limit: int = 8000) -> str:
    return text if len(text) <= limit else "...(truncated)...\n" + text[-limit:]


def for_item(item: pytest.Item) -> Evidence:
    """The Evidence of a test item (created on first use)."""
    store = item.stash.setdefault(evidence_key, [])
    return Evidence(store)
