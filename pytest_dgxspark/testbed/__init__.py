"""The simulated DGX Spark: SSH hosts with GPU mocks, a Kubernetes API with scheduler and kubelet, scenarios.

This module is the testbed's one door: the suite outside it imports only the names below (the import test holds it);
inside, the testbed may read the site's files through `site/` and `data/`, and nothing of the suite's judgement.
"""

from __future__ import annotations

from pytest_dgxspark.testbed.orchestrator import Testbed, TestbedError
from pytest_dgxspark.testbed.scenario import Scenario, ScenarioError
from pytest_dgxspark.testbed.scenario import load as load_scenario

__all__ = ["Scenario", "ScenarioError", "Testbed", "TestbedError", "load_scenario"]
