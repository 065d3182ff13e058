"""RKE2 forecast (catalog/beyond.yaml): without a recent etcd snapshot a lost disk or a bad upgrade loses the cluster
(rancher/rke2#6281), and without a copy off the node a lost disk loses the snapshots too. Advisory: it never fails the
run (unless the site sets forecast: enforce)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from pytest_dgxspark.checking import completed, unreadable
from pytest_dgxspark.judge.upkeep import etcd_s3_settings, offnode_copy_problems, snapshot_problems
from pytest_dgxspark.probes.upkeep import SNAPSHOT_DIR, Upkeep, parse_snapshots, snapshot_listing
from pytest_dgxspark.targets.connections import HostTarget


@pytest.mark.forecast("SPARK.etcd-snapshots")
def test_the_server_keeps_a_recent_etcd_snapshot_and_a_copy_off_the_node(host_target: HostTarget, upkeep_probe: Upkeep,
                                                                          rke2_config: Any, site: Any, evidence: Any,
                                                                          forecast: Any) -> None:
    if host_target.spec.role != "server":
        pytest.skip(f"{host_target.spec.name} is an agent: it keeps no etcd")
    if rke2_config.error is not None:
        unreadable(f"{rke2_config.error}: the snapshot folder, schedule and off-node copy cannot be judged",
                   target=f"ssh:{host_target.spec.name}")
    config = rke2_config.merged
    directory = str(config.get("etcd-snapshot-dir") or SNAPSHOT_DIR)
    listing = completed(upkeep_probe.answer(snapshot_listing(directory)), host_target)
    snapshots = parse_snapshots(listing.stdout)
    declared = site.vars.get("etcd_snapshot_offnode_copy")
    evidence.record("etcd snapshots", {"folder": directory, "schedule": config.get("etcd-snapshot-schedule-cron"),
                                       "s3 (config.yaml + config.yaml.d)": etcd_s3_settings(config),
                                       "off-node copy the site declares": declared,
                                       "files": [(s.name, s.size, s.taken.isoformat()) for s in snapshots]})
    found = snapshot_problems(config, snapshots, datetime.datetime.now(datetime.timezone.utc))
    found += offnode_copy_problems(config, site.vars, f"{site.root}/rke2/vars.yml")
    if found:
        forecast.advise(f"{host_target.where}: " + "; ".join(found) + f" ({directory}): a lost disk or a failed "
                        "upgrade cannot be rolled back", target=f"ssh:{host_target.spec.name}",
                        due="at the next etcd loss")
