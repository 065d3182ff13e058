"""The gathering step: every probe command of a host in one SSH command, all hosts at once, before the host checks.

On the host a small Python program (sent with the command, nothing is written there; `python3 -I -S`, the standard
library only) runs the commands side by side, each as `/bin/sh -c` in a process group of its own under the limits the
SSH backend's `timeout -k 5 <s>` would set (TERM at the limit: exit 124; KILL 5 s later: exit 137), and prints their
exit statuses and outputs as one JSON line. The answers are handed to the HostTarget, which serves them to the checks;
anything a check asks that was not gathered still runs live. A transport failure (exit 255 from ssh, a host that does
not return) marks the host unreachable, so each of its checks is an `error` attributed to it; an answer that is not
the gatherer's (no python3 on the host, a broken shell) gathers nothing more, and the checks run their commands one
by one as they would without this step.
"""

from __future__ import annotations

import base64
import json
import logging
import shlex
import time
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_dgxspark import probes
from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.data.yamlload import loads_json
from pytest_dgxspark.probes import Command

LOG = logging.getLogger(__name__)
MARK = "@@dgxspark-gather "
PARALLEL_PER_HOST = 8
KILL_GRACE_S = 5
HOSTS_AT_ONCE = 32
ANSWERS_MAX_BYTES = 256 * 1024 * 1024
_PROGRAM = r"""
import binascii, json, os, signal, subprocess, sys, threading, time
jobs = json.loads(sys.argv[1])
answers = [None] * len(jobs)
pending = iter(range(len(jobs)))
lock = threading.Lock()
def b64(data):
    return binascii.b2a_base64(data, newline=False).decode()
def one(text, limit):
    # what `timeout -k GRACE <limit> /bin/sh -c <text>` does, without a timeout process per command: the command in a
    # process group of its own, TERM to the group at the limit (exit 124), KILL GRACE s later (exit 137)
    proc = subprocess.Popen(["/bin/sh", "-c", text], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
        return (proc.returncode if proc.returncode >= 0 else 128 - proc.returncode), out, err
    except subprocess.TimeoutExpired:
        pass
    for sig, rc in ((signal.SIGTERM, 124), (signal.SIGKILL, 137)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            out, err = proc.communicate(timeout=GRACE)
            return rc, out, err
        except subprocess.TimeoutExpired:
            continue
    for pipe in (proc.stdout, proc.stderr):  # a process that left the group still holds the pipes: give them up
        pipe.close()
    proc.wait()
    return 137, b"", b""
def worker():
    while True:
        with lock:
            index = next(pending, None)
        if index is None:
            return
        text, limit = jobs[index]
        started = time.monotonic()
        try:
            rc, out, err = one(text, limit)
        except OSError as error:
            rc, out, err = 126, b"", str(error).encode()
        answers[index] = [rc, b64(out), b64(err), round(time.monotonic() - started, 3)]
threads = [threading.Thread(target=worker) for _ in range(min(PARALLEL, len(jobs)))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
sys.stdout.write(MARK + json.dumps(answers) + "\n")
"""


def gatherer(grace_s: int = KILL_GRACE_S, parallel: int = PARALLEL_PER_HOST) -> str:
    """The program the host runs (python3 -I -S -c): `parallel` commands at a time, KILL `grace_s` after TERM."""
    return _PROGRAM.replace("GRACE", str(grace_s)).replace("PARALLEL", str(parallel)).replace("MARK", repr(MARK))


GATHERER = gatherer()


@dataclass
class Gathered:
    """What gathering on one host gave: the answers by command text, or why it gathered nothing."""

    host: str
    commands: int = 0
    ssh_commands: int = 0
    answers: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    seconds: float = 0.0


def batch_command(commands: Iterable[Command]) -> str:
    """The one shell command that runs `commands` side by side on the host."""
    jobs = [[c.text, int(c.timeout_s)] for c in commands]
    return f"python3 -I -S -c {shlex.quote(GATHERER)} {shlex.quote(json.dumps(jobs))}"


def limited(commands: Iterable[Command], settings: probes.Settings) -> list[Command]:
    """`commands` at most at the run's command limit (--dgxspark-command-timeout, `Settings.limit`): the round's
    limit, and so the wait for a frozen host, follows it."""
    return [replace(c, timeout_s=settings.limit(c.timeout_s, c.keep_limit)) for c in commands]


def batch_timeout(commands: Iterable[Command]) -> int:
    """The limit of the whole batch: its slowest command's, plus the kill grace."""
    return max((int(c.timeout_s) for c in commands), default=probes.COMMAND_TIMEOUT_S) + KILL_GRACE_S + 5


def parse_answers(stdout: str, commands: list[Command], backend: Any) -> dict[str, tuple[Any, float]]:
    """The gatherer's JSON line as (CommandResult, seconds it took) by command text; ValueError when the output is
    not the gatherer's."""
    line = next((ln for ln in reversed((stdout or "").splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        raise ValueError("the host printed no gathered answers")
    # the bounded loader: a host's answer line may be large (every output, base64), never deep
    answers = loads_json(line[len(MARK):], "the gatherer's answers", max_bytes=ANSWERS_MAX_BYTES, max_depth=4)
    if not isinstance(answers, list) or len(answers) != len(commands):
        raise ValueError(f"{len(commands)} commands sent, {len(answers) if isinstance(answers, list) else 'no'} answers")
    found = {}
    for command, (rc, out, err, seconds) in zip(commands, answers):
        wrapped = backend.encode(backend.quote(f"timeout -k {KILL_GRACE_S} {int(command.timeout_s)} /bin/sh -c %s", command.text))
        found[command.text] = (backend.result(int(rc), wrapped, base64.b64decode(out), base64.b64decode(err)), float(seconds))
    return found


def _round(target: Any, commands: list[Command], gathered: Gathered) -> dict[str, Any]:
    if not commands:
        return {}
    gathered.ssh_commands += 1
    gathered.commands += len(commands)
    # ssh's exit 255 and a host that does not return raise HostUnreachable here (the backend marks the host)
    result = target.run(batch_command(commands), timeout=batch_timeout(commands))
    if result.rc != 0:
        raise ValueError(f"the gatherer exited {result.rc}: {(result.stderr or '').strip()[-200:]}")
    answers = parse_answers(result.stdout, commands, target.host.backend)
    target.take_gathered(commands, answers)
    return {text: result for text, (result, _) in answers.items()}


def gather_host(target: Any, settings: probes.Settings, wanted: Collection[str] | None = None) -> Gathered:
    """Run the commands of the `wanted` probes (all when None) on one connected host (two rounds: the second names
    files the first found)."""
    gathered = Gathered(target.name)
    started = time.monotonic()
    try:
        first = _round(target, limited(probes.commands_for(target.spec, settings, wanted), settings), gathered)
        _round(target, limited(probes.followups_for(target.spec, settings, first, wanted), settings), gathered)
    except TargetError as error:  # unreachable: each check of the host is an error attributed to it
        gathered.problem = str(error)
    except (ValueError, TypeError, KeyError) as error:
        gathered.problem = f"{target.where}: gathering answered no usable output ({error}); its checks run each command"
    gathered.answers = dict(target.gathered_answers())
    gathered.seconds = time.monotonic() - started
    if gathered.problem is not None:  # in the log of the check that opened the hosts (junit, report.html)
        LOG.warning("gathering on %s: %s", target.name, gathered.problem)
    return gathered


def gather_all(targets: Iterable[Any], settings: probes.Settings, wanted: Collection[str] | None = None) -> list[Gathered]:
    """Gather on every connected host at once (one thread per host, over each host's own SSH master)."""
    connected = [t for t in targets if getattr(t, "connected", False)]
    if not connected:
        return []
    with ThreadPoolExecutor(max_workers=min(HOSTS_AT_ONCE, len(connected))) as pool:
        return list(pool.map(lambda t: gather_host(t, settings, wanted), connected))
