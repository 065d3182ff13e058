"""Hosts over SSH: testinfra's ssh backend with one ControlMaster per host, timeouts and unreachable memory."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from testinfra.backend.base import CommandResult
from testinfra.backend.ssh import SshBackend
from testinfra.host import Host

from pytest_dgxspark.checking import TargetError
from pytest_dgxspark.targets.causes import SSH_CAUSES, SUDO_PASSWORD, Cause, ssh_cause
from pytest_dgxspark.targets.sshroute import SshRoute, SshRouteError, resolved, route

CONNECT_TIMEOUT_S = 10
COMMAND_TIMEOUT_S = 60
TIMEOUT_EXIT = 124

# ssh exits 255 on its own errors: such a result is never a command's output (a remote exit 255 reads the same
# and is treated as unreadable too: an error of the run, never a finding).
SSH_EXIT = 255


def _abandon(proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    """Kill the shell and its ssh client (their own process group) and give up their output. On a frozen host
    (TCP up, the remote command hangs) the ControlMaster keeps the session's pipes open, so waiting for EOF would
    hang the run: after 5 s the pipes are closed unread."""
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return b"", b""


class HostUnreachable(TargetError):
    """A host could not be reached or read over SSH (the message names host, address, cause and ssh's words)."""


def timed_out(result: CommandResult) -> bool:
    """Whether a command was killed by the per-command timeout on the target."""
    return result.rc in (TIMEOUT_EXIT, 128 + 9, 137)


class _GuardedSshBackend(SshBackend):
    """testinfra's ssh backend with a per-command timeout on the target and unreachable detection."""

    NAME = "dgxspark-ssh"

    def __init__(self, hostspec: str, target: HostTarget, **kwargs: Any) -> None:
        self._target = target
        self._local_limit = COMMAND_TIMEOUT_S + 30
        super().__init__(hostspec, **kwargs)

    def get_sudo_command(self, command: str, sudo_user: str | None) -> str:
        if sudo_user is None:
            return self.quote("sudo -n /bin/sh -c %s", command)
        return self.quote("sudo -n -u %s /bin/sh -c %s", sudo_user, command)

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        self._target.raise_if_unreachable()
        limit = int(kwargs.pop("timeout", None) or COMMAND_TIMEOUT_S)
        inner = self.get_command(command, *args)
        wrapped = self.quote(f"timeout -k 5 {limit} /bin/sh -c %s", inner)
        self._local_limit = limit + CONNECT_TIMEOUT_S + 20
        return self.run_ssh(wrapped)

    def run_local(self, command: str, *args: str) -> CommandResult:
        cmd = self.encode(self.quote(command, *args))
        proc = subprocess.Popen(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=self._local_limit)
        except subprocess.TimeoutExpired:
            _abandon(proc)
            # the target's own `timeout` should have ended the command long before: the host itself does not answer
            # (frozen, TCP up). Never a command's output (a 124 would read as a hung nvidia-smi): this command and
            # every later one fail at once as the host's fault.
            self._target.mark_unreachable(f"a command did not return within {self._local_limit} s although the "
                                          "host's own timeout should have ended it", SSH_CAUSES["timeout"])
            self._target.raise_if_unreachable()
        return self.result(proc.returncode, cmd, stdout, stderr)

    def _build_ssh_command(self, command: str) -> tuple[list[str], list[str]]:
        """ssh as Ansible runs it: -F config, the inventory's Port/IdentityFile/User, ConnectTimeout, then
        ansible_ssh_common_args and ansible_ssh_extra_args (ProxyJump), then the master connection, then ansible_host."""
        r = self._target.route
        cmd, args = ["ssh"], []
        if r.config:
            cmd.append("-F %s")
            args.append(r.config)
        cmd += ["-o BatchMode=yes", "-o ServerAliveInterval=5", "-o ServerAliveCountMax=3", "-o ConnectionAttempts=1"]
        for option in r.options:
            cmd.append("%s")
            args.append(option)
        cmd += [f"-o ConnectTimeout={self.timeout}", f"-o ControlMaster=auto -o ControlPersist={self.controlpersist}s",
                f"-o ControlPath={self.controlpath}", "%s %s"]
        args += [r.destination, command]
        return cmd, args

    def run_ssh(self, command: str) -> CommandResult:
        cmd, cmd_args = self._build_ssh_command(command)
        out = self.run_local(" ".join(cmd), *cmd_args)
        out.command = self.encode(command)
        stderr = out.stderr or ""
        if out.rc == SSH_EXIT:
            cause = ssh_cause(stderr)
            if cause.kind == "ssh-failed" and self._target.connected:
                cause = SSH_CAUSES["dropped"]  # it answered before: a wordless exit 255 is the connection lost
            self._target.mark_unreachable(_ssh_words(stderr) or f"ssh exited {SSH_EXIT}", cause)
            self._target.raise_if_unreachable()
        if out.rc != 0 and self.sudo and SUDO_PASSWORD.search(stderr):
            self._target.mark_unreachable(_ssh_words(stderr), SSH_CAUSES["sudo-password"])
            self._target.raise_if_unreachable()
        return out


def _ssh_words(stderr: str) -> str:
    """ssh's (or sudo's) own lines about the failure, without banners and warnings, at most three."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not set(ln.strip()) <= set("@")]
    meaningful = [ln for ln in lines if not ln.startswith(("Warning: Permanently added", "** WARNING"))]
    return " | ".join(meaningful[-3:])[-400:]


class HostTarget:
    """One inventory host: its HostSpec and a testinfra Host over one SSH ControlMaster connection."""

    def __init__(self, spec: Any, control_dir: str, index: int) -> None:
        self.spec = spec
        self.name: str = spec.name
        self._control_path = os.path.join(control_dir, f"h{index}")
        self._host: Host | None = None
        self._unreachable: str | None = None
        self.cause: Cause | None = None  # why the host could not be reached, once it could not
        self._cache: dict[str, CommandResult] = {}
        self._gathered: dict[str, tuple[int, float, CommandResult]] = {}  # command -> (limit, seconds, answer)
        self.connected = False
        self.command_timeout_s = COMMAND_TIMEOUT_S  # a command's limit when its caller names none (the run plan's)
        self._route: SshRoute | None = None
        self._login: str | None = None

    def __repr__(self) -> str:
        return f"HostTarget({self.name} {self.spec.address}:{self.spec.port})"

    @property
    def target_id(self) -> str:
        """'ssh:<inventory name>': the target named in this host's TargetErrors."""
        return f"ssh:{self.name}"

    @property
    def where(self) -> str:
        """'gpu-01 (10.0.0.21:22)' for messages; 'gpu-01 (local)' for the machine the suite runs on."""
        if getattr(self.spec, "connection", "ssh") == "local":
            return f"{self.name} (local)"
        return f"{self.name} ({self.spec.address}:{self.spec.port})"

    @property
    def host(self) -> Host:
        """The testinfra Host (built on first use; connects on its first command)."""
        if self._host is None and getattr(self.spec, "connection", "ssh") == "local":
            from pytest_dgxspark.targets.local import GuardedLocalBackend

            self._host = Host(GuardedLocalBackend())  # the machine the suite runs on, as at the DGX Spark's console
        if self._host is None:
            # the route Ansible takes (sshroute.py): ansible_host dialled, inventory options before the config's
            self._host = Host(_GuardedSshBackend(
                self.route.destination, target=self, timeout=CONNECT_TIMEOUT_S, controlpath=self._control_path,
                controlpersist=600, sudo=self.login_user() != "root",
            ))
        return self._host

    @property
    def route(self) -> SshRoute:
        """This host's SSH route: the same destination and options Ansible uses (sshroute.route)."""
        if self._route is None:
            self._route = route(self.spec)
        return self._route

    def login_user(self) -> str:
        """Who the SSH session logs in as: ansible_user, else what ssh makes of the config (its User, or the login)."""
        if self.route.user is None and self._login is None:
            try:
                self._login = (resolved(self.route).get("user") or ["root"])[0]
            except SshRouteError:
                self._login = "root"  # the first command then fails with ssh's own words
        return self.route.user or self._login or "root"

    def mark_unreachable(self, detail: str, cause: Cause | None = None) -> None:
        """Remember that this host is unreachable, and why: later uses fail at once, without retrying."""
        if self._unreachable is None:
            self._unreachable = detail
            self.cause = cause or SSH_CAUSES["ssh-failed"]

    def raise_if_unreachable(self) -> None:
        """Raise HostUnreachable when the host is known to be unreachable."""
        if self._unreachable is not None:
            cause = self.cause or SSH_CAUSES["ssh-failed"]
            raise HostUnreachable(f"{self.where}: cannot read the host over SSH: {cause.meaning} ({self._unreachable})"
                                  f"{self._known_hosts_said(cause)}", target=self.target_id, cause=cause)

    def _known_hosts_said(self, cause: Cause) -> str:
        """For a host key fault: which known_hosts files this run's route reads for which name (ssh -G), so the fix
        'add it to the known_hosts the run uses' names them."""
        if not cause.kind.startswith("host-key") or getattr(self.spec, "connection", "ssh") == "local":
            return ""
        try:
            ssh = resolved(self.route)
        except SshRouteError:
            return ""
        files = [f for key in ("userknownhostsfile", "globalknownhostsfile") for f in ssh.get(key, [])]
        port = (ssh.get("port") or ["22"])[0]
        name = (ssh.get("hostname") or [self.route.destination])[0]
        entry = name if port == "22" else f"[{name}]:{port}"
        return f"; the run reads known_hosts {' '.join(files)} for {entry}"

    def connect(self) -> HostTarget:
        """Open the SSH master connection (once); HostUnreachable when the host cannot be reached."""
        self.raise_if_unreachable()
        if not self.connected:
            result = self.host.run("true", timeout=CONNECT_TIMEOUT_S + 5)
            if result.rc != 0:
                self.mark_unreachable(f"'true' exited {result.rc}: {_ssh_words(result.stderr or '')}")
                self.raise_if_unreachable()
            self.connected = True
        return self

    def run(self, cmd: str, timeout: int | None = None) -> CommandResult:
        """Run a shell command on the host, killed on the target after timeout seconds (exit 124). The gathering
        step's answer (gather.py) is served instead when it would be this run's: it finished within `timeout`, or it
        was killed at a limit no shorter than `timeout`."""
        gathered = self._gathered.get(cmd)
        if gathered is not None:
            limit, seconds, answer = gathered
            wanted = int(timeout or self.command_timeout_s)
            if (limit >= wanted) if timed_out(answer) else (seconds <= wanted):
                return answer
        return self.host.run(cmd, timeout=timeout or self.command_timeout_s)

    def take_gathered(self, commands: Any, answers: dict[str, tuple[CommandResult, float]]) -> None:
        """Keep what the gathering step ran here (`commands` carry their limits) for the checks to read."""
        for command in commands:
            if command.text in answers:
                answer, seconds = answers[command.text]
                self._gathered[command.text] = (int(command.timeout_s), seconds, answer)

    def gathered_answers(self) -> dict[str, CommandResult]:
        """The gathered answers by command text."""
        return {text: answer for text, (_, _, answer) in self._gathered.items()}

    def cached(self, cmd: str, timeout: int | None = None) -> CommandResult:
        """Run cmd once per run; later calls return the same CommandResult."""
        if cmd not in self._cache:
            self._cache[cmd] = self.run(cmd, timeout=timeout)
        return self._cache[cmd]

    def cached_result(self, cmd: str) -> CommandResult | None:
        """A cached (or gathered) result, without running anything."""
        if cmd in self._cache:
            return self._cache[cmd]
        gathered = self._gathered.get(cmd)
        return gathered[2] if gathered is not None else None

    def close(self) -> None:
        """Close the SSH master connection."""
        if self._host is not None and self.connected and os.path.exists(self._control_path):
            subprocess.run(
                ["ssh", "-o", f"ControlPath={self._control_path}", "-O", "exit", self.name],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=15,
                check=False,
            )
        self.connected = False
