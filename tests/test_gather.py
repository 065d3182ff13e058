"""The gathering step: every probe command of a host in one command, answers served to the checks, faults kept typed."""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from testinfra.backend.base import CommandResult

from pytest_dgxspark import probes
from pytest_dgxspark.probes import Command, Settings, gather
from pytest_dgxspark.site.model import HostSpec
from pytest_dgxspark.targets.ssh import HostTarget, HostUnreachable


def local_target(name: str = "gpu-01") -> HostTarget:
    """The machine the tests run on, as the suite reaches an `ansible_connection: local` host."""
    spec = HostSpec(name, "127.0.0.1", connection="local")
    return HostTarget(spec, tempfile.mkdtemp(prefix="dgxs-g-"), 0).connect()


@pytest.mark.slow
def test_one_round_answers_each_command_with_its_own_exit_status_and_streams() -> None:
    target = local_target()
    commands = [Command("echo out; echo err >&2; exit 3"), Command("printf 'caf\\303\\251\\n'"), Command("cat /nonexistent")]
    answers = gather._round(target, commands, gather.Gathered(target.name))
    assert [(a.rc, a.stdout, a.stderr) for a in answers.values()] == [
        (3, "out\n", "err\n"), (0, "café\n", ""), (1, "", "cat: /nonexistent: No such file or directory\n")]


@pytest.mark.slow
def test_a_command_past_its_own_limit_is_killed_on_the_host_and_the_others_still_answer() -> None:
    target = local_target()
    answers = gather._round(target, [Command("sleep 30", 1), Command("echo fine")], gather.Gathered(target.name))
    assert (answers["sleep 30"].rc, answers["echo fine"].stdout) == (124, "fine\n")


def test_the_checks_read_the_gathered_answer_and_run_anything_else_live(tmp_path: Path) -> None:
    target = local_target()
    marker = tmp_path / "ran"
    command = f"echo gathered; touch {marker}"
    gather._round(target, [Command(command)], gather.Gathered(target.name))
    marker.unlink()
    assert target.run(command).stdout == "gathered\n" and target.cached(command).stdout == "gathered\n"
    assert not marker.exists()  # served, not run again
    assert target.run("echo live").stdout == "live\n"


@pytest.mark.slow
def test_a_gathered_timeout_is_not_served_to_a_check_that_allows_longer() -> None:
    target = local_target()
    gather._round(target, [Command("sleep 2; echo late", 1)], gather.Gathered(target.name))
    assert target.run("sleep 2; echo late", timeout=1).rc == 124  # the same limit: the gathered answer
    assert target.run("sleep 2; echo late", timeout=10).stdout == "late\n"  # a longer one: run live


@pytest.mark.slow
def test_a_gathered_answer_slower_than_the_checks_limit_is_not_served() -> None:
    target = local_target()
    gather._round(target, [Command("sleep 1.5; echo slow", 10)], gather.Gathered(target.name))
    assert target.run("sleep 1.5; echo slow", timeout=10).stdout == "slow\n"
    assert target.run("sleep 1.5; echo slow", timeout=1).rc == 124  # took longer than this check allows: live


def test_the_command_recorded_is_the_one_the_check_wrote() -> None:
    from pytest_dgxspark.checking import command_of

    target = local_target()
    answers = gather._round(target, [Command("ls -1 /proc/driver/nvidia/gpus 2>/dev/null; true")], gather.Gathered("x"))
    assert command_of(next(iter(answers.values()))) == "ls -1 /proc/driver/nvidia/gpus 2>/dev/null; true"


class _Answering:
    """A connected host whose every command answers `result` (or raises it)."""

    def __init__(self, result: Any) -> None:
        self.spec = HostSpec("gpu-01", "10.0.0.21")
        self.name, self.where, self.connected = "gpu-01", "gpu-01 (10.0.0.21:22)", True
        self.result = result
        self.host = type("H", (), {"backend": None})()
        self.kept: dict[str, Any] = {}

    def run(self, cmd: str, timeout: int | None = None) -> CommandResult:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    def take_gathered(self, commands: Any, answers: dict[str, Any]) -> None:
        self.kept.update(answers)

    def gathered_answers(self) -> dict[str, Any]:
        return dict(self.kept)


def test_a_host_without_python3_gathers_nothing_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    missing = CommandResult(None, 127, b"python3 -I -c ...", "", "sh: 1: python3: not found")
    found = gather.gather_host(_Answering(missing), Settings())
    assert caplog.messages == [f"gathering on gpu-01: {found.problem}"]
    assert found.answers == {}
    assert found.problem == ("gpu-01 (10.0.0.21:22): gathering answered no usable output (the gatherer exited 127: "
                             "sh: 1: python3: not found); its checks run each command")


def test_an_unreachable_host_gathers_nothing_and_keeps_its_typed_error() -> None:
    error = HostUnreachable("gpu-01 (10.0.0.21:22) unreachable over SSH: Connection refused", target="ssh:gpu-01")
    found = gather.gather_host(_Answering(error), Settings())
    assert (found.answers, found.problem) == ({}, "gpu-01 (10.0.0.21:22) unreachable over SSH: Connection refused")


def test_output_that_is_not_the_gatherers_is_refused() -> None:
    with pytest.raises(ValueError, match="the host printed no gathered answers"):
        gather.parse_answers("Welcome to DGX OS\n", [Command("true")], None)
    with pytest.raises(ValueError, match="2 commands sent, 1 answers"):
        gather.parse_answers(gather.MARK + '[[0, "", "", 0.1]]\n', [Command("true"), Command("false")], None)


def test_hosts_not_connected_are_not_gathered() -> None:
    idle = _Answering(AssertionError("must not run"))
    idle.connected = False
    assert gather.gather_all([idle], Settings()) == []


def test_the_batch_limit_is_the_slowest_commands_plus_the_kill_grace() -> None:
    assert gather.batch_timeout([Command("a", 30), Command("b", 60)]) == 70
    assert gather.batch_timeout([]) == probes.COMMAND_TIMEOUT_S + 10


@pytest.mark.slow
def test_a_command_past_its_limit_is_ended_with_its_whole_process_group() -> None:
    target = local_target()
    marker = f"dgxs-gather-{time.monotonic_ns()}"
    command = f"sh -c 'exec -a {marker} sleep 30' & sleep 30; wait"
    answers = gather._round(target, [Command(command, 1)], gather.Gathered(target.name))
    assert answers[command].rc == 124
    time.sleep(0.2)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1  # the child went too


@pytest.mark.slow
def test_a_command_that_ignores_term_is_killed_after_the_grace_and_exits_137() -> None:
    target = local_target()
    program = gather.gatherer(grace_s=1)
    jobs = json.dumps([["trap '' TERM; sleep 30; echo never", 1], ["echo fine", 5]])
    started = time.monotonic()
    result = target.run(f"python3 -I -S -c {shlex.quote(program)} {shlex.quote(jobs)}", timeout=20)
    answers = json.loads(result.stdout.split(gather.MARK, 1)[1])
    assert [a[0] for a in answers] == [137, 0] and time.monotonic() - started < 5


@pytest.mark.slow
def test_a_host_gathers_only_the_commands_of_the_wanted_probes() -> None:
    target = local_target()
    gathered = gather.gather_host(target, Settings(), {"network"})
    wanted = probes.commands_for(target.spec, Settings(), {"network"})
    assert gathered.problem is None and gathered.ssh_commands in (1, 2)
    assert set(gathered.answers) >= {c.text for c in wanted}
    assert not [t for t in gathered.answers if "nvidia" in t or "rke2" in t]
