"""dgxspark-report: verify a bundle's manifest and signature, or re-render its summary."""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_dgxspark.report.manifest import SIGNATURE, ManifestError, check_manifest
from pytest_dgxspark.report.messages import LANGS
from pytest_dgxspark.report.signing import SigningError, verify_signature
from pytest_dgxspark.report.summary import SummaryError, render_summary, write_summary

OK, FAILED, USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgxspark-report", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="check MANIFEST.sha256 (and the signature with --allowed-signers)")
    verify.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>)")
    verify.add_argument("--allowed-signers", type=Path, metavar="FILE",
                        help='ssh allowed_signers file: <identity> namespaces="dgxspark-report" <key>')
    verify.add_argument("--identity", metavar="ID",
                        help="the signer's identity in FILE (default: whichever listed key made the signature)")
    summary = commands.add_parser("summary", help="re-render summary.html from results.json")
    summary.add_argument("dir", type=Path, help="the bundle directory (reports/<run-id>)")
    summary.add_argument("--lang", choices=LANGS, help="ko, en or both (default: the run's own)")
    summary.add_argument("-o", "--output", type=Path, metavar="FILE",
                         help="write here instead of DIR/summary.html (keeps the manifest intact)")
    return parser


def verify(directory: Path, allowed_signers: Path | None, identity: str | None) -> int:
    """Print the outcome of checking the bundle; 0 when manifest (and signature, if asked) hold."""
    try:
        check = check_manifest(directory)
    except ManifestError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return FAILED
    status = OK
    if check.ok:
        print(f"manifest OK: {check.checked} files in {directory} match MANIFEST.sha256")
    else:
        status = FAILED
        print(f"manifest FAILED: {directory} does not match MANIFEST.sha256:", file=sys.stderr)
        for line in check.problems():
            print(f"  {line}", file=sys.stderr)
    if allowed_signers is None:
        if (directory / SIGNATURE).is_file():
            print(f"signature present, not checked (give --allowed-signers FILE to check {SIGNATURE})")
        return status
    try:
        signature = verify_signature(directory, allowed_signers, identity)
    except SigningError as exc:
        print(f"signature FAILED: {exc}", file=sys.stderr)
        return FAILED
    if signature.ok:
        print(f"signature OK: {SIGNATURE} by {signature.identity} ({signature.message})")
        return status
    print(f"signature FAILED: {signature.message}", file=sys.stderr)
    return FAILED


def summary(directory: Path, lang: str | None, output: Path | None) -> int:
    """Re-render the summary of a bundle; 0 when written."""
    try:
        if output is None:
            target = write_summary(directory, lang)
        else:
            results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
            output.write_text(render_summary(results, lang or results.get("run", {}).get("lang") or "both"),
                              encoding="utf-8")
            target = output
    except (SummaryError, OSError, ValueError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return FAILED
    print(f"wrote {target}")
    return OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.dir.is_dir():
        print(f"dgxspark-report {args.command}: {args.dir} is not a directory", file=sys.stderr)
        return USAGE
    if args.command == "verify":
        return verify(args.dir, args.allowed_signers, args.identity)
    return summary(args.dir, args.lang, args.output)


if __name__ == "__main__":
    sys.exit(main())
