"""One way out of a run: SIGINT (once or twice), SIGTERM, SIGHUP and the overall deadline all end it as Ctrl-C does.

The first signal raises KeyboardInterrupt in the main thread (pytest stops, finalizers delete the CUDA namespace,
the session finishes and writes results.json INCOMPLETE with the cause). Every later signal, and any signal once the
bundle is being written, is noted and said but raises nothing, so the bundle is finished and sealed; a slow step
(Chromium printing the PDF) asks `pending()` and gives up. SIGHUP (the controller's SSH session dropped) also points
the terminal at /dev/null: there is no one to read it, and writing to a hung-up terminal would fail the finish.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

SIGNALS = tuple(s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None)
# A full run of a 16-node site: gathering (~1 min), the checks (~5 min on a real site), the CUDA sample (its own 300 s
# limit) and the bundle, with room: a run still going after an hour waits on something that does not answer.
DEFAULT_DEADLINE_S = 3600
HARD_EXIT_AFTER = 5  # this many signals while the bundle is written: the user insists; exit at once


@dataclass
class ExitPath:
    """The run's exit state: what ended it, how many signals came, whether the bundle is being written."""

    cause: str | None = None  # "SIGINT", "SIGTERM", "SIGHUP" or "deadline"
    at: float | None = None
    signals: list[str] = field(default_factory=list)
    finishing: bool = False
    previous: dict[int, Any] = field(default_factory=dict)
    timer: threading.Timer | None = None
    deadline_s: int | None = None

    def pending(self) -> bool:
        """Whether the run was asked to end (a slow step of the finish gives up when so)."""
        return self.cause is not None

    def reason(self) -> str:
        """'interrupted by SIGTERM' / 'stopped at the deadline (--dgxspark-deadline 600 s)'."""
        if self.cause == "deadline":
            return f"stopped at the run's deadline (--dgxspark-deadline {self.deadline_s} s)"
        return f"interrupted by {self.cause}" if self.cause else ""

    def as_dict(self) -> dict[str, Any]:
        return {"cause": "deadline" if self.cause == "deadline" else "interrupted", "by": self.cause,
                "signals": list(self.signals), "deadline_s": self.deadline_s}


_CURRENT: ExitPath | None = None


def current() -> ExitPath | None:
    """The running exit path (None outside a run, or after it ended)."""
    return _CURRENT


def pending() -> bool:
    """Whether the current run was asked to end."""
    return _CURRENT is not None and _CURRENT.pending()


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _detach_terminal() -> None:
    """The terminal hung up: stdout and stderr to /dev/null, so writing the closing block cannot fail."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for fd in (1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def _handler(path: ExitPath):
    def handle(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if signum == getattr(signal, "SIGHUP", None):
            _detach_terminal()
        if path.cause == "deadline" and not path.signals:
            path.signals.append("deadline")
        else:
            path.signals.append(name)
        if path.cause is None:
            path.cause, path.at = name, time.time()
        if path.finishing or len(path.signals) > 1:
            if len(path.signals) >= HARD_EXIT_AFTER:
                _say(f"dgxspark: {name} again ({len(path.signals)} signals): exiting now; the bundle may be unsealed")
                os._exit(2)
            _say(f"dgxspark: {name}: the run is already ending; the bundle is written and sealed first")
            return
        raise KeyboardInterrupt(path.reason())

    return handle


def install(deadline_s: int | None) -> ExitPath:
    """The handlers of SIGINT, SIGTERM and SIGHUP, and the deadline's timer (main thread only)."""
    global _CURRENT
    path = ExitPath(deadline_s=deadline_s)
    if threading.current_thread() is not threading.main_thread():
        _CURRENT = path
        return path
    handle = _handler(path)
    for sig in SIGNALS:
        path.previous[sig] = signal.getsignal(sig)
        signal.signal(sig, handle)
    if deadline_s:
        main = threading.main_thread().ident or 0

        def expire() -> None:
            if path.cause is None and not path.finishing:
                path.cause, path.at = "deadline", time.time()
                _say(f"dgxspark: the run's deadline ({deadline_s} s) passed: stopping the run")
                signal.pthread_kill(main, signal.SIGINT)  # to the main thread: its blocking call is interrupted

        path.timer = threading.Timer(deadline_s, expire)
        path.timer.daemon = True
        path.timer.start()
    _CURRENT = path
    return path


def finishing() -> None:
    """The bundle is being written from now on: no signal interrupts it (and the deadline no longer fires)."""
    if _CURRENT is not None:
        _CURRENT.finishing = True
        if _CURRENT.timer is not None:
            _CURRENT.timer.cancel()


def uninstall() -> None:
    """The handlers as they were before the run (pytester runs many runs in one process)."""
    global _CURRENT
    path, _CURRENT = _CURRENT, None
    if path is None:
        return
    if path.timer is not None:
        path.timer.cancel()
    if threading.current_thread() is threading.main_thread():
        for sig, previous in path.previous.items():
            try:
                signal.signal(sig, previous)
            except (TypeError, ValueError):
                pass
