"""Rule, layer, severity and evidence in pytest-html's report.html and the rule property in junit.xml."""
from __future__ import annotations

import json
from html import escape
from typing import Any

import pytest

from pytest_dgxspark.report.summary import LAYERS

_COLUMNS = (("rule", "Rule"), ("layer", "Layer"), ("severity", "Severity"))


def rule_of(item: pytest.Item) -> str | None:
    """The rule id of a test item (its closest `rule` marker, else the `forecast` marker of a forecast check), or
    None: the core's lookups."""
    from pytest_dgxspark.catalog.rules import rule_of as core_rule_of
    from pytest_dgxspark.judge.forecast import forecast_of

    return core_rule_of(item) or forecast_of(item)


def add_rule_property(item: pytest.Item) -> None:
    """Give the item a `rule` user property, which junit.xml writes as <property name="rule">."""
    rule = rule_of(item)
    if rule is not None and ("rule", rule) not in item.user_properties:
        item.user_properties.append(("rule", rule))


def _catalog(config: pytest.Config) -> dict[str, Any]:
    """The run's one catalog (the core's), as id -> Rule."""
    try:
        from pytest_dgxspark.catalog.rules import run_catalog

        catalog = run_catalog(config)
        return {**catalog.forecast, **catalog.rules}
    except Exception:  # noqa: BLE001 - the catalog's own errors are reported by the core
        return {}


def layer_sort_key(layer: str) -> str:
    """The layer as shown in report.html: its bottom-up position first, so sorting by text sorts by layer."""
    return f"{LAYERS.index(layer)} {layer}" if layer in LAYERS else layer


def _evidence_of(item: pytest.Item) -> list[dict[str, Any]]:
    try:
        from pytest_dgxspark.judge.evidence import evidence_key
    except ImportError:
        return []
    return list(item.stash.get(evidence_key, None) or [])


def evidence_extras(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """pytest-html extras for a test's evidence: an inline, escaped listing and a JSON attachment."""
    if not entries:
        return []
    from pytest_html import extras

    text = json.dumps(entries, indent=2, ensure_ascii=False, default=str)
    listing = "".join(
        f"<dt><b>{escape(str(e.get('label', '')))}</b></dt><dd><pre>"
        f"{escape(json.dumps(e.get('value'), indent=2, ensure_ascii=False, default=str))}</pre></dd>"
        for e in entries
    )
    return [
        extras.html(f'<div class="dgxspark-evidence"><p><b>Evidence</b> ({len(entries)})</p><dl>{listing}</dl></div>'),
        extras.json(text, name="evidence.json"),
    ]


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Put rule, layer and severity on the report, and the evidence into its pytest-html extras."""
    rule = rule_of(item)
    entry = _catalog(item.config).get(rule) if rule else None
    report.dgxspark_rule = rule or ""  # type: ignore[attr-defined]
    report.dgxspark_layer = getattr(entry, "layer", "")  # type: ignore[attr-defined]
    report.dgxspark_severity = getattr(entry, "severity", "")  # type: ignore[attr-defined]
    if not item.config.pluginmanager.has_plugin("html"):
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        report.extras = list(getattr(report, "extras", [])) + evidence_extras(_evidence_of(item))


def add_header_cells(cells: list[str]) -> None:
    """Rule, Layer and Severity headers, sortable, after the Test column."""
    for offset, (column, title) in enumerate(_COLUMNS):
        cells.insert(2 + offset, f'<th class="sortable" data-column-type="{column}">{title}</th>')


def add_row_cells(report: Any, cells: list[str]) -> None:
    """The row's rule, layer and severity cells, matching add_header_cells."""
    values = (
        getattr(report, "dgxspark_rule", ""),
        layer_sort_key(getattr(report, "dgxspark_layer", "")),
        getattr(report, "dgxspark_severity", ""),
    )
    for offset, ((column, _), value) in enumerate(zip(_COLUMNS, values)):
        cells.insert(2 + offset, f'<td class="col-{column}">{escape(value)}</td>')
