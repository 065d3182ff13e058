"""--dgxspark-command-timeout is the longest a host command runs: probes' own limits are capped at it (nvidia-smi's
own limit is kept), so the gathering round's limit, and the wait for a frozen host, follow it."""
from __future__ import annotations

from pytest_dgxspark import probes
from pytest_dgxspark.probes import Command, Settings, gather


def test_a_probe_limit_is_capped_at_the_run_command_limit_and_nvidia_smi_keeps_its_own():
    settings = Settings(smi_timeout_s=30, command_timeout_s=3)
    assert settings.limit(None) == 3 and settings.limit(30) == 3 and settings.limit(2) == 2  # 30: NVML's own, capped
    assert settings.limit(30, keep=True) == 30  # nvidia-smi's: its expiry is the hang --dgxspark-smi-timeout times


def test_the_gathering_round_limit_follows_the_run_command_limit():
    commands = [Command("ldconfig -p"), Command("crictl info", 30), Command("nvidia-smi", 8, keep_limit=True)]
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
    reading.answer("nvidia-smi", 8, keep_limit=True)
    reading.answer("nvidia-smi -L", 8)  # not the smi option's command: capped
    assert target.asked == [("cat /etc/os-release", 3), ("crictl info", 3), ("nvidia-smi", 8), ("nvidia-smi -L", 3)]


def test_the_run_smi_commands_keep_their_limit_and_every_other_driver_command_is_capped():
    from pytest_dgxspark.probes import nvidia_driver
    from pytest_dgxspark.site.model import HostSpec

    commands = nvidia_driver.commands(HostSpec("gpu-01", "10.0.0.21", gpu=True), Settings(30, command_timeout_s=3))
    limits = {c.text: c.timeout_s for c in gather.limited(commands, Settings(30, command_timeout_s=3))}
    assert limits.pop(nvidia_driver.SMI_QUERY) == 30 and limits.pop(nvidia_driver.SMI_HEADER) == 30
    assert set(limits.values()) == {3}
