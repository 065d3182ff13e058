"""`dgxspark-testbed up|down|list|plane`: start, stop and list simulated DGX Spark testbeds, and kept control planes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_dgxspark.testbed import scenario as scenarios
from pytest_dgxspark.testbed.orchestrator import Testbed, TestbedError, teardown


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgxspark-testbed", description="A simulated DGX Spark (SIMULATED; never a handover).")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a testbed and return; daemons keep running until `down`")
    up.add_argument("scenario", help="a bundled scenario name (see `list`) or a scenario directory / scenario.yaml")
    up.add_argument("--dir", required=True, type=Path, help="directory for kubeconfig, inventory.yml, ssh_config and state")
    up.add_argument("--site", type=Path, default=None, help="site directory (default: the scenario's own site/, else sites/tirosh-home)")
    up.add_argument("--api", choices=("standin", "real"), default="standin",
                    help="the workload cluster's API: the Python stand-in (default) or the real control plane "
                         "(kube-apiserver, etcd, kube-scheduler, kwok; built by `make controlplane`)")
    up.add_argument("--plane", type=Path, default=None,
                    help="with --api real: attach to the kept control plane in this directory (`plane up`) instead of "
                         "starting one; `down` frees it for the next testbed")
    down = sub.add_parser("down", help="stop everything the testbed in DIR started (idempotent)")
    down.add_argument("--dir", required=True, type=Path)
    sub.add_parser("list", help="name the bundled scenarios with their one-line description")
    plane = sub.add_parser("plane", help="a real control plane kept across testbeds (keptplane.py): up or down")
    plane.add_argument("action", choices=("up", "down"))
    plane.add_argument("--dir", required=True, type=Path, help="the kept plane's directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        found = scenarios.bundled()
        width = max((len(name) for name, _ in found), default=0)
        for name, description in found:
            print(f"{name.ljust(width)}  {description}")
        return 0
    if args.command == "plane":
        from pytest_dgxspark.testbed import keptplane

        if args.action == "down":
            problems = keptplane.stop(args.dir)
            for problem in problems:
                print(f"dgxspark-testbed plane down: {problem}", file=sys.stderr)
            print(f"kept control plane in {args.dir.resolve()} is down")
            return 1 if problems else 0
        try:
            kept = keptplane.start(args.dir)
        except (keptplane.KeptPlaneError, keptplane.realplane.RealPlaneError) as exc:
            print(f"dgxspark-testbed plane up: {exc}", file=sys.stderr)
            return 2
        print(f"kept control plane is up in {kept.directory} (https://{kept.address}:6443)")
        print(f"  use with:   dgxspark-testbed up SCENARIO --api real --plane {kept.directory}, or pytest suites "
              f"--testbed SCENARIO --testbed-api real --testbed-plane {kept.directory}")
        print(f"  stop with:  dgxspark-testbed plane down --dir {kept.directory}")
        return 0
    if args.command == "down":
        problems = teardown(args.dir)
        for problem in problems:
            print(f"dgxspark-testbed down: {problem}", file=sys.stderr)
        print(f"testbed in {args.dir.resolve()} is down")
        return 1 if problems else 0
    try:
        if args.plane is not None and args.api != "real":
            print("dgxspark-testbed up: --plane needs --api real (a kept plane is a real control plane)", file=sys.stderr)
            return 2
        testbed = Testbed(args.scenario, args.dir, args.site, api=args.api, plane=args.plane).up()
    except (TestbedError, scenarios.ScenarioError) as exc:
        print(f"dgxspark-testbed up: {exc}", file=sys.stderr)
        return 2
    print(f"testbed {testbed.scenario.name} is up (SIMULATED{', real control plane' if testbed.api == 'real' else ''})")
    print(f"  kubeconfig: {testbed.kubeconfig} (contexts: {', '.join(f'{k}={v}' for k, v in testbed.contexts.items())})")
    print(f"  inventory:  {testbed.inventory}")
    print(f"  ssh_config: {testbed.ssh_config}")
    print(f"  stop with:  dgxspark-testbed down --dir {testbed.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
