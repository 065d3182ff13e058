"""Whether the real control plane can be started here, and if not, the one line that says why (a visible skip)."""
from __future__ import annotations

import inspect
import os
from pathlib import Path


def why_not() -> str | None:
    """None when `Testbed(..., api="real")` can run; else why not (not landed, not built, not root)."""
    try:
        from pytest_dgxspark.testbed import realplane
        from pytest_dgxspark.testbed.orchestrator import Testbed
    except ImportError:
        return "the real control plane (testbed/realplane.py, issue 17 points 1-2) is not in this tree"
    if "api" not in inspect.signature(Testbed.__init__).parameters:
        return "Testbed has no api= (the real control plane is not wired into the testbed here)"
    try:
        realplane.binaries()
    except realplane.RealPlaneError as exc:
        return str(exc)
    if os.geteuid() != 0 or not Path("/usr/sbin/sshd").exists():
        return "the testbed needs root and /usr/sbin/sshd"
    return None
