"""--dgxspark-command-timeout is the longest a host command runs: probes' own limits are capped at it (nvidia-smi's
own limit is kept), so the gathering round's limit, and the wait for a frozen host, follow it."""
from __future__ import annotations

from pytest_dgxspark import gather, probes
from pytest_dgxspark.probes import Command, Settings


def test_a_probe_limit_is_capped_at_the_run_command_limit_and_nvidia_smi_keeps_its_own():
    settings = Settings(smi_timeout_s=8, command_timeout_s=3)
    assert settings.limit(None) == 3 and settings.limit(30) == 3 and settings.limit(2) == 2
    assert settings.limit(8) == 8  # nvidia-smi's: its expiry is the hang --dgxspark-smi-timeout times


def test_the_gathering_round_limit_follows_the_run_command_limit():
    commands = [Command("ldconfig -p"), Command("crictl info", 30), Command("nvidia-smi -L", 8)]
    limited = gather.limited(commands, Settings(smi_timeout_s=8, command_timeout_s=3))
    assert [c.timeout_s for c in limited] == [3, 3, 8]
    assert gather.batch_timeout(limited) == 8 + 10
    assert gather.batch_timeout(gather.limited(commands, Settings())) == probes.COMMAND_TIMEOUT_S + 10  # defaults


class _Target:
    def __init__(self) -> None:
        self.asked: list[tuple[str, int]] = []

    def cached(self, text: str, timeout: int) -> str:
        self.asked.append((text, timeout))
        return "answer"


def test_a_probe_command_run_by_a_check_is_capped_too():
    target = _Target()
    reading = probes.Reading(target, Settings(smi_timeout_s=8, command_timeout_s=3))
    reading.answer("cat /etc/os-release")
    reading.answer("crictl info", 30)
    reading.answer("nvidia-smi", 8)
    assert target.asked == [("cat /etc/os-release", 3), ("crictl info", 3), ("nvidia-smi", 8)]
