"""dgxspark-report verify: a verifier, not a checksum. It needs a trust anchor (an allowed_signers file), checks the
manifest's and the attestation's signatures against it, the manifest against the files, and every derived file's
facts against results.json; it prints what the bundle says (verdict, scope, SIMULATED, run id, signer, signing time).

Exit: 0 VERIFIED; 1 FAILED (a file, a signature or a derived fact does not hold); 3 UNVERIFIED (nothing failed, but
no trust anchor was given or found, so nothing says who made the bundle).
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_dgxspark.judge.status import BROKEN, Status
from pytest_dgxspark.report import derived
from pytest_dgxspark.report.attestation import ATTESTATION, armored, check_attestation, pae, read_envelope
from pytest_dgxspark.report.manifest import (
    IRREGULAR_WHY,
    MANIFEST,
    SIGNATURE,
    ManifestError,
    check_manifest,
    entries,
    irregular,
)
from pytest_dgxspark.report.signing import (
    SIGNING,
    SigningError,
    principals,
    signature_fingerprint,
    verify_bytes,
    verify_signature,
)

OK, FAILED, UNVERIFIED = 0, 1, 3
ANCHOR = "allowed_signers"
_SITE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def trust_anchor(results: dict[str, Any], given: Path | None, site: Path | None) -> tuple[Path | None, str]:
    """The allowed_signers file to trust and where it came from: --allowed-signers, else --site DIR/allowed_signers,
    else sites/<run.site>/allowed_signers under the current directory (the site repository the verifier keeps)."""
    if given is not None:
        return given, "--allowed-signers"
    if site is not None:
        return (site / ANCHOR, "--site") if (site / ANCHOR).is_file() else (None, f"--site {site}: no {ANCHOR} there")
    name = str((results.get("run") or {}).get("site") or "")
    if _SITE_NAME.match(name) and (Path("sites") / name / ANCHOR).is_file():
        return Path("sites") / name / ANCHOR, f"the site repository (sites/{name})"
    return None, f"no --allowed-signers given and no sites/{name or '<site>'}/{ANCHOR} in {Path.cwd()}"


def _scope(results: dict[str, Any]) -> str:
    from pytest_dgxspark.report.summary import _scope as summary_scope

    scope = summary_scope(results)
    if scope is None:
        return "full (every rule)"
    unverified = f" (unverified prerequisites: {', '.join(scope['unverified'])})" if scope["unverified"] else ""
    return f"{scope['label']}{unverified}"


# what a rule that is not informational may be in an ACCEPTED run (judge/fold.py's verdict)
_DONE = frozenset({Status.PASSED, Status.WAIVED, Status.NOT_APPLICABLE, Status.RECORDED, Status.NOT_SELECTED})


def _internal(results: dict[str, Any]) -> list[str]:
    """results.json against itself: its counts are its rules' statuses, and its verdict, root causes, lowest broken
    layer and SIMULATED follow from what it records (as judge/fold.py derives them), so a file edited to say ACCEPTED
    over a failed rule, or not SIMULATED over a testbed, fails even when it was signed again."""
    tally: dict[str, int] = {}
    rules = [r for r in results.get("rules") or [] if isinstance(r, dict)]
    for rule in rules:
        tally[str(rule.get("status"))] = tally.get(str(rule.get("status")), 0) + 1
    counts = {str(k): v for k, v in (results.get("counts") or {}).items() if v}
    problems = [] if counts == tally else [f"results.json: counts {counts} are not its rules' statuses {tally}"]
    verdict = results.get("verdict")
    considered = [r for r in rules if r.get("kind") != "informational"]
    failed = [str(r.get("id")) for r in considered if r.get("status") == Status.FAILED]
    open_ = [str(r.get("id")) for r in considered if r.get("status") not in _DONE]
    if verdict not in derived.VERDICTS:
        problems.append(f"results.json: verdict {verdict!r} is none of {', '.join(derived.VERDICTS)}")
    elif failed and verdict != "REJECTED":
        problems.append(f"results.json: verdict {verdict}, but its rules {', '.join(failed)} failed (a failed rule "
                        "rejects)")
    elif not failed and verdict == "REJECTED":
        problems.append("results.json: verdict REJECTED, but none of its rules failed")
    elif verdict == "ACCEPTED" and open_:
        problems.append(f"results.json: verdict ACCEPTED, but its rules {', '.join(open_)} are not done")
    elif verdict == "ACCEPTED" and results.get("verdict_reasons"):
        problems.append(f"results.json: verdict ACCEPTED, but its verdict reasons say {results['verdict_reasons']}")
    broken = {str(r.get("id")): str(r.get("layer")) for r in considered if r.get("status") in BROKEN}
    causes = [str(c) for c in results.get("root_causes") or []]
    if [c for c in causes if c not in broken]:
        problems.append(f"results.json: root causes {[c for c in causes if c not in broken]} are not failed or "
                        "errored rules of it")
    lowest = results.get("lowest_broken_layer")
    if lowest is not None and lowest not in {broken.get(c) for c in causes}:
        problems.append(f"results.json: lowest broken layer {lowest!r} is the layer of none of its root causes {causes}")
    run = results.get("run") or {}
    if (run.get("testbed") or run.get("simulated_by")) and not run.get("simulated"):
        problems.append(f"results.json: run.simulated is {run.get('simulated')!r}, but the run names a testbed "
                        f"({run.get('testbed') or (run.get('simulated_by') or [''])[0]})")
    return problems


class _Out:
    """The verifier's lines, naming the bundle where a check named the private copy it read."""

    def __init__(self, copy: Path, shown: Path) -> None:
        self.failed: list[str] = []
        self.copy, self.shown = str(copy), str(shown)

    def _named(self, line: str) -> str:
        return line.replace(self.copy, self.shown)

    def say(self, line: str) -> None:
        print(self._named(line))

    def fail(self, what: str, problems: list[str]) -> None:
        print(f"{what} FAILED:", file=sys.stderr)
        for line in problems:
            print(f"  {self._named(line)}", file=sys.stderr)
        self.failed.append(what)


def _snapshot(directory: Path, into: Path) -> list[str]:
    """Copy the bundle into `into` (a private folder), reading each file once, so that every check reads the same
    bytes (a FIFO or a file swapped between two reads gave the printed claims one content and the hash another);
    returns what is neither a folder nor a regular file (a symlink, FIFO, socket or device), which is not copied."""
    files, other = entries(directory, with_manifest=True)
    for rel in files:
        try:  # no symlink is followed, and a FIFO swapped in since the walk is not waited on
            fd = os.open(directory / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            other.append(rel)
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                other.append(rel)
                continue
            (into / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(into / rel, "wb") as out:
                while block := os.read(fd, 1 << 20):
                    out.write(block)
        finally:
            os.close(fd)
    return sorted(other)


def _inside(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except OSError:
        return False


def _signature(out: _Out, directory: Path, anchor: Path, identity: str | None, signing: dict[str, Any]) -> None:
    """The manifest's signature and the attestation's DSSE signature, by one identity of the anchor, and signing.json's
    key that same key."""
    if not (directory / SIGNATURE).is_file():
        out.fail("signature", [f"{directory / SIGNATURE}: the bundle is unsigned"
                               f" ({SIGNING}: {signing.get('reason') or signing.get('state') or 'missing'})"])
        return
    try:
        check = verify_signature(directory, anchor, identity)
    except (SigningError, OSError) as exc:
        out.fail("signature", [str(exc)])
        return
    if not check.ok:
        out.fail("signature", [f"{SIGNATURE}: {check.message} (trust anchor {anchor})"])
        return
    key = signature_fingerprint((directory / SIGNATURE).read_text(encoding="ascii", errors="replace"))
    out.say(f"signer:    {check.identity} (key {key}; trust anchor {anchor})")
    out.say(f"signed at: {signing.get('signed_at') or 'not recorded'} (as {SIGNING} records it, inside the signed manifest)")
    problems = []
    if signing.get("state") != "signed" or signing.get("key") != key:
        problems.append(f"{SIGNING} says state {signing.get('state')!r}, key {signing.get('key')!r}; the manifest is "
                        f"signed by {key}")
    try:
        envelope, _ = read_envelope(directory)
        sigs = envelope["signatures"]
        data = pae(__import__("base64").b64decode(envelope["payload"]))
        good = [s for s in sigs if isinstance(s, dict) and isinstance(s.get("sig"), str)
                and check.identity in principals(armored(s["sig"]), anchor)
                and verify_bytes(data, armored(s["sig"]), anchor, check.identity).ok]
        if not good:
            problems.append(f"{ATTESTATION}: no DSSE signature by {check.identity} verifies "
                            f"({len(sigs)} signature(s) in the envelope)")
    except (ValueError, OSError, KeyError, SigningError) as exc:
        problems.append(f"{ATTESTATION}: its DSSE signature cannot be checked ({exc})")
    if problems:
        out.fail("signature", problems)
    else:
        out.say(f"signature OK: {MANIFEST} and {ATTESTATION} (DSSE) signed by {check.identity}")


def verify(directory: Path, allowed_signers: Path | None, identity: str | None, site: Path | None = None) -> int:
    """Print what the bundle says and whether it holds; OK, FAILED or UNVERIFIED. Every check reads one private copy
    of the bundle, made by reading each of its files once."""
    with tempfile.TemporaryDirectory(prefix="dgxspark-verify-") as private:
        copy = Path(private) / "bundle"
        copy.mkdir(mode=0o700)
        try:
            other = _snapshot(directory, copy)
        except OSError as exc:
            print(f"FAILED: {directory}: cannot be read ({exc})", file=sys.stderr)
            return FAILED
        return _verify(copy, directory, other, allowed_signers, identity, site)


def _verify(copy: Path, directory: Path, other: list[str], allowed_signers: Path | None, identity: str | None,
            site: Path | None) -> int:
    out = _Out(copy, directory)
    if "results.json" in other:
        print(f"FAILED: {directory / 'results.json'}: cannot be read: not a regular file {IRREGULAR_WHY}",
              file=sys.stderr)
        return FAILED
    try:
        results = derived.load_results(copy)
    except (OSError, ValueError) as exc:
        print(f"FAILED: {directory / 'results.json'}: cannot be read ({out._named(str(exc))})", file=sys.stderr)
        return FAILED
    run = results.get("run") or {}
    out.say(f"bundle:    {directory}")
    out.say(f"run id:    {run.get('id')}  (site {run.get('site')}, started {run.get('started')})")
    out.say(f"verdict:   {results.get('verdict')}")
    out.say(f"scope:     {_scope(results)}")
    simulated = run.get("simulated")
    out.say(f"SIMULATED: {'yes — ' + str((run.get('simulated_by') or ['a testbed'])[0]) if simulated else 'no'}"
            + (" (never a handover acceptance)" if simulated else ""))
    try:
        signing = json.loads((copy / SIGNING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        signing = {}
    if signing.get("state") == "unsigned":
        out.say(f"signing:   unsigned — {signing.get('reason')}")
    try:
        check = check_manifest(copy)
    except ManifestError as exc:
        out.fail("manifest", [str(exc)])
        check = None
    irregulars = [irregular(rel) for rel in other]
    if check is not None and check.ok and not irregulars:
        out.say(f"manifest OK: {check.checked} files in {directory} match {MANIFEST}")
    elif check is not None or irregulars:
        out.fail("manifest", [f"{directory} does not match {MANIFEST}:", *(check.problems() if check else []),
                              *irregulars])
    anchor, source = trust_anchor(results, allowed_signers, site)
    if anchor is not None and not anchor.is_file():
        out.fail("trust anchor", [f"{source} {anchor}: no such file"])
        anchor = None
    elif anchor is not None and _inside(anchor, directory):
        # whoever made the bundle would name the signers it is checked against (sites/<site>/ shipped inside it)
        out.fail("trust anchor", [f"{source} {anchor}: lies inside the bundle it is to check; the signers the site "
                                  "trusts come from outside it (--allowed-signers FILE, or the site repository)"])
        anchor = None
    elif anchor is not None:
        _signature(out, copy, anchor, identity, signing)
    problems = check_attestation(copy)
    if problems:
        out.fail("attestation", problems)
    else:
        out.say(f"attestation OK: {ATTESTATION} (DSSE, in-toto Statement v1, test-result v0.1) attests every file and "
                "the site inputs of results.json, and agrees with it")
    internal = _internal(results)
    if internal:
        out.fail("results.json", internal)
    for name, found in derived.all_problems(copy, results).items():
        if found:
            out.fail(name, found)
        elif name == "summary.pdf" and not (copy / name).is_file():
            out.say(f"no {name} in this bundle (dgxspark-report pdf {directory} prints it)")
        elif not (copy / name).is_file():
            out.say(f"no {name} in this bundle")
        else:
            out.say(f"{name} OK: agrees with results.json")
    if out.failed:
        print(f"FAILED: {', '.join(dict.fromkeys(out.failed))} (verdict {results.get('verdict')} of {run.get('id')} "
              "is not what this bundle proves)", file=sys.stderr)
        return FAILED
    if anchor is None:
        print(f"UNVERIFIED: the files agree with each other, but nothing says who made them: {source}; give "
              f"--allowed-signers FILE (the signers the site trusts) to verify", file=sys.stderr)
        return UNVERIFIED
    print(f"VERIFIED: {run.get('id')} says {results.get('verdict')}{' (SIMULATED)' if simulated else ''}, "
          "signed by a trusted key, every file as signed and every derived file in agreement")
    return OK
