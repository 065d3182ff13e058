"""The machine the suite runs on (`ansible_connection: local`): testinfra's local backend, same timeouts as SSH."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from testinfra.backend.base import CommandResult
from testinfra.backend.local import LocalBackend

COMMAND_TIMEOUT_S = 60
TIMEOUT_EXIT = 124
GRACE_S = 20


class GuardedLocalBackend(LocalBackend):
    """testinfra's local backend with the SSH backend's per-command `timeout` and a hard limit on the process."""

    NAME = "dgxspark-local"

    def __init__(self, **kwargs: Any) -> None:
        # an engineer at the console is often not root: the checks read root-only files through `sudo -n`
        super().__init__(sudo=os.geteuid() != 0, **kwargs)

    def get_sudo_command(self, command: str, sudo_user: str | None) -> str:
        if sudo_user is None:
            return self.quote("sudo -n /bin/sh -c %s", command)
        return self.quote("sudo -n -u %s /bin/sh -c %s", sudo_user, command)

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        limit = int(kwargs.pop("timeout", None) or COMMAND_TIMEOUT_S)
        wrapped = self.quote(f"timeout -k 5 {limit} /bin/sh -c %s", self.get_command(command, *args))
        cmd = self.encode(wrapped)
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=limit + GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            return self.result(TIMEOUT_EXIT, cmd, stdout, stderr + b"\nthe command did not return in time")
        return self.result(proc.returncode, cmd, stdout, stderr)
