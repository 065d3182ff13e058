"""summary.html: the static, printable, bilingual handover document rendered from results.json."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import jinja2

from pytest_dgxspark.report import facts, messages

LAYERS = ("site", "host", "rke2", "runtime", "network", "gpu-operator", "device-plugin", "allocatable",
          "workload", "gitops")
SEOUL = ZoneInfo("Asia/Seoul")
_EVIDENCE = re.compile(r"^evidence/[A-Za-z0-9][A-Za-z0-9._\-]*\.json$")
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
    return [
        {"key": k, "label": messages.text(f"prov.{k}", lang) if messages.has(f"prov.{k}") else k,
         "value": _scalar(v)}
        for k, v in facts.ordered_items(values)
    ]


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
        status = layer.get("status") or ("untested" if not rules else None)
        causes = [r for r in rules if r.get("id") in (results.get("root_causes") or [])]
        if name == lowest and not causes:
            causes = [r for r in rules if r.get("status") in ("failed", "error")]
        rows.append({"step": step, "name": name, "status": status or "—", "lowest": name == lowest,
                     "rules": rules, "causes": causes if name == lowest else []})
    return rows


def _matrix(results: dict[str, Any]) -> list[dict[str, Any]]:
    order = {name: index for index, name in enumerate(LAYERS)}
    rules = sorted(results["rules"], key=lambda r: order.get(r.get("layer"), len(LAYERS)))
    rows = []
    for rule in rules:
        tests = []
        for test in rule.get("tests") or []:
            evidence = test.get("evidence")
            tests.append({**test, "evidence_href": evidence if evidence and _EVIDENCE.match(str(evidence)) else None})
        rows.append({**rule, "tests": tests})
    return rows


def _nodes(scopes: dict[str, dict[str, Any]], lang: str) -> list[dict[str, Any]]:
    return [{"name": name, "rows": _provenance_rows(values, lang)}
            for name, values in sorted(scopes.items()) if name != facts.CLUSTER]


def view(results: dict[str, Any], lang: str) -> dict[str, Any]:
    """The values the template shows, derived from results.json (no I/O)."""
    if lang not in messages.LANGS:
        raise SummaryError(f"language must be one of {', '.join(messages.LANGS)}, got {lang!r}")
    missing = [key for key in ("run", "verdict", "rules") if key not in results]
    if missing:
        raise SummaryError(f"results.json lacks {', '.join(missing)}; the summary needs run, verdict and rules")
    run = results["run"] or {}
    scopes = facts.scopes(results.get("provenance"))
    cluster = scopes[facts.CLUSTER]
    return {
        "lang": lang,
        "html_lang": "en" if lang == "en" else "ko",
        "run": run,
        "verdict": str(results["verdict"]),
        "verdict_reasons": results.get("verdict_reasons") or [],
        "started": _times(run.get("started")),
        "finished": _times(run.get("finished")),
        "counts": results.get("counts") or {},
        "root_causes": results.get("root_causes") or [],
        "lowest": results.get("lowest_broken_layer"),
        "layers": _layer_rows(results),
        "matrix": _matrix(results),
        "cluster_rows": _provenance_rows(cluster, lang),
        "cluster_name": run.get("context") or cluster.get("server") or run.get("site"),
        "nodes": _nodes(scopes, lang),
        "waivers": results.get("waivers") or [],
        "manual_checks": results.get("manual_checks") or [],
        "drift": results.get("drift"),
    }


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


def render_summary(results: dict[str, Any], lang: str = "both") -> str:
    """summary.html for results in lang (ko, en or both); deterministic for the same input."""
    context = view(results, lang)
    env = _environment()
    env.globals["t"] = lambda key: messages.markup(key, lang)
    env.globals["tx"] = lambda key: messages.text(key, lang)
    env.globals["st"] = lambda status: (messages.markup(f"status.{status}", lang)
                                        if messages.has(f"status.{status}") else str(status))
    env.globals["scalar"] = _scalar
    env.globals["ko"] = lambda key: messages.MESSAGES[key][0]
    return env.get_template("summary.html.j2").render(**context)


def write_summary(run_dir: Path, lang: str | None = None) -> Path:
    """(Re)write run_dir/summary.html from run_dir/results.json; lang defaults to the run's own."""
    source = run_dir / "results.json"
    try:
        results = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SummaryError(f"{source}: no results.json in this directory") from exc
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{source}: not JSON (line {exc.lineno}: {exc.msg})") from exc
    chosen = lang or (results.get("run") or {}).get("lang") or "both"
    target = run_dir / "summary.html"
    target.write_text(render_summary(results, chosen), encoding="utf-8")
    return target
