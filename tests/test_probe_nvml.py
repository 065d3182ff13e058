"""The NVML probe's parser: the JSON line the ctypes probe prints."""

from __future__ import annotations

import pytest

from pytest_dgxspark.probes import nvml as p


def test_nvml_probe_result_takes_last_json_line() -> None:
    assert p.nvml_probe_result('warning\n{"init": 0, "count": 1}\n') == {"init": 0, "count": 1}
    with pytest.raises(ValueError):
        p.nvml_probe_result("Traceback ...")
