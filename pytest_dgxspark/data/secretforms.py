"""A secret in every form a text may hold it (raw, base64, URL-encoded, JSON/HTML-escaped) and secrets by shape.

The redaction layer (redact.py) and the bundle's byte scan (secretscan.py) share these: what one removes the other
looks for. Token shapes come from detect-secrets' regex plugins (GitHub, GitLab, AWS, Slack, JWT, ...), URL
credentials from urllib's own split of a URL (userinfo, and query keys such as token, access_token, private_token,
password), base64 runs are decoded and redacted inside.
"""
from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, unquote_plus, urlencode, urlsplit, urlunsplit

# The regex plugins of detect-secrets that name a token by its shape alone. Left out: the keyword and entropy
# plugins (they flag any long word; the key-named patterns of redact.py cover key: value), the public-IP plugin
# (addresses are evidence, not secrets), those that only match next to a vendor keyword, and Artifactory's and
# Mailchimp's (any capitalised word of ten letters, any 32 hex digits before -us1: false alarms in evidence).
_PLUGINS = (
    "aws.AWSKeyDetector", "azure_storage_key.AzureStorageKeyDetector",
    "basic_auth.BasicAuthDetector", "discord.DiscordBotTokenDetector", "github_token.GitHubTokenDetector",
    "gitlab_token.GitLabTokenDetector", "jwt.JwtTokenDetector", "npm.NpmDetector",
    "openai.OpenAIDetector", "pypi_token.PypiTokenDetector", "sendgrid.SendGridDetector", "slack.SlackDetector",
    "square_oauth.SquareOAuthDetector", "stripe.StripeDetector", "telegram_token.TelegramBotTokenDetector",
    "twilio.TwilioKeyDetector",
)
MIN_SHAPE_LEN = 8
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-.+/=]*")  # a shape match shorter than this is no token (a plugin's optional group)


@lru_cache(maxsize=1)
def detectors() -> tuple[tuple[str, Any], ...]:
    """(secret type, plugin) for each detect-secrets regex plugin named above."""
    import importlib

    found = []
    for dotted in _PLUGINS:
        module, _, name = dotted.rpartition(".")
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)()
        found.append((str(plugin.secret_type), plugin))
    return tuple(found)


def shaped_tokens(text: str) -> Iterator[tuple[str, str]]:
    """(secret type, value) of every token detect-secrets' plugins find in text by its shape."""
    if not text:
        return
    for kind, plugin in detectors():
        for regex in plugin.denylist:  # the plugin's own patterns; its analyze_string yields a prefix group alone
            for match in regex.finditer(text):
                start = match.start()
                if start and (text[start - 1].isalnum() or text[start - 1] == "_") and text[start].isalnum():
                    continue  # inside a longer word (laughs_scenario_... is no ghs_ token)
                groups = [g for g in match.groups() if g and len(g) >= MIN_SHAPE_LEN]
                value = groups[-1] if groups else match.group(0)
                if kind == "JSON Web Token":  # its lazy pattern stops early: the token is the whole run
                    tail = _TOKEN_TAIL.match(text, match.end())
                    value += tail.group(0) if tail else ""
                if len(value) >= MIN_SHAPE_LEN:
                    yield kind, value


# Query keys and userinfo that carry a credential in a URL (GIT_URL?private_token=, a chart repo's ?access_token=).
URL_SECRET_KEY = re.compile(
    r"(?i)^(?:.*token|password|passwd|pwd|pass|secret|client[-_]?secret|api[-_]?key|apikey|key|auth|"
    r"sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|credential|session)$")
URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>`\\]+")
# a query string without its URL (a path in a log line, `?token=...` after an escaped quote)
QUERY_PAIR = re.compile(r"(?i)([?&;](?:[\w.-]*token|password|passwd|pwd|secret|client_secret|api[-_]?key|apikey|"
                        r"auth|sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token)=)"
                        r"(?!<redacted>|%3Credacted%3E)([^&#\s\"'<>\\]+)")


def url_credentials(url: str) -> tuple[str, list[str]]:
    """url with its userinfo password and secret query values replaced by <redacted>; the values removed."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, []
    removed: list[str] = []
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and password and password != "<redacted>":
            removed.append(unquote(password))
            netloc = f"{user}:<redacted>@{hostport}"
        elif not colon and _token_like(user):  # a token as the user name (https://TOKEN@host/, not git@)
            removed.append(unquote(user))
            netloc = f"<redacted>@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        changed = False
        out = []
        for key, value in pairs:
            if URL_SECRET_KEY.match(key) and value and value != "<redacted>":
                removed.append(value)
                out.append((key, "<redacted>"))
                changed = True
            else:
                out.append((key, value))
        if changed:
            query = urlencode(out, safe="<>/:@,")
    if not removed:
        return url, []
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)), removed


def _token_like(word: str) -> bool:
    return len(word) >= 16 and "<redacted>" not in word and bool(re.search(r"\d", word)) \
        and bool(re.search(r"[A-Za-z]", word))


def _b64_slices(data: bytes, alphabet: Callable[[bytes], bytes]) -> set[str]:
    """The base64 characters that encode data wherever it sits in a longer encoded text (3 alignments)."""
    out = set()
    for k in range(3):
        encoded = alphabet(b"\0" * k + data).decode("ascii")
        start = -(-8 * k // 6)
        end = (8 * (k + len(data))) // 6
        if end - start >= 6:
            out.add(encoded[start:end])
    return out


@lru_cache(maxsize=4096)
def forms(value: str) -> frozenset[str]:
    """Every form of value a text may carry: raw, JSON-escaped, HTML-escaped (and both), URL-encoded, base64 (std
    and URL-safe, at every alignment inside a longer encoding), and base64 of its JSON-escaped form."""
    if not value:
        return frozenset()
    escaped = json.dumps(value)[1:-1]
    texts = {value, escaped, html.escape(value), html.escape(value, quote=False), html.escape(escaped),
             quote(value, safe=""), quote_plus(value, safe=""), quote(value, safe="/:@")}
    for text in (value, escaped):
        raw = text.encode("utf-8")
        texts |= _b64_slices(raw, base64.b64encode) | _b64_slices(raw, base64.urlsafe_b64encode)
    return frozenset(t for t in texts if t)


def decoded_values(value: str) -> set[str]:
    """value and what it stands for when it is URL-encoded (a password read from a URL)."""
    out = {value}
    for decode in (unquote, unquote_plus):
        try:
            out.add(decode(value))
        except (UnicodeDecodeError, ValueError):
            pass
    return {v for v in out if v}


BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}={0,2}(?![A-Za-z0-9+/=_-])")


def _decode_run(run: str) -> str | None:
    """The UTF-8 text a base64 run encodes, or None when it is no base64 of text."""
    padded = run + "=" * (-len(run) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(padded.encode("ascii"))
        except (binascii.Error, ValueError):
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text and sum(ch.isprintable() or ch in "\n\r\t" for ch in text) >= 0.95 * len(text):
            return text
    return None


def redact_base64_runs(text: str, redact: Callable[[str], str]) -> str:
    """text with each base64 run that encodes text holding a secret re-encoded from its redacted text."""
    if "=" not in text and not BASE64_RUN.search(text):
        return text

    def sub(match: re.Match[str]) -> str:
        run = match.group(0)
        decoded = _decode_run(run)
        if decoded is None:
            return run
        clean = redact(decoded)
        if clean == decoded:
            return run
        urlsafe = "-" in run or "_" in run
        encoder = base64.urlsafe_b64encode if urlsafe else base64.b64encode
        return encoder(clean.encode("utf-8")).decode("ascii")

    return BASE64_RUN.sub(sub, text)
