"""The simulated DGX Spark: SSH hosts with GPU mocks, a Kubernetes API with scheduler and kubelet, scenarios."""

from __future__ import annotations

from pytest_dgxspark.testbed.orchestrator import Testbed, TestbedError
from pytest_dgxspark.testbed.scenario import Scenario, ScenarioError

__all__ = ["Scenario", "ScenarioError", "Testbed", "TestbedError"]
