"""dgxspark-report show DIR prints a saved bundle again; drift names each change (what, old, new, node)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgxspark.report.closing import block_lines, drift_lines
from tests.pytester_args import SITE_ARGS

REPORT = Path(sys.executable).with_name("dgxspark-report")


@pytest.mark.slow
def test_show_prints_the_verdict_root_causes_rule_table_of_a_saved_bundle(pytester, suite):
    suite("host", "@pytest.mark.rule('ADR-0002.host-driver')\ndef test_driver():\n    assert False, 'no nvidia module'\n\n"
                  "@pytest.mark.rule('ADR-0002.host-nvml')\ndef test_nvml():\n    pass\n")
    run = pytester.runpytest(*SITE_ARGS)
    bundle = (pytester.path / "out" / "latest").resolve()
    proc = subprocess.run([str(REPORT), "show", str(pytester.path / "out" / "latest")], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith(f"run {bundle.name} of site tirosh-home, started ")
    closing = [ln for ln in run.outlines if ln.startswith(("dgxspark: REJECTED", "  root causes", "    ADR-0002.host-driver"))]
    assert closing and all(line in out for line in closing), (closing, out)  # what the run's closing block said
    assert "rules:" in out
    table = out[out.index("rules:") + 1:]
    assert len([ln for ln in table if ln.strip().startswith("ADR-")]) == 30
    driver = next(ln for ln in table if ln.strip().startswith("ADR-0002.host-driver "))
    assert driver.split() == ["ADR-0002.host-driver", "host", "failed"]
    nvml = next(ln for ln in table if ln.strip().startswith("ADR-0002.host-nvml "))
    assert nvml.split() == ["ADR-0002.host-nvml", "host", "blocked", "blocked", "by", "ADR-0002.host-driver"]


@pytest.mark.slow
def test_show_of_a_folder_without_results_json_fails_naming_it(tmp_path):
    proc = subprocess.run([str(REPORT), "show", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert f"FAILED: {tmp_path}/results.json: " in proc.stderr


DRIFT = {"baseline": {"run_id": "20261201T100000Z-aaaaaa"}, "compared_rules": ["ADR-0002.host-driver"],
         "status_changes": [{"rule": "ADR-0002.host-driver", "from": "passed", "to": "failed"}],
         "provenance": [{"node": "gpu-01", "key": "nvidia_driver", "from": "580.65.06", "to": "580.82.07"},
                        {"node": None, "key": "kubernetes_version", "from": "v1.31.4+rke2r1", "to": "v1.32.1+rke2r1"}]}


def test_drift_names_each_change_with_what_old_new_and_node():
    assert drift_lines(DRIFT) == ["ADR-0002.host-driver: passed -> failed",
                                  "gpu-01: nvidia_driver: 580.65.06 -> 580.82.07",
                                  "cluster: kubernetes_version: v1.31.4+rke2r1 -> v1.32.1+rke2r1"]
    lines = block_lines({"verdict": "REJECTED", "rules": [], "drift": DRIFT}, None)
    at = lines.index("  drift: 1 status changes, 2 provenance changes over 1 rules judged in both runs")
    assert lines[at + 1:at + 4] == ["    ADR-0002.host-driver: passed -> failed",
                                    "    gpu-01: nvidia_driver: 580.65.06 -> 580.82.07",
                                    "    cluster: kubernetes_version: v1.31.4+rke2r1 -> v1.32.1+rke2r1"]
