"""Testbeds a run started and could not stop (it was SIGKILLed): each run's testbed carries its owner; a later run
finds those whose owner is gone, stops them and reports them."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

OWNER = "owner.json"
PREFIX = "dgxspark-testbed-"


@dataclass(frozen=True)
class LeftTestbed:
    """A testbed whose run is gone, and what this run did about it."""

    directory: str
    run_id: str
    owner_pid: int
    scenario: str
    state: str  # "stopped" or "stop failed: <why>"

    def as_dict(self) -> dict[str, object]:
        return {"directory": self.directory, "run_id": self.run_id, "owner_pid": self.owner_pid,
                "scenario": self.scenario, "state": self.state}


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


def claim(directory: Path, run_id: str, scenario: str) -> None:
    """Mark directory's testbed as this process's (written before the testbed starts)."""
    record = {"pid": os.getpid(), "start": start_time(os.getpid()), "run_id": run_id, "scenario": scenario}
    tmp = directory / f".{OWNER}.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(directory / OWNER)


def _owner_alive(record: dict) -> bool:
    pid = record.get("pid")
    return isinstance(pid, int) and start_time(pid) is not None and start_time(pid) == record.get("start")


def _running(directory: Path) -> bool:
    try:
        state = json.loads((directory / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return not state.get("down") and bool(state.get("pids") or state.get("hosts") or state.get("links"))


def find_left(root: Path | None = None) -> list[tuple[Path, dict]]:
    """Testbed directories under root (the temp dir) whose owning run is gone while the testbed still runs."""
    base = Path(root or tempfile.gettempdir())
    found = []
    for directory in sorted(base.glob(f"{PREFIX}*")):
        try:
            record = json.loads((directory / OWNER).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and not _owner_alive(record) and _running(directory):
            found.append((directory, record))
    return found


def stop_left(root: Path | None = None) -> list[LeftTestbed]:
    """Stop every testbed left by a run that is gone; what was found and done, for results.json and the terminal."""
    from pytest_dgxspark.testbed.orchestrator import teardown

    done = []
    for directory, record in find_left(root):
        problems = teardown(directory)
        state = "stopped" if not problems else f"stop failed: {'; '.join(problems)[:300]}"
        if not problems:
            shutil.rmtree(directory, ignore_errors=True)
        done.append(LeftTestbed(str(directory), str(record.get("run_id", "")), int(record.get("pid") or 0),
                                str(record.get("scenario", "")), state))
    return done
