"""The simulated DGX Spark: SSH hosts with GPU mocks, a Kubernetes API with scheduler and kubelet, scenarios.

This module is the testbed's one door: the suite outside it imports only the names below (the import test holds it);
inside, the testbed may read the site's files through `site/` and `data/`, and nothing of the suite's judgement.
"""

from __future__ import annotations

from pytest_dgxspark.testbed.leftovers import PREFIX as DIR_PREFIX
from pytest_dgxspark.testbed.leftovers import LeftTestbed, claim, stop_left
from pytest_dgxspark.testbed.orchestrator import Testbed, TestbedError
from pytest_dgxspark.testbed.realplane import RealPlaneError
from pytest_dgxspark.testbed.realplane import binaries as real_plane_binaries
from pytest_dgxspark.testbed.scenario import Scenario, ScenarioError
from pytest_dgxspark.testbed.scenario import bundled as bundled_scenarios
from pytest_dgxspark.testbed.scenario import load as load_scenario
from pytest_dgxspark.testbed.scenariocheck import bring_up_problems

__all__ = ["DIR_PREFIX", "LeftTestbed", "RealPlaneError", "Scenario", "ScenarioError", "Testbed", "TestbedError",
           "bring_up_problems", "bundled_scenarios", "claim", "load_scenario", "real_plane_binaries", "stop_left"]
