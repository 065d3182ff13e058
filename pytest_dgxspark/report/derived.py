"""Every derived file of a bundle read back against results.json: summary.html, summary.pdf (its text), ctrf.json,
junit.xml and report.html must state the verdict, the counts and each rule's (or test's) status results.json gives."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pytest_dgxspark.judge.status import Status
from pytest_dgxspark.report import htmlagree, junitagree, matrix, messages
from pytest_dgxspark.report.ctrf import CTRF, check_ctrf, tool_version
from pytest_dgxspark.report.matrix import css_status
from pytest_dgxspark.report.pdf import PDF

SUMMARY = "summary.html"
VERDICTS = ("ACCEPTED", "REJECTED", "INCOMPLETE")
_ROW = re.compile(r'<tr class="rule-row" id="rule-(?P<id>[^"]+)" data-rule="(?P<rule>[^"]+)" '
                  r'data-status="(?P<status>[^"]*)">.*?<td class="st status s-(?P<css>[^"\s]*)">(?P<cell>.*?)</td>', re.S)
_CHIP = re.compile(r'<span class="status chip s-(?P<css>[^"\s]*)">(?P<label>.*?): (?P<n>\d+)</span>', re.S)


def _lang(results: dict[str, Any]) -> str:
    lang = (results.get("run") or {}).get("lang") or "both"
    return lang if lang in messages.LANGS else "both"


def summary_lang(text: str, results: dict[str, Any]) -> str:
    """The language summary.html was rendered in (ko, en or both): the one whose status label starts its first
    matrix row; the run's own language when no row tells."""
    first = _ROW.search(text)
    if first is not None:
        for lang in ("both", "ko", "en"):
            if first.group("cell").startswith(_label(first.group("status"), lang)):
                return lang
    return _lang(results)


def _label(status: str, lang: str) -> str:
    key = f"status.{status}"
    return str(messages.markup(key, lang)) if messages.has(key) else html.escape(status)


def summary_html(run_dir: Path, results: dict[str, Any]) -> list[str]:
    """summary.html's verdict, SIMULATED, run id, scope, counts, lowest layer, root causes and every rule row."""
    path = run_dir / SUMMARY
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return [f"{path}: cannot be read ({exc.strerror or exc})"]
    lang, run = summary_lang(text, results), results.get("run") or {}
    problems = []
    verdict = re.search(r'<span id="verdict-word">(\w+)', text)
    if verdict is None or verdict.group(1) != results.get("verdict"):
        problems.append(f"{path}: verdict {verdict.group(1) if verdict else 'missing'}, results.json says "
                        f"{results.get('verdict')}")
    shown_simulated = 'class="simulated-note"' in text
    if shown_simulated != bool(run.get("simulated")):
        problems.append(f"{path}: SIMULATED {'shown' if shown_simulated else 'not shown'}, "
                        f"results.json run.simulated is {bool(run.get('simulated'))}")
    title = re.search(r"<title>(.*?)</title>", text, re.S)
    if title is None or not html.unescape(title.group(1)).endswith(f" · {run.get('id')}"):
        problems.append(f"{path}: its title does not name run {run.get('id')}")
    rows = {m.group("rule"): m for m in _ROW.finditer(text)}
    rules = {str(r.get("id")): str(r.get("status")) for r in results.get("rules") or [] if isinstance(r, dict)}
    for rule, status in rules.items():
        row = rows.get(rule)
        if row is None:
            problems.append(f"{path}: no matrix row for {rule} (results.json: {status})")
        elif row.group("status") != status or row.group("css") != css_status(status) \
                or not row.group("cell").startswith(_label(status, lang)):
            problems.append(f"{path}: {rule} shown as {row.group('status')!r}, results.json says {status}")
    problems += [f"{path}: matrix row for {rule}, not a rule of results.json" for rule in rows if rule not in rules]
    run_section = text.split('<section id="run">', 1)[-1].split("</section>", 1)[0]
    chips = {m.group("css"): (m.group("label"), int(m.group("n"))) for m in _CHIP.finditer(run_section)}
    counts = {str(k): int(v) for k, v in (results.get("counts") or {}).items()}
    for status in sorted(set(counts) | set(chips)):
        shown = chips.get(css_status(status)) if status in counts else chips.get(status)
        if status not in counts or shown is None or shown[1] != counts[status] or shown[0] != _label(status, lang):
            problems.append(f"{path}: rules by status shows {status}: {shown[1] if shown else 'none'}, results.json "
                            f"counts {counts.get(status, 0)}")
    lowest = re.search(r'<span id="lowest-broken-layer">(.*?)</span></h2>', text, re.S)
    want = results.get("lowest_broken_layer")
    if lowest is None or (html.unescape(lowest.group(1)) != want if want else lowest.group(1) != str(messages.markup("none", lang))):
        problems.append(f"{path}: lowest broken layer {lowest.group(1) if lowest else 'missing'!r}, results.json says "
                        f"{want or 'none'}")
    causes = re.findall(r'<div class="cause" id="cause-([^"]+)"', text)
    if causes != [c["id"] for c in matrix.root_causes(results)][:3]:
        problems.append(f"{path}: root causes {causes}, results.json says {results.get('root_causes')}")
    if problems:
        return problems
    made_by = _made_by(run_dir)
    if made_by == tool_version():  # the same writer: summary.html is its rendering of results.json, byte for byte
        from pytest_dgxspark.report.summary import render_summary

        rendered = render_summary(results, lang, run_dir)
        if text != rendered:
            line = next((n for n, (a, b) in enumerate(zip(text.splitlines(), rendered.splitlines()), start=1) if a != b),
                        min(len(text.splitlines()), len(rendered.splitlines())) + 1)
            problems.append(f"{path}: not the rendering of its results.json by pytest-dgxspark {made_by} (lang {lang}): "
                            f"they differ from line {line}")
    else:  # another version rendered it otherwise; what its reader sees is still one page of these facts
        hidden = [tag for tag in ("<template", "<noscript", "<iframe", "<object", "<embed") if tag in text]
        twice = [mark for mark in ('id="verdict-word"', 'id="lowest-broken-layer"', '<section id="run"', "<title")
                 if text.count(mark) != 1]
        if hidden or twice or text.count('class="rule-row') != len(rows):
            problems.append(f"{path}: not one page of these facts (made by pytest-dgxspark {made_by}): "
                            f"{', '.join(hidden + [f'{m} {text.count(m)} times' for m in twice]) or 'more rule rows'}")
    return problems


def _made_by(run_dir: Path) -> str | None:
    """The version of pytest-dgxspark that wrote the bundle, as its ctrf.json names it (None when it does not)."""
    try:
        doc = json.loads((run_dir / CTRF).read_text(encoding="utf-8"))
        return str(doc["results"]["tool"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pdf_text(path: Path, first: int | None = None, last: int | None = None) -> str:
    """The text of a PDF (pdftotext -raw: content order, a table row on one line); OSError when poppler-utils is missing, ValueError when it fails."""
    tool = shutil.which("pdftotext")
    if tool is None:
        raise OSError("pdftotext (poppler-utils) is not installed")
    pages = [*(["-f", str(first)] if first else []), *(["-l", str(last)] if last else [])]
    done = subprocess.run([tool, "-raw", *pages, str(path), "-"], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise ValueError(f"pdftotext exited {done.returncode}: {done.stderr.strip()[-200:]}")
    return done.stdout


def summary_pdf(run_dir: Path, results: dict[str, Any]) -> list[str]:
    """summary.pdf's text: page 1's verdict and run id, SIMULATED, and each rule's matrix line with its status."""
    path = run_dir / PDF
    if not path.is_file():
        return []
    if path.read_bytes()[:5] != b"%PDF-":
        return [f"{path}: not a PDF"]
    try:
        first, text = pdf_text(path, 1, 1), pdf_text(path)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return [f"{path}: its text cannot be read to check it against results.json ({exc})"]
    run = results.get("run") or {}
    try:
        lang = summary_lang((run_dir / SUMMARY).read_text(encoding="utf-8"), results)
    except OSError:
        lang = _lang(results)
    problems = []
    said = re.search(r"(ACCEPTED|REJECTED|INCOMPLETE)", first)
    if said is None or said.group(1) != results.get("verdict"):
        problems.append(f"{path}: page 1 says {said.group(1) if said else 'no verdict'}, results.json says "
                        f"{results.get('verdict')}")
    from pytest_dgxspark.report.pdf import absolute_links

    absolute = absolute_links(path)
    if absolute:
        problems.append(f"{path}: {len(absolute)} link(s) are absolute file:// paths, not relative to the bundle "
                        f"(first: {absolute[0]})")
    if str(run.get("id")) not in first:
        problems.append(f"{path}: page 1 does not name run {run.get('id')}")
    if ("SIMULATED" in text) != bool(run.get("simulated")):
        problems.append(f"{path}: SIMULATED {'printed' if 'SIMULATED' in text else 'not printed'}, results.json "
                        f"run.simulated is {bool(run.get('simulated'))}")
    words = {s: messages.text(f"status.{s}", lang).split(" / ")[0] for s in
             (Status.PASSED, Status.FAILED, Status.BLOCKED, Status.ERROR, Status.NOT_APPLICABLE, Status.WAIVED,
              Status.UNTESTED, Status.RECORDED, Status.NOT_SELECTED)}
    for rule in results.get("rules") or []:
        rid, status = str(rule.get("id")), str(rule.get("status"))
        line = re.compile(rf"^\s*{re.escape(rid)}\s+(?:ADR-\d+\s*§\S+|beyond\s*ADRs)\s+(?P<rest>.*)$", re.M)
        found = [m.group("rest") for m in line.finditer(text)]
        want = words.get(status, status)
        if len(found) != 1 or not found[0].replace(" ", "").startswith(want.replace(" ", "")):
            problems.append(f"{path}: the matrix line of {rid} reads {found!r}, results.json says {status} ({want})")
    return problems


def all_problems(run_dir: Path, results: dict[str, Any]) -> dict[str, list[str]]:
    """Each derived file -> its disagreements with results.json (files the bundle lacks: their absence, where required)."""
    found: dict[str, list[str]] = {SUMMARY: summary_html(run_dir, results), PDF: summary_pdf(run_dir, results),
                                   CTRF: check_ctrf(run_dir)}
    for name, module in ((junitagree.JUNIT, junitagree), (htmlagree.REPORT, htmlagree)):
        found[name] = module.disagreements(run_dir) if (run_dir / name).is_file() else []
    return found


def load_results(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
