"""Waivers, their approvers and manual checks of a site (sites/<site>/waivers.yml, approvers.yml, manual-checks.yml;
docs/governance.md has the format of each, with examples)."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_yaml
from pytest_dgxspark.site.model import SiteError, _schema_problems
from pytest_dgxspark.site.schemas import APPROVERS_SCHEMA, MANUAL_CHECKS_SCHEMA, WAIVERS_SCHEMA

# The files a waiver's site_digest covers: what the site is (hosts, cluster settings, the GPU Operator chart).
SITE_DIGEST_FILES = ("inventory.yml", "rke2/vars.yml", "rke2/gpu-operator.helmchart.yaml")
_SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|"
                      r"sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{32,}={0,3}( .*)?$")


def site_digest(root: Path) -> str:
    """sha256 over the site files a waiver is granted against (name and content of each, in a fixed order)."""
    digest = hashlib.sha256()
    for name in SITE_DIGEST_FILES:
        path = Path(root) / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(absent)") + b"\0")
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class Approver:
    """Someone the site lists as allowed to grant waivers, with the SSH public key that identifies them."""

    name: str
    role: str
    key: str


@dataclass(frozen=True)
class Waiver:
    rule: str
    reason: str
    approver: str
    role: str
    ticket: str
    expires: date
    site_digest: str = ""  # the site (site_digest()) the waiver was granted against

    def expired(self, today: date) -> bool:
        return today > self.expires

    def state(self, status: str, today: date, digest: str | None) -> str:
        """applied (the rule failed and this waiver accepts it), expired, stale (granted against another site
        digest) or unused (the rule did not fail: nothing to waive)."""
        if status not in ("failed", "waived"):
            return "unused"
        if self.expired(today):
            return "expired"
        if digest is not None and self.site_digest != digest:
            return "stale"
        return "applied"


@dataclass(frozen=True)
class ManualCheck:
    id: str
    title_en: str
    title_ko: str
    attester: str | None
    date: str | None
    note: str | None

    @property
    def attested(self) -> bool:
        return bool(self.attester and self.date)


def _dates_as_text(data: Any) -> Any:
    """YAML reads 2027-01-31 as a date; the schemas expect ISO text."""
    if isinstance(data, dict):
        return {k: _dates_as_text(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_dates_as_text(v) for v in data]
    return data.isoformat() if isinstance(data, date) else data


def _load(path: Path, schema: dict) -> Any:
    try:
        data = _dates_as_text(load_yaml(path))
    except ValueError as exc:
        raise SiteError(str(exc)) from None
    problems = _schema_problems(data, schema, path)
    if problems:
        raise SiteError("\n".join(problems))
    return data


def load_approvers(path: Path) -> dict[str, Approver]:
    """Approvers by name ({} when the file is absent); names unique, each key an SSH public key."""
    if not path.is_file():
        return {}
    data = _load(path, APPROVERS_SCHEMA)
    found: dict[str, Approver] = {}
    problems = []
    for index, entry in enumerate(data["approvers"]):
        where = f"{path}: approvers.{index} ({entry['name']})"
        if not entry["name"].strip():
            problems.append(f"{path}: approvers.{index}.name: blank; expected the approver's name")
        elif entry["name"] in found:
            problems.append(f"{where}.name: listed twice")
        if not _SSH_KEY.match(entry["key"].strip()):
            problems.append(f"{where}.key: not an SSH public key; expected '<type> <base64> [comment]' "
                            "(e.g. the approver's ~/.ssh/id_ed25519.pub)")
        found[entry["name"]] = Approver(entry["name"], entry["role"], entry["key"].strip())
    if problems:
        raise SiteError("\n".join(problems))
    return found


def load_waivers(path: Path, rule_ids: Collection[str], approvers: Mapping[str, Approver] | None = None,
                 approvers_path: Path | None = None) -> dict[str, Waiver]:
    """Waivers by rule id ({} when the file is absent); unknown rule ids, duplicates and approvers the site does not
    list (`approvers`, read from `approvers_path`) are errors naming the file, the entry and the key."""
    if not path.is_file():
        return {}
    data = _load(path, WAIVERS_SCHEMA)
    waivers: dict[str, Waiver] = {}
    problems = []
    listed = approvers or {}
    approvers_file = approvers_path or path.with_name("approvers.yml")
    for index, entry in enumerate(data["waivers"]):
        where = f"{path}: waivers.{index}.rule"
        blank = [k for k in ("reason", "approver", "role", "ticket") if not entry[k].strip()]
        if blank:
            problems.extend(f"{path}: waivers.{index}.{k}: blank; expected who/what, in words" for k in blank)
            continue
        if entry["approver"] not in listed:
            problems.append(f"{path}: waivers.{index} ({entry['rule']}).approver: {entry['approver']!r} is not listed "
                            f"in {approvers_file} (listed: {', '.join(sorted(listed)) or 'nobody; the file is missing'}"
                            "); a waiver names an approver the site lists, with their key (docs/governance.md)")
        if entry["rule"] not in rule_ids:
            problems.append(f"{where}: {entry['rule']!r} is not a rule id of the catalog (see pytest --dgxspark-rules)")
        elif entry["rule"] in waivers:
            problems.append(f"{where}: {entry['rule']} is waived twice")
        else:
            try:
                expires = date.fromisoformat(entry["expires"])
            except ValueError:
                problems.append(f"{path}: waivers.{index}.expires: {entry['expires']!r} is not a date (YYYY-MM-DD)")
                continue
            waivers[entry["rule"]] = Waiver(
                rule=entry["rule"], reason=entry["reason"], approver=entry["approver"], role=entry["role"],
                ticket=entry["ticket"], expires=expires, site_digest=entry["site_digest"],
            )
    if problems:
        raise SiteError("\n".join(problems))
    return waivers


def load_manual_checks(path: Path, today: date | None = None) -> list[ManualCheck]:
    """Manual checks ([] when the file is absent); ids unique, attestations by someone, on a real past date."""
    if not path.is_file():
        return []
    today = today or date.today()
    data = _load(path, MANUAL_CHECKS_SCHEMA)
    checks = [ManualCheck(c["id"], c["title_en"], c["title_ko"], c.get("attester"), c.get("date"), c.get("note"))
              for c in data["checks"]]
    seen: set[str] = set()
    problems = []
    for index, check in enumerate(checks):
        if check.id in seen:
            problems.append(f"{path}: checks.{index}.id: {check.id} appears twice")
        seen.add(check.id)
        if check.attester is not None and not check.attester.strip():
            problems.append(f"{path}: checks.{index}.attester: blank; expected the name of who attested it")
        if check.date is None:
            continue
        try:
            when = date.fromisoformat(check.date)
        except ValueError:
            problems.append(f"{path}: checks.{index}.date: {check.date!r} is not a date (YYYY-MM-DD)")
            continue
        if when > today:
            problems.append(f"{path}: checks.{index}.date: {check.date} is in the future (today is {today.isoformat()}); "
                            "an attestation is dated when it was made")
    if problems:
        raise SiteError("\n".join(problems))
    return checks
