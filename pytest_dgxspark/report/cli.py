"""dgxspark-report: show a saved bundle, verify it against a trust anchor, re-render its summary, print its PDF."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_dgxspark.report.bundle import seal
from pytest_dgxspark.report.manifest import MANIFEST, SIGNATURE, ManifestError, check_manifest
from pytest_dgxspark.report.messages import LANGS
from pytest_dgxspark.report.pdf import PDF, PdfError, print_pdf
from pytest_dgxspark.report.results import write_atomic
from pytest_dgxspark.report.signing import key_problem
from pytest_dgxspark.report.summary import SummaryError, render_summary, write_summary

OK, FAILED, USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgxspark-report", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser(
        "verify", help="verify a bundle against a trust anchor: signatures, files, and every derived file against "
                       "results.json (exit 0 VERIFIED, 1 FAILED, 3 UNVERIFIED: no trust anchor)")
    verify.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>)")
    verify.add_argument("--allowed-signers", type=Path, metavar="FILE",
                        help='ssh allowed_signers file: <identity> namespaces="dgxspark-report" <key>')
    verify.add_argument("--identity", metavar="ID",
                        help="the signer's identity in FILE (default: whichever listed key made the signature)")
    verify.add_argument("--site", type=Path, metavar="DIR",
                        help="the site folder whose allowed_signers is the trust anchor (default: "
                             "sites/<the run's site>/allowed_signers under the current directory)")
    summary = commands.add_parser("summary", help="re-render summary.html from results.json")
    summary.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>)")
    summary.add_argument("--lang", choices=LANGS, help="ko, en or both (default: the run's own)")
    summary.add_argument("-o", "--output", type=Path, metavar="FILE",
                         help="write here instead of DIR/summary.html; required for another language once the bundle "
                              "is sealed (MANIFEST.sha256), which it never rewrites")
    pdf = commands.add_parser("pdf", help="print summary.html to summary.pdf with headless Chromium and re-seal the bundle")
    pdf.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>)")
    pdf.add_argument("--sign", type=Path, metavar="KEY",
                     help="re-sign the rewritten manifest with this SSH key (required when the bundle is signed)")
    pdf.add_argument("-o", "--output", type=Path, metavar="FILE",
                     help="print here instead of DIR/summary.pdf (leaves the bundle as it is)")
    _add_show(commands)
    return parser


def _add_show(commands: argparse._SubParsersAction) -> None:
    """`show DIR`: a saved bundle printed again (report/show.py)."""
    show = commands.add_parser("show", help="print a saved bundle: verdict, root causes, rule table and drift")
    show.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>, or reports/latest)")


def verify(directory: Path, allowed_signers: Path | None, identity: str | None, site: Path | None = None) -> int:
    """The verifier (verifier.py): 0 VERIFIED, 1 FAILED, 3 UNVERIFIED (no trust anchor)."""
    from pytest_dgxspark.report.verifier import verify as run_verify

    return run_verify(directory, allowed_signers, identity, site)


def summary(directory: Path, lang: str | None, output: Path | None) -> int:
    """Re-render the summary of a bundle; 0 when written.

    A sealed bundle (it has MANIFEST.sha256) keeps its summary.html: a rendering that differs from it goes to -o
    FILE only, since rewriting it in place would break the manifest, the attestation and summary.pdf.
    """
    try:
        if output is None and (directory / MANIFEST).is_file():
            return _summary_of_sealed(directory, lang)
        if output is None:
            target = write_summary(directory, lang)
        else:
            results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
            write_atomic(output, render_summary(results, lang or results.get("run", {}).get("lang") or "both", directory))
            target = output
    except (SummaryError, OSError, ValueError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return FAILED
    print(f"wrote {target}")
    return OK


def _summary_of_sealed(directory: Path, lang: str | None) -> int:
    results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    chosen = lang or results.get("run", {}).get("lang") or "both"
    current = directory / "summary.html"
    if current.is_file() and current.read_text(encoding="utf-8") == render_summary(results, chosen, directory):
        print(f"{current} is already this rendering (lang {chosen}); the bundle is unchanged")
        return OK
    print(f"FAILED: {directory} is a sealed bundle ({MANIFEST}): a summary.html in lang {chosen} would no longer "
          f"match its manifest and attestation (dgxspark-report verify would fail); give -o FILE to write it "
          "outside the bundle", file=sys.stderr)
    return USAGE


def pdf(directory: Path, key: Path | None, output: Path | None) -> int:
    """Print the bundle's summary to PDF; into the bundle only when it still matches its manifest, then re-seal it.

    Files are written as a run writes its bundle: 0640 (umask 027).
    """
    previous = os.umask(0o027)
    try:
        return _pdf(directory, key, output)
    finally:
        os.umask(previous)


def _pdf(directory: Path, key: Path | None, output: Path | None) -> int:
    source = directory / "summary.html"
    try:
        if output is not None:
            print(f"wrote {print_pdf(source, output)}")
            return OK
        check = check_manifest(directory)
    except (PdfError, ManifestError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return FAILED
    if not check.ok:
        print(f"FAILED: {directory} does not match its {MANIFEST} ({'; '.join(check.problems())}); "
              f"refusing to re-seal it (see dgxspark-report verify {directory})", file=sys.stderr)
        return FAILED
    if key is None and (directory / SIGNATURE).is_file():
        print(f"FAILED: {directory} is signed ({SIGNATURE}); give --sign KEY to re-sign the rewritten manifest, "
              "or -o FILE to print the PDF outside the bundle", file=sys.stderr)
        return FAILED
    problem = key_problem(key) if key is not None else None
    if problem:
        print(f"FAILED: {problem.replace('--dgxspark-sign', '--sign', 1)}", file=sys.stderr)
        return FAILED
    try:
        print_pdf(source, directory / PDF)
    except PdfError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return FAILED
    written: list[str] = [PDF]
    problems: list[str] = []
    seal(directory, key, written, problems)
    print(f"wrote {directory / PDF}; re-sealed: {', '.join(written[1:]) or 'nothing'}")
    for line in problems:
        print(f"FAILED: {line}", file=sys.stderr)
    return FAILED if problems else OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.dir.is_dir():
        print(f"dgxspark-report {args.command}: {args.dir} is not a directory", file=sys.stderr)
        return USAGE
    if args.command == "show":
        from pytest_dgxspark.report.show import show

        return show(args.dir)
    if args.command == "verify":
        return verify(args.dir, args.allowed_signers, args.identity, args.site)
    if args.command == "pdf":
        return pdf(args.dir, args.sign, args.output)
    return summary(args.dir, args.lang, args.output)


if __name__ == "__main__":
    sys.exit(main())
