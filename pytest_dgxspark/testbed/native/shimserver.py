"""Shim server of a simulated node: runs the fake tools (testbed/shims/) without starting Python for every call.

Installed on the node as /usr/lib/dgxspark-testbed/shim-server under the shims' own `#!python3 -IS` line and
started by the node's PID 1 (nodeinit.py) with the listening socket's fd as its argument; stdlib only. The dispatcher reads each
request of the C client (native/shimclient.c) and hands it, with its descriptors, to a worker: one Python interpreter
per locale (LC_ALL, LC_CTYPE, LANG as the caller has them), started with exactly that locale, so stdio encodings,
UTF-8 mode and locale coercion are what `python3 -IS <shim>` gets today. A worker has every shim compiled and the
modules they import loaded; per request it forks a child that takes the caller's stdin/stdout/stderr, working
directory, umask, environment, ignored and blocked signals and argv, builds sys.std* as the interpreter does, runs the
shim as __main__ and exits as the interpreter would. The worker answers the child's wait status; when the caller goes
away it kills the child; signals the caller passes on reach the child.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys

SOURCES = "/usr/lib/dgxspark-testbed/shims-py"
LOCALE_VARS = ("LC_ALL", "LC_CTYPE", "LANG")
MAX_MESSAGE = 256 * 1024
FDS = 4  # stdin, stdout, stderr, working directory


def parse(data: bytes) -> dict:
    fields = data.split(b"\0")[:-1]
    if len(fields) < 7 or fields[0] != b"DGXSHIM1":
        raise ValueError("not a shim request")
    nargs = int(fields[6])
    env = {}
    for entry in fields[7 + nargs:]:
        key, sep, value = entry.partition(b"=")
        if sep:
            env.setdefault(os.fsdecode(key), os.fsdecode(value))
    return {"name": os.fsdecode(fields[1]), "execfn": os.fsdecode(fields[2]), "umask": int(fields[3], 8),
            "ignored": int(fields[4], 16), "blocked": int(fields[5], 16),
            "args": [os.fsdecode(a) for a in fields[7:7 + nargs]], "env": env}


def locale_key(data: bytes) -> tuple:
    """The caller's (LC_ALL, LC_CTYPE, LANG), None where unset (the first definition wins, as getenv finds it)."""
    found: dict[bytes, bytes] = {}
    for entry in data.split(b"\0")[7:]:
        key, sep, value = entry.partition(b"=")
        if sep and key in (b"LC_ALL", b"LC_CTYPE", b"LANG"):
            found.setdefault(key, value)
    return tuple(None if found.get(k.encode()) is None else os.fsdecode(found[k.encode()]) for k in LOCALE_VARS)


def recv_request(sock: socket.socket) -> tuple[bytes, list[int]]:
    data, ancdata, _, _ = sock.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(FDS * 5 * 4))
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) - len(payload) % 4]))
    return data, fds


def dispatch(listener: socket.socket) -> None:
    """Hand each connection, its request and descriptors to the worker of the caller's locale."""
    base_env = {k: v for k, v in os.environ.items() if k not in LOCALE_VARS}
    # the worker of sessions without a locale (no SendEnv), ready before the first call; others start on first use
    workers: dict[tuple, socket.socket] = {(None, None, None): spawn((None, None, None), base_env)}
    while True:
        conn, _ = listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(5)
            data, fds = recv_request(conn)
            key = locale_key(data)
            for attempt in (1, 2):
                worker = workers.get(key)
                if worker is None:
                    worker = workers[key] = spawn(key, base_env)
                conn.setblocking(True)  # the worker gets the same open file description
                try:
                    worker.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                             struct.pack(f"{1 + len(fds)}i", conn.fileno(), *fds))])
                    break
                except OSError:
                    workers.pop(key).close()
        except (OSError, ValueError):
            pass  # the client execs the Python shim when the connection closes unanswered
        finally:
            conn.close()
            for fd in fds:
                os.close(fd)


def spawn(key: tuple, base_env: dict) -> socket.socket:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(base_env, **{k: v for k, v in zip(LOCALE_VARS, key) if v is not None})
    subprocess.Popen([sys.executable, "-IS", os.path.abspath(__file__), "worker", json.dumps(key), str(theirs.fileno())],
                     env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     cwd="/")
    theirs.close()
    return ours


class Worker:
    """One interpreter of one locale: forks a child per request and relays its end."""

    def __init__(self, key: tuple, handoff: socket.socket) -> None:
        import atexit  # noqa: F401,E401 (loaded once: what the
        # shims import and what each child needs)
        self.codes = {}
        for name in sorted(os.listdir(SOURCES)):
            path = os.path.join(SOURCES, name)
            with open(path, "rb") as handle:
                self.codes[name] = (path, compile(handle.read(), path, "exec", dont_inherit=True))
        # PEP 538: the interpreter set LC_CTYPE for itself (and what it starts) when the caller's locale is C
        self.coerced = {k: os.environ.get(k) for k, v in zip(LOCALE_VARS, key) if os.environ.get(k) != v}
        self.stdio = [(s.encoding, s.errors) for s in (sys.stdin, sys.stdout, sys.stderr)]
        self.handoff = handoff
        self.selector = selectors.DefaultSelector()
        self.selector.register(handoff, selectors.EVENT_READ, ("handoff", None))
        self.running: dict[int, tuple[int, socket.socket]] = {}  # pid -> (pidfd, connection)
        gc.freeze()  # what is loaded now stays out of the collector: a child's collections copy none of its pages

    def serve(self) -> None:
        while True:
            for key, _ in self.selector.select():
                kind, item = key.data
                if kind == "handoff":
                    self.take()
                elif kind == "conn":
                    self.from_client(item)
                else:
                    self.ended(item)

    def take(self) -> None:
        data, fds = recv_request(self.handoff)
        if not data and not fds:
            sys.exit(0)  # the dispatcher is gone: the node is going down
        conn = socket.socket(fileno=fds[0])
        ours = fds[1:]
        try:
            request = parse(data)
            entry = self.codes.get(request["name"])
            if entry is None or len(ours) != FDS:
                return  # unknown tool or missing descriptors: declined, the client execs the Python shim
            pid = os.fork()
            if pid == 0:
                conn.close()
                self.child(entry, request, ours)
            pidfd = os.pidfd_open(pid)
            self.running[pid] = (pidfd, conn)
            self.selector.register(conn, selectors.EVENT_READ, ("conn", pid))
            self.selector.register(pidfd, selectors.EVENT_READ, ("pid", pid))
            try:
                conn.send(b"R")
            except OSError:
                os.kill(pid, signal.SIGKILL)
            conn = None
        except (OSError, ValueError):
            pass
        finally:
            if conn is not None:
                conn.close()
            for fd in ours:
                os.close(fd)

    def from_client(self, pid: int) -> None:
        conn = self.running[pid][1]
        try:
            message = conn.recv(16)
        except OSError:
            message = b""
        if not message:  # the caller is gone (killed with its process group): so is what it ran
            self.selector.unregister(conn)
            self._kill(pid, signal.SIGKILL)
        elif message[:1] == b"S" and len(message) == 2:
            self._kill(pid, message[1])

    def _kill(self, pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def ended(self, pid: int) -> None:
        pidfd, conn = self.running.pop(pid)
        _, status = os.waitpid(pid, 0)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        try:
            self.selector.unregister(conn)
        except KeyError:
            pass
        try:
            conn.send(b"X" + struct.pack("i", status))
        except OSError:
            pass
        conn.close()

    def child(self, entry: tuple, request: dict, fds: list[int]) -> None:
        """In the forked child: become the process `python3 -IS <shim> args` would be, run the shim, exit."""
        try:
            self._become(request, fds)
        except BaseException as exc:
            os.write(2, f"dgxspark shim server: setting up {request['name']} failed: {exc!r}\n".encode())
            os._exit(127)
        run_main(*entry, request["execfn"])

    def _become(self, request: dict, fds: list[int]) -> None:
        import io
        import time

        # the worker's dispositions are the defaults but for the interpreter's own (set again below): only those and
        # the caller's ignored ones need a sigaction (Python's table is the worker's true state; nothing else sets any)
        for sig in signal.valid_signals():
            want = signal.SIG_IGN if request["ignored"] >> sig & 1 else signal.SIG_DFL
            if sig not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(sig) not in (want, None):
                try:
                    signal.signal(sig, want)
                except (OSError, ValueError):
                    pass
        self.selector.close()
        self.handoff.close()
        for pidfd, conn in self.running.values():
            os.close(pidfd)
            conn.close()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.fchdir(fds[3])
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.umask(request["umask"])
        env = dict(request["env"])
        for key, value in self.coerced.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        for key in [k for k in os.environ if k not in env]:  # only the differences: clear() is quadratic
            del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        time.tzset()
        streams = []
        for fd, (encoding, errors), name in zip((0, 1, 2), self.stdio, ("<stdin>", "<stdout>", "<stderr>")):
            mode = "r" if fd == 0 else "w"
            buffer = io.open(fd, mode + "b", -1, closefd=False)
            raw = buffer.raw
            raw.name = name
            line = fd != 0 and (raw.isatty() or fd == 2)
            stream = io.TextIOWrapper(buffer, encoding, errors, "\n", line, False)
            stream.mode = mode
            streams.append(stream)
        sys.stdin, sys.stdout, sys.stderr = streams
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
        # what the interpreter sets at start-up: SIGPIPE and SIGXFSZ ignored, SIGINT raises KeyboardInterrupt
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        if not request["ignored"] >> signal.SIGINT & 1:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, [s for s in signal.valid_signals() if request["blocked"] >> s & 1])
        sys.argv = [request["execfn"], *request["args"]]


def run_main(path: str, code: object, execfn: str) -> None:
    """Run the shim as __main__ and leave as the interpreter does: exit status, tracebacks, stdout's flush."""
    import atexit
    import builtins
    import traceback
    import types

    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__cached__ = None
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    status, interrupted = 0, False
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        status = exit_status(exc.code)
    except BaseException as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__.tb_next)
        status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except Exception as exc:  # as Py_FinalizeEx: reported as unraisable, status 120
        sys.stderr.write(f"Exception ignored in: {sys.stdout!r}\n")
        traceback.print_exception(type(exc), exc, None)
        status = 120 if status == 0 else status
    try:
        sys.stderr.flush()
    except Exception:
        pass
    if interrupted:  # the interpreter ends by SIGINT after an uncaught KeyboardInterrupt
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


def exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        sys.stderr.write(f"{code}\n")
    except Exception:
        pass
    return 1


def main() -> int:
    if sys.argv[1:2] == ["worker"]:
        key = tuple(json.loads(sys.argv[2]))
        Worker(key, socket.socket(fileno=int(sys.argv[3]))).serve()
        return 0
    dispatch(socket.socket(fileno=int(sys.argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
