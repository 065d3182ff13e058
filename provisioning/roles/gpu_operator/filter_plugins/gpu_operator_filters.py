"""Filters of the gpu_operator role: the preflight's verdict from the suite's results.json."""
from __future__ import annotations

from typing import Any

# recorded: an informational rule, read and recorded (never "passed"); anything else stops the apply
_GOOD = {"passed", "waived", "not-applicable", "recorded"}


def gpu_operator_preflight_failures(results: dict[str, Any], layers: list[str]) -> list[str]:
    """`<rule> (<status>): <first message>` for every rule of `layers` that did not pass, in catalog order."""
    problems = []
    for rule in results.get("rules") or []:
        if rule.get("layer") not in layers or rule.get("status") in _GOOD:
            continue
        message = next((t.get("message") for t in rule.get("tests") or [] if t.get("message")), "")
        first = (message or "").strip().splitlines()[0][:200] if message else "no test message"
        problems.append(f"{rule.get('id')} ({rule.get('status')}): {first}")
    return problems


def gpu_operator_preflight_checked(results: dict[str, Any], layers: list[str]) -> list[str]:
    """The rules of `layers` the preflight judged (passed, waived or not applicable)."""
    return [r.get("id") for r in results.get("rules") or [] if r.get("layer") in layers and r.get("status") in _GOOD]


class FilterModule:
    """Ansible filter plugin entry point."""

    def filters(self) -> dict[str, Any]:
        return {"gpu_operator_preflight_failures": gpu_operator_preflight_failures,
                "gpu_operator_preflight_checked": gpu_operator_preflight_checked}
