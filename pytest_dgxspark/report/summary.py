"""summary.html: the static, printable, bilingual handover document rendered from results.json."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2
from markupsafe import Markup

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report import facts, knowncauses, matrix, messages
from pytest_dgxspark.report.matrix import LAYERS
from pytest_dgxspark.report.results import write_atomic

SEOUL = ZoneInfo("Asia/Seoul")
_TEMPLATES = Path(__file__).parent / "templates"


class SummaryError(Exception):
    """results.json lacks what the summary needs."""


def _times(value: Any) -> dict[str, str] | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return {"utc": str(value), "seoul": ""}
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return {
        "utc": moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "seoul": moment.astimezone(SEOUL).strftime("%Y-%m-%d %H:%M:%S KST (Asia/Seoul)"),
    }


def _scalar(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _provenance_rows(values: dict[str, Any], lang: str) -> list[dict[str, str]]:
    return [{"key": k, "label": _label(k, lang), "value": _scalar(v)} for k, v in facts.ordered_items(values)]


def _label(key: str, lang: str) -> str:
    return messages.text(f"prov.{key}", lang) if messages.has(f"prov.{key}") else key


def _layer_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    given = {layer.get("name"): layer for layer in results.get("layers") or [] if isinstance(layer, dict)}
    names = [n for n in LAYERS if n in given] + [n for n in given if n not in LAYERS]
    if not names:
        names = [n for n in LAYERS if any(r.get("layer") == n for r in results["rules"])]
    lowest = results.get("lowest_broken_layer")
    rows = []
    for step, name in enumerate(names):
        layer = given.get(name, {})
        rules = [r for r in results["rules"] if r.get("layer") == name]
        status = layer.get("status") or (Status.UNTESTED if not rules else "—")
        rows.append({
            "step": step, "name": name, "status": str(status), "css": matrix.css_status(status),
            "lowest": name == lowest, "total": len(rules),
            "passed": sum(1 for r in rules if r.get("status") == Status.PASSED),
            "others": [{"id": r.get("id"), "status": str(r.get("status")), "css": matrix.css_status(r.get("status"))}
                       for r in rules if r.get("status") != Status.PASSED],
        })
    return rows


def _not_passed(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rules that did not pass, grouped by status in matrix order (failed and error first), bottom-up."""
    groups: dict[str, list[str]] = {}
    for rule in matrix.ordered_rules([r for r in rules if r.get("status") != Status.PASSED]):
        groups.setdefault(str(rule.get("status")), []).append(str(rule.get("id")))
    return [{"status": status, "css": matrix.css_status(status), "ids": ids} for status, ids in groups.items()]


# Facts the identity block shows (machine, firmware, node uid), kept out of the node table.
_IDENTITY_KEYS = frozenset({"sys_vendor", "product_name", "product_serial", "bios_version", "bios_date", "uid"})
HARDENING_RULE = "ADR-0001.hardening-baseline"
HARDENING_LABEL = "hardening baseline"
# The hardening options page 1 names for each node (in this order), as the recorded rule's evidence has them.
HARDENING_KEYS = ("profile", "secrets-encryption", "audit-policy-file", "pod-security-admission-config-file",
                  "protect-kernel-defaults", "selinux")


def _hardening(results: dict[str, Any], run_dir: Path | None) -> list[dict[str, Any]]:
    """Per test of the recorded hardening rule: its node and the hardening values its evidence recorded (None: not
    set), read from the bundle's evidence file; [] without a bundle directory or evidence."""
    rule = next((r for r in results.get("rules") or [] if isinstance(r, dict) and r.get("id") == HARDENING_RULE), None)
    if rule is None or run_dir is None:
        return []
    found = []
    for test in rule.get("tests") or []:
        href = matrix.evidence_href(test.get("evidence"))
        try:
            doc = json.loads((run_dir / href).read_text(encoding="utf-8")) if href else {}
        except (OSError, ValueError):
            continue
        values = next((i.get("value") for i in doc.get("items") or [] if isinstance(i, dict)
                       and i.get("label") == HARDENING_LABEL and isinstance(i.get("value"), dict)), None)
        if values is None:
            continue
        node = str(test.get("nodeid", "")).rpartition("[")[2].rstrip("]") or "—"
        found.append({"node": node, "href": href,
                      "values": [{"key": k, "value": values.get(k)} for k in HARDENING_KEYS if k in values]})
    return found


def _identity(results: dict[str, Any], scopes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The identity block: each machine (product, serial, firmware, OS, kernel) and the suite, catalog and site."""
    provenance = results.get("provenance") or {}
    hosts = provenance.get("hosts") if isinstance(provenance.get("hosts"), dict) else {}
    machines = []
    for name in sorted(hosts) or sorted(n for n in scopes if n != facts.CLUSTER):
        host = {**scopes.get(name, {}), **(hosts.get(name) or {})}
        product = " ".join(str(host[k]) for k in ("sys_vendor", "product_name") if host.get(k)) or None
        firmware = " ".join(str(host[k]) for k in ("bios_version", "bios_date") if host.get(k)) or None
        os_text = " · ".join(str(host[k]) for k in ("os", "dgx_os") if host.get(k)) or host.get("os_image")
        machines.append({"name": name, "product": product, "serial": host.get("product_serial"),
                         "firmware": firmware, "os": os_text, "kernel": host.get("kernel")})
    ident = results.get("identity") if isinstance(results.get("identity"), dict) else {}
    return {"machines": machines, "suite_version": ident.get("suite_version"), "suite_commit": ident.get("suite_commit"),
            "catalog": ident.get("catalog_sha256"), "site_commit": ident.get("site_commit")}


def _incomplete_why(results: dict[str, Any]) -> dict[str, Any] | None:
    """Why an INCOMPLETE run names no lowest broken layer: the rules that could not be judged, by status."""
    if results.get("verdict") != "INCOMPLETE" or results.get("lowest_broken_layer"):
        return None
    groups: dict[str, list[str]] = {}
    for rule in results.get("rules") or []:
        if isinstance(rule, dict) and rule.get("status") in (Status.ERROR, Status.BLOCKED, Status.UNTESTED):
            groups.setdefault(str(rule["status"]), []).append(str(rule.get("id")))
    return {"groups": groups, "simulated_handover": bool((results.get("run") or {}).get("simulated")
                                                           and (results.get("run") or {}).get("handover"))}


# Spellings of one fact by the host and by the API: the second column is dropped when it says the same.
_SYNONYMS = (("os", "os_image"), ("driver", "nvidia_driver"), ("cuda", "cuda_version"))


def _node_table(scopes: dict[str, dict[str, Any]], lang: str) -> dict[str, Any]:
    """Per-node provenance as one table: a row per node, a column per fact that differs between nodes.

    With two nodes or more, a fact every node reports with the same value is shown once above the table
    (`common`), so what differs between nodes stands out.
    """
    nodes = {name: {k: v for k, v in values.items() if k not in _IDENTITY_KEYS}
             for name, values in sorted(scopes.items()) if name != facts.CLUSTER}
    keys = [k for k, _ in facts.ordered_items({k: 1 for values in nodes.values() for k in values})]
    for first, second in _SYNONYMS:
        if first in keys and second in keys and all(v.get(first) == v.get(second) for v in nodes.values()):
            keys.remove(second)
    # A fact the host and the API spell differently and report differently on some node is never "the same on every
    # node": both columns stay, and the nodes where they disagree are named.
    conflicts = [{"first": _label(first, lang), "second": _label(second, lang),
                  "nodes": [n for n, v in nodes.items() if v.get(first) is not None and v.get(second) is not None
                            and _scalar(v.get(first)) != _scalar(v.get(second))]}
                 for first, second in _SYNONYMS if first in keys and second in keys]
    conflicts = [c for c in conflicts if c["nodes"]]
    split = {k for first, second in _SYNONYMS for k in (first, second)
             if any(c["first"] == _label(first, lang) for c in conflicts)}
    common = [k for k in keys if len(nodes) > 1 and k not in split
              and len({_scalar(v.get(k)) for v in nodes.values()}) == 1]
    columns = [k for k in keys if k not in common]
    first = next(iter(nodes.values()), {})
    return {
        "common": [{"key": k, "label": _label(k, lang), "value": _scalar(first.get(k))} for k in common],
        "conflicts": conflicts,
        "columns": [{"key": k, "label": _label(k, lang)} for k in columns],
        "rows": [{"name": name, "cells": [_scalar(values.get(k)) for k in columns]} for name, values in nodes.items()],
    }


def _scope(results: dict[str, Any]) -> dict[str, Any] | None:
    """The run's scope (results.json `scope`: a string or an object), None for a whole run.

    An object names itself by `label`, `name` or `description` (`full: true` is a whole run) and may list
    `unverified_prerequisites`: rules the selected ones depend on that this run did not judge.
    """
    scope = results.get("scope")
    if scope is None or scope == "" or scope == {}:
        return None
    if not isinstance(scope, dict):
        return {"label": _scalar(scope), "unverified": []}
    if scope.get("full") is True or scope.get("name") == "full":
        return None
    label = next((str(scope[k]) for k in ("label", "name", "description") if scope.get(k)), None)
    if label is None:
        label = "; ".join(f"{k}: {_scalar(v)}" for k, v in sorted(scope.items()) if v not in (None, "", []))
    unverified = scope.get("unverified_prerequisites") or []
    return {"label": label, "unverified": [str(r) for r in unverified] if isinstance(unverified, list) else []}


def _leftovers(results: dict[str, Any]) -> dict[str, Any] | None:
    """Namespaces earlier runs left on the cluster (results.json `leftover_namespaces`), None when not reported."""
    items = results.get("leftover_namespaces")
    if items is None:
        return None
    items = items if isinstance(items, list) else [items]
    keys: list[str] = []
    for item in items:
        for key in item if isinstance(item, dict) else ("name",):
            if key not in keys:
                keys.append(key)
    return {"columns": keys,
            "rows": [[_scalar(item.get(k)) if isinstance(item, dict) else _scalar(item) for k in keys]
                     for item in items]}


def _forecast(results: dict[str, Any]) -> dict[str, Any]:
    """Page 1's forecast box: results.json forecast[] (advised first), whether the site enforces it, what was checked."""
    entries = sorted(results.get("forecast") or [], key=lambda e: e.get("status") != "advised")
    checked = results.get("forecast_checked") or {}
    return {"entries": entries, "enforced": results.get("forecast_mode") == "enforce",
            "checked": ", ".join(f"{rid}: {outcome}" for rid, outcome in sorted(checked.items())) or "-"}


def view(results: dict[str, Any], lang: str, run_dir: Path | None = None) -> dict[str, Any]:
    """The values the template shows, derived from results.json (and, with run_dir, the recorded hardening evidence)."""
    if lang not in messages.LANGS:
        raise SummaryError(f"language must be one of {', '.join(messages.LANGS)}, got {lang!r}")
    missing = [key for key in ("run", "verdict", "rules") if key not in results]
    if missing:
        raise SummaryError(f"results.json lacks {', '.join(missing)}; the summary needs run, verdict and rules")
    run = results["run"] or {}
    by_id = {r.get("id"): r for r in results["rules"] if isinstance(r, dict)}
    scopes = facts.scopes(results.get("provenance"))
    cluster = scopes[facts.CLUSTER]
    node_table = _node_table(scopes, lang)
    return {
        "lang": lang,
        "html_lang": "en" if lang == "en" else "ko",
        "run": run,
        "verdict": str(results["verdict"]),
        "verdict_reasons": results.get("verdict_reasons") or [],
        "scope": _scope(results),
        "started": _times(run.get("started")),
        "finished": _times(run.get("finished")),
        "counts": results.get("counts") or {},
        "root_causes": [knowncauses.annotate(cause, by_id.get(cause["id"], {})) for cause in matrix.root_causes(results)],
        "not_judged": [{**item, "observed_text": knowncauses.excerpt(item.get("observed") or "", "")}
                       for item in matrix.not_judged(results)],
        "incomplete_why": _incomplete_why(results),
        "hardening": _hardening(results, run_dir),
        "identity": _identity(results, scopes),
        "lowest": results.get("lowest_broken_layer"),
        "layers": _layer_rows(results),
        "not_passed": _not_passed(results["rules"]),
        "matrix": matrix.rows(results["rules"]),
        "cluster_rows": _provenance_rows(cluster, lang),
        "cluster_name": run.get("context") or cluster.get("server") or run.get("site"),
        "node_names": [row["name"] for row in node_table["rows"]] or list(run.get("hosts") or []),
        "node_table": node_table,
        "waivers": results.get("waivers") or [],
        "manual_checks": results.get("manual_checks") or [],
        "leftovers": _leftovers(results),
        "drift": results.get("drift"),
        "forecast": _forecast(results),
    }


def css_string(value: Any) -> Markup:
    """value as a quoted CSS string for the page's margin boxes: every character outside a safe set is a CSS
    hex escape, so no value can end the string, the rule or the <style> element."""
    out = []
    for char in str(value):
        if char.isalnum() and char.isascii() or char in " .,:-_/()·—":
            out.append(char)
        elif char.isprintable() and not char.isascii() and char not in "\u2028\u2029":
            out.append(char)
        else:
            out.append(f"\\{ord(char):x} ")
    return Markup(f'"{"".join(out)}"')


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env


def render_summary(results: dict[str, Any], lang: str = "both", run_dir: Path | None = None) -> str:
    """summary.html for results in lang (ko, en or both); deterministic for the same input (results and, with run_dir,
    the bundle's hardening evidence)."""
    context = view(results, lang, run_dir)
    env = _environment()
    env.globals["t"] = lambda key: messages.markup(key, lang)
    env.globals["tx"] = lambda key: messages.text(key, lang)
    env.globals["st"] = lambda status: (messages.markup(f"status.{status}", lang)
                                        if messages.has(f"status.{status}") else str(status))
    env.globals["css"] = matrix.css_status
    env.globals["has"] = messages.has
    env.globals["css_string"] = css_string
    env.globals["scalar"] = _scalar
    env.globals["ko"] = lambda key: messages.MESSAGES[key][0]
    return env.get_template("summary.html.j2").render(**context)


def write_summary(run_dir: Path, lang: str | None = None) -> Path:
    """(Re)write run_dir/summary.html from run_dir/results.json; lang defaults to the run's own; atomically (no partial file)."""
    source = run_dir / "results.json"
    try:
        results = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SummaryError(f"{source}: no results.json in this directory") from exc
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{source}: not JSON (line {exc.lineno}: {exc.msg})") from exc
    chosen = lang or (results.get("run") or {}).get("lang") or "both"
    target = run_dir / "summary.html"
    write_atomic(target, render_summary(results, chosen, run_dir))
    return target
