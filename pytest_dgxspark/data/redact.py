"""The one redaction layer: every byte bound for the bundle passes here; the log says what kind was removed where."""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from pytest_dgxspark.data.secretforms import (
    QUERY_PAIR,
    URL,
    decoded_values,
    forms,
    redact_base64_runs,
    shaped_tokens,
    url_credentials,
)

REDACTED = "<redacted>"

# Key names whose values are secret, in YAML, JSON, env files, INI, CLI flags and Python reprs.
_WORDS = (r"password|passwd|passphrase|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|"
          r"key[-_]?data|cert(?:ificate)?[-_]?data|credentials?|creds|authorization|bearer|session[-_]?key")
SECRET_KEY = re.compile(rf"(?i)(?:{_WORDS})|(?:^|[-_.])pass$|^auth$|dockerconfigjson")
# Keys that name or point at a secret, or switch a feature, rather than hold one (secretName, token-file,
# rke2_secrets_encryption): their values are kept.
REFERENCE_KEY = re.compile(r"(?i)(?:name|names|ref|file|path|namespace|enabled|encryption|mode|dir|type|kind|ttl)$")
_END = r"(?<![nN]ame)(?<![nN]ames)(?<![rR]ef)(?<![fF]ile)(?<![pP]ath)(?<![nN]amespace)(?<![eE]nabled)" \
       r"(?<![eE]ncryption)(?<![mM]ode)(?<![dD]ir)(?<![tT]ype)(?<![kK]ind)(?<![tT]tl)"
_KEY = rf"(?:(?:[\w.-]+/)?[\w.-]*(?:{_WORDS})[\w.-]*|[\w.-]*[-_]pass|auth|\.dockerconfigjson){_END}"
# Values that name no secret (a boolean flag like rke2_secrets_encryption: true, an empty value, a redaction).
_HARMLESS = r"\s*[\"']?(?:true|false|yes|no|null|~|\[\]|\{\}|<redacted>)[\"']?(?=[\s,}\]#)]|\\n|$)"

# (kind, pattern, replacement): applied in order to every text.
_PATTERNS: tuple[tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # the kubernetes client's DEBUG log of whole API answers (Secrets among them): only their size is kept
    ("api-response-body", re.compile(r"(response body: )([^\n]*)"),
     lambda m: f"{m.group(1)}<redacted: {len(m.group(2))} characters>"),
    ("pem-block", re.compile(r"-----BEGIN ([A-Z0-9 ]*)-----.*?(?:-----END \1-----|\Z)", re.DOTALL), REDACTED),
    ("url-userinfo", re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@:'\"<>]+:[^\s/@'\"<>]*@"), r"\1" + REDACTED + "@"),
    ("rke2-join-token", re.compile(r"K10[0-9a-fA-F]{16,}::[^\s\"',}\\]+"), REDACTED),
    ("bearer-token", re.compile(r"(?i)\b(bearer\s+)(?!<redacted>)([A-Za-z0-9._~+/=-]{8,})"), r"\1" + REDACTED),
    ("basic-auth", re.compile(r"(?i)\b(authorization:\s*basic\s+)([A-Za-z0-9+/=]+)"), r"\1" + REDACTED),
    # env entries: `- name: NGC_API_KEY` then `value: ...` (block, flow or JSON)
    ("env-value", re.compile(
        rf"(?i)([\"']?name[\"']?\s*:\s*[\"']?(?:[\w.-]*(?:{_WORDS}|_KEY|_PASS)[\w.-]*)[\"']?\s*(?:,|\n|\\n)"
        r"\s*(?:-\s*)?[\"']?value[\"']?\s*:\s*)(?!" + _HARMLESS + r")(\"[^\"\n]*\"|'[^'\n]*'|[^\s,}\n\\]+)"),
     r"\1" + REDACTED),
    # ... and the same entry written value first: `- value: ...` then `name: REGISTRY_PASS`
    ("env-value", re.compile(
        r"(?i)([\"']?value[\"']?\s*:\s*)(?!" + _HARMLESS + r")(\"[^\"\n]*\"|'[^'\n]*'|[^\s,}\n\\]+)"
        rf"(?=\s*(?:,|\n|\\n)\s*[\"']?name[\"']?\s*:\s*[\"']?[\w.-]*(?:{_WORDS}|_KEY|_PASS)[\w.-]*)"),
     r"\1" + REDACTED),
    # a quoted YAML value that goes on over lines: `password: "abc\` then `def"` (the line form below would take
    # its first line alone)
    ("secret-key-value", re.compile(
        rf"(?im)^(\s*(?:-\s*)?[\"']?(?:{_KEY})[\"']?\s*:\s*)(?!{_HARMLESS})(\"(?:[^\"\\]|\\[\s\S])*\"|'(?:[^']|'')*')"),
     lambda m: m.group(1) + m.group(2)[0] + REDACTED + m.group(2)[0]),
    # block YAML / env / INI lines: `password: x`, `AWS_SECRET_ACCESS_KEY=x`, `token = x`
    ("secret-key-value", re.compile(
        rf"(?im)^(\s*(?:-\s*)?(?:export\s+)?[\"']?(?:{_KEY})[\"']?\s*[:=]\s*)(?!{_HARMLESS})(?!\s*$)([^\n]+)"),
     r"\1" + REDACTED),
    # CLI flags: --token x, --agent-token=x, --etcd-s3-secret-key=x
    ("secret-flag", re.compile(rf"(?i)(--(?:{_KEY})(?:=|\s+))(?!{_HARMLESS})(?!-)(\S+)"), r"\1" + REDACTED),
    # inline: JSON, flow YAML and Python reprs: "token": "x", {token: x}, 'ansible_password': 'x', \ntoken: x
    ("secret-key-value", re.compile(
        rf"(?i)((?:^|[\s{{,(]|\\n)([\"']?)(?:{_KEY})\2\s*[:=]\s*)(?!{_HARMLESS})"
        r"(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|(?:(?!\\n)[^\s,}\]\)'\"])+)"),
     lambda m: m.group(1) + (m.group(3)[0] + REDACTED + m.group(3)[0] if m.group(3)[:1] in "\"'" else REDACTED)),
)


# a YAML block scalar under a secret key: `password: >-` (or `|`, `|2-`, ...) and the lines indented under it
_BLOCK = re.compile(
    rf"(?im)^(?P<key>(?P<indent>[ \t]*)(?:-[ \t]+)?[\"']?(?:{_KEY})[\"']?[ \t]*:)[ \t]*[|>][0-9+-]{{0,2}}[ \t]*(?:#[^\n]*)?\n"
    r"(?P<body>(?:(?:(?P=indent)[ \t]+[^\n]*|[ \t]*)(?:\n|$))*(?:(?P=indent)[ \t]+[^\n]*(?:\n|$)))")


class RedactionLog:
    """What kind of value was removed where (never the value), and the values themselves for the bundle scan."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._seen: dict[str, tuple[str, str]] = {}

    def note(self, kind: str, where: str, value: str | None = None, remember: bool = False) -> None:
        self.counts[(kind, where)] += 1
        if value and remember:
            self.remember(value, kind, where)

    def remember(self, value: str, kind: str, source: str) -> None:
        """A secret value the run read; the bundle scan looks for it. Short or blank values cannot be scanned. A value
        over several lines is remembered whole and line by line, a flow list `[a, b]` item by item (either may be
        quoted elsewhere on its own)."""
        value = value.strip().strip("\"'")
        parts = [value]
        if "\n" in value:
            parts += [line.strip().rstrip("\\").strip() for line in value.splitlines()]
        if value.startswith("[") and value.endswith("]"):
            parts += [item.strip().strip("\"'") for item in value[1:-1].split(",")]
        for part in parts:
            if len(part) >= 6 and REDACTED not in part and part not in self._seen:
                self._seen[part] = (kind, source)
                for other in decoded_values(part):  # a URL-encoded password is the password too
                    if len(other) >= 6 and other not in self._seen and REDACTED not in other:
                        self._seen[other] = (kind, source)

    def secrets(self) -> dict[str, tuple[str, str]]:
        return dict(self._seen)

    def entries(self) -> list[dict[str, Any]]:
        """For results.json: one entry per kind and place, with a count."""
        return [{"kind": k, "where": w, "count": n} for (k, w), n in sorted(self.counts.items())]


LOG = RedactionLog()


def reset() -> RedactionLog:
    """A fresh log for a new run (pytester runs many in one process)."""
    global LOG
    LOG = RedactionLog()
    return LOG


def _secret_part(kind: str, match: re.Match[str]) -> str | None:
    if kind == "api-response-body":
        return None  # a whole answer is no single secret value to scan for
    if kind in ("pem-block", "rke2-join-token"):
        return match.group(0)
    if kind == "url-userinfo":
        return match.group(0)[len(match.group(1)):-1]
    return match.group(match.lastindex or 0) if match.lastindex else match.group(0)


def redact_text(text: str, where: str = "text", remember: bool = False) -> str:
    """text with tokens, keys, certificates, passwords and URL credentials replaced by <redacted>, and every secret
    value the run knows removed in each of its forms (raw, base64, URL-encoded, JSON/HTML-escaped).

    remember: the removed values are secrets the run read (evidence of a host's files, input files), so the bundle
    scan looks for them; free text (tracebacks, logs) is redacted without remembering (no false alarms)."""
    if not text:
        return text
    text = _redact_patterns(text, where, remember)
    text = _redact_urls(text, where, remember)
    text = _redact_shapes(text, where, remember)
    text = scrub_known(text, where)
    return redact_base64_runs(text, lambda decoded: _redact_decoded(decoded, where, remember))


def _redact_decoded(text: str, where: str, remember: bool) -> str:
    """A base64 run's text, redacted (kinds noted as base64:<kind>)."""
    return redact_text(text, f"{where} (base64)", remember)


def _redact_urls(text: str, where: str, remember: bool) -> str:
    """URL userinfo and secret query values (token, access_token, private_token, password, ...) in any URL."""
    if "://" in text:
        def url(match: re.Match[str]) -> str:
            clean, removed = url_credentials(match.group(0))
            for value in removed:
                LOG.note("url-credential", where)
                if remember:
                    for form in decoded_values(value):
                        LOG.remember(form, "url-credential", where)
            return clean

        text = URL.sub(url, text)
    if "=" in text:
        def pair(match: re.Match[str]) -> str:
            LOG.note("url-credential", where)
            if remember:
                for form in decoded_values(match.group(2)):
                    LOG.remember(form, "url-credential", where)
            return match.group(1) + REDACTED

        text = QUERY_PAIR.sub(pair, text)
    return text


def _redact_shapes(text: str, where: str, remember: bool) -> str:
    """Tokens known by their shape alone (detect-secrets' plugins: ghp_..., glpat-..., AKIA..., xox..., JWTs)."""
    for kind, value in sorted(set(shaped_tokens(text)), key=lambda kv: -len(kv[1])):
        if value in text and REDACTED not in value:
            LOG.note(f"token-shape: {kind}", where)
            if remember:
                LOG.remember(value, f"token-shape: {kind}", where)
            text = text.replace(value, REDACTED)
    return text


def scrub_known(text: str, where: str = "text") -> str:
    """text with every secret value the run read replaced in each of its forms (secretforms.forms)."""
    known = LOG.secrets()
    if not known or not text:
        return text
    text, found = scrub(text, known)
    for kind, _ in found:
        LOG.note(f"known-value: {kind}", where)
    return text


def scrub(text: str, secrets: dict[str, tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """text with every known secret value (in each of its forms) replaced; the (kind, source) of each one found."""
    found = []
    for value, (kind, source) in secrets.items():
        hit = False
        for form in sorted(forms(value), key=len, reverse=True):
            if form in text:
                text = text.replace(form, REDACTED)
                hit = True
        if hit:
            found.append((kind, source))
    return text, found


def _redact_block_scalars(text: str, where: str, remember: bool) -> str:
    """`password: >-` and the lines under it become `password: <redacted>` (the line pattern took the `>-` alone)."""
    if "|" not in text and ">" not in text:
        return text

    def sub(match: re.Match[str]) -> str:
        lines = [line.strip() for line in match.group("body").splitlines() if line.strip()]
        LOG.note("secret-key-value", where, "\n".join(lines), remember)
        return f"{match.group('key')} {REDACTED}\n"

    return _BLOCK.sub(sub, text)


def _redact_patterns(text: str, where: str, remember: bool) -> str:
    text = _redact_block_scalars(text, where, remember)
    for kind, pattern, replacement in _PATTERNS:
        def sub(match: re.Match[str], kind: str = kind, replacement: Any = replacement) -> str:
            part = _secret_part(kind, match)
            LOG.note(kind, where, part, remember)
            if remember and part and kind in ("url-userinfo", "rke2-join-token") and ":" in part:
                LOG.remember(part.rsplit(":", 1)[1], kind, where)  # the password alone, wherever it turns up
            return replacement(match) if callable(replacement) else match.expand(replacement)

        text = pattern.sub(sub, text)
    return text


def is_secret_key(key: str) -> bool:
    """A key whose value is a secret (password, token, api-key, ...), not one naming or pointing at a secret."""
    return bool(SECRET_KEY.search(key)) and not REFERENCE_KEY.search(key)


_secret_key = is_secret_key


def redact(value: Any, where: str = "value", remember: bool = True) -> Any:
    """A JSON-able copy of value with secrets removed (Secret data, secret-named keys, env values, secret strings)."""
    if isinstance(value, Mapping):
        is_secret = value.get("kind") == "Secret"
        env_secret = isinstance(value.get("name"), str) and "value" in value and (
            _secret_key(value["name"]) or re.search(r"(?i)_KEY$|_PASS$", value["name"]))
        result: dict[str, Any] = {}
        for key, item in value.items():
            key = str(key)
            if is_secret and key in ("data", "stringData") and isinstance(item, Mapping):
                for k, v in item.items():
                    LOG.note("secret-data", f"{where}.{key}.{k}", str(v), remember)
                result[key] = {k: REDACTED for k in item}
            elif (_secret_key(key) or (env_secret and key == "value")) \
                    and not isinstance(item, (Mapping, list, tuple, bool)) and item not in (None, "", REDACTED):
                LOG.note("secret-key-value", f"{where}.{key}", str(item), remember)
                result[key] = REDACTED
            elif _secret_key(key) and isinstance(item, (list, tuple)):  # apiKeys: [a, b]: each one a secret
                result[key] = [_noted(v, f"{where}.{key}", remember) if _scalar_secret(v)
                               else redact(v, f"{where}.{key}", remember) for v in item]
            else:
                result[key] = redact(item, f"{where}.{key}", remember)
        return result
    if isinstance(value, (list, tuple, set)):
        return [redact(item, where, remember) for item in value]
    if isinstance(value, bytes):
        return redact_text(value.decode("utf-8", "replace"), where, remember)
    if isinstance(value, str):
        return redact_text(value, where, remember)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_text(str(value), where, remember)


def _scalar_secret(value: Any) -> bool:
    """A list item under a secret key that is itself the secret (not a mapping, a list, a flag or nothing)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and value not in ("", REDACTED)


def _noted(value: Any, where: str, remember: bool) -> str:
    LOG.note("secret-key-value", where, str(value), remember)
    return REDACTED


def remember_secrets(value: Any, source: str) -> None:
    """Walk data the run read (site vars, inventory, kubeconfig, RKE2 config) and remember its secret values.

    Nothing is removed here, so the log's counts stay as they were."""
    counts = Counter(LOG.counts)
    redact(value, source)
    LOG.counts = counts


def redact_args(args: list[str], where: str = "pytest arguments") -> list[str]:
    """A command line with the value after a secret-named word or flag redacted (--metadata DB_PASSWORD x, --token x)."""
    out: list[str] = []
    for arg in args:
        previous = out[-1].lstrip("-") if out else ""
        if previous and "=" not in previous and _secret_key(previous) and not arg.startswith("-"):
            LOG.note("secret-argument", where, arg, remember=True)
            out.append(REDACTED)
        else:
            out.append(redact_text(str(arg), where, remember=True))
    return out
