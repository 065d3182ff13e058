"""The simulated DGX Spark: SSH hosts with GPU mocks, a Kubernetes API with scheduler and kubelet, scenarios.

This module is the testbed's one door: the suite outside it imports only the names below (the import test holds it);
inside, the testbed may read the site's files through `site/` and `data/`, and nothing of the suite's judgement.
Each name is imported when first asked for: a testbed process (the stand-in API server, kwokrun.py, the fault proxy)
that imports one module of the package pays for that module's imports only, not for the orchestrator's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_dgxspark.testbed.keptplane import KeptPlaneError
    from pytest_dgxspark.testbed.keptplane import load as load_kept_plane
    from pytest_dgxspark.testbed.leftovers import PREFIX as DIR_PREFIX
    from pytest_dgxspark.testbed.leftovers import LeftTestbed, claim, stop_left
    from pytest_dgxspark.testbed.orchestrator import Testbed, TestbedError
    from pytest_dgxspark.testbed.realplane import RealPlaneError
    from pytest_dgxspark.testbed.realplane import binaries as real_plane_binaries
    from pytest_dgxspark.testbed.scenario import Scenario, ScenarioError
    from pytest_dgxspark.testbed.scenario import bundled as bundled_scenarios
    from pytest_dgxspark.testbed.scenario import load as load_scenario
    from pytest_dgxspark.testbed.scenariocheck import bring_up_problems

# name -> (module of the package, its name there)
_DOOR = {
    "DIR_PREFIX": ("leftovers", "PREFIX"), "KeptPlaneError": ("keptplane", "KeptPlaneError"),
    "LeftTestbed": ("leftovers", "LeftTestbed"), "RealPlaneError": ("realplane", "RealPlaneError"),
    "Scenario": ("scenario", "Scenario"), "ScenarioError": ("scenario", "ScenarioError"),
    "Testbed": ("orchestrator", "Testbed"), "TestbedError": ("orchestrator", "TestbedError"),
    "bring_up_problems": ("scenariocheck", "bring_up_problems"), "bundled_scenarios": ("scenario", "bundled"),
    "claim": ("leftovers", "claim"), "load_kept_plane": ("keptplane", "load"), "load_scenario": ("scenario", "load"),
    "real_plane_binaries": ("realplane", "binaries"), "stop_left": ("leftovers", "stop_left"),
}

__all__ = ["DIR_PREFIX", "KeptPlaneError", "LeftTestbed", "RealPlaneError", "Scenario", "ScenarioError", "Testbed",
           "TestbedError", "bring_up_problems", "bundled_scenarios", "claim", "load_kept_plane", "load_scenario",
           "real_plane_binaries", "stop_left"]


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _DOOR[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
    globals()[name] = value
    return value
