"""Probe of what the host is: OS and DGX release, kernel, architecture, and the testbed's identity file."""

from __future__ import annotations

from typing import Any

from pytest_dgxspark.probes import Command, Settings

NAME = "system"

OS_RELEASE = "cat /etc/os-release"
DGX_RELEASE = "cat /etc/dgx-release 2>/dev/null || true"
KERNEL = "uname -r"
ARCH = "uname -m"
PROVENANCE_TIMEOUT_S = 30
# A testbed host names its scenario in this file; a real DGX Spark never has it (identity.py reads the answer).
IDENTITY_FILE = "/etc/dgxspark-testbed"
IDENTITY = f"cat {IDENTITY_FILE} 2>/dev/null || true"
IDENTITY_TIMEOUT_S = 15
# The host's machine identity, compared with its Node's nodeInfo.machineID for a handover (identity.py).
MACHINE_ID = "cat /etc/machine-id 2>/dev/null || true"


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    return (
        Command(IDENTITY, IDENTITY_TIMEOUT_S),
        Command(MACHINE_ID, IDENTITY_TIMEOUT_S),
        *(Command(text, PROVENANCE_TIMEOUT_S) for text in (OS_RELEASE, DGX_RELEASE, KERNEL, ARCH)),
    )


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value pairs of /etc/os-release (quotes removed)."""
    result = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            result[key.strip()] = value.strip().strip("'\"")
    return result
