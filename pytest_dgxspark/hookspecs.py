"""Hooks other plugins implement to take part in a pytest-dgxspark run."""
from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_dgxspark_results(config: pytest.Config, results: dict[str, Any]) -> None:
    """Add to the run's results (e.g. drift against a baseline) just before results.json is written."""
