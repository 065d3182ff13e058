"""Waivers and manual checks of a site (sites/<site>/waivers.yml, manual-checks.yml)."""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from pytest_dgxspark.data.yamlload import load_yaml
from pytest_dgxspark.site.model import SiteError, _schema_problems
from pytest_dgxspark.site.schemas import MANUAL_CHECKS_SCHEMA, WAIVERS_SCHEMA


@dataclass(frozen=True)
class Waiver:
    rule: str
    reason: str
    approver: str
    role: str
    ticket: str
    expires: date

    def expired(self, today: date) -> bool:
        return today > self.expires


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


def load_waivers(path: Path, rule_ids: Collection[str]) -> dict[str, Waiver]:
    """Waivers by rule id ({} when the file is absent); unknown rule ids and duplicates are errors."""
    if not path.is_file():
        return {}
    data = _load(path, WAIVERS_SCHEMA)
    waivers: dict[str, Waiver] = {}
    problems = []
    for index, entry in enumerate(data["waivers"]):
        where = f"{path}: waivers.{index}.rule"
        blank = [k for k in ("reason", "approver", "role", "ticket") if not entry[k].strip()]
        if blank:
            problems.extend(f"{path}: waivers.{index}.{k}: blank; expected who/what, in words" for k in blank)
            continue
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
                ticket=entry["ticket"], expires=expires,
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
