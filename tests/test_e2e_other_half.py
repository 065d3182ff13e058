"""End to end, the other half of the bundled scenarios (tests/test_e2e.py runs the first, and says how): a file of
its own, so that `make test`'s second pytest-xdist worker runs a pool of them beside the first."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.test_e2e import bundled_half, bundled_runs, check_bundled

# slow: the suite against the bundled scenarios' testbeds (make test only; make test-fast deselects it)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path("/usr/sbin/sshd").exists(), reason="the testbed needs openssh-server (make test installs it)"
)]


@pytest.fixture(scope="module")
def scenario_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return bundled_runs(request, tmp_path_factory)


@pytest.mark.parametrize("name", bundled_half(1))
def test_the_suites_give_the_scenarios_expected_statuses_and_root_causes(scenario_runs, name):
    check_bundled(scenario_runs, name)
