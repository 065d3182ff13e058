"""The run plan: every option, ini key and environment value of a run, resolved and validated once at configure."""
from __future__ import annotations

import datetime
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from pytest_dgxspark.catalog.rules import Catalog
from pytest_dgxspark.data.pathguard import outside_links
from pytest_dgxspark.data.redact import redact_text
from pytest_dgxspark.report.results import report_dir_key
from pytest_dgxspark.site.governance import (
    ManualCheck,
    Waiver,
    load_approvers,
    load_manual_checks,
    load_waivers,
    site_digest,
)
from pytest_dgxspark.site.kubeconfig import kubeconfig_problems
from pytest_dgxspark.site.model import HostSpec, Site, SiteError, load_inventory, load_site

plan_key = pytest.StashKey["RunPlan"]()
DEFAULT_SITE = "sites/tirosh-home"
DEFAULT_CUDA_TIMEOUT_S = 300
DEFAULT_SMI_TIMEOUT_S = 30
DEFAULT_COMMAND_TIMEOUT_S = 60  # a host command's limit on the host (probes.COMMAND_TIMEOUT_S)
DEFAULT_DEADLINE_S = 3600  # the whole run (exitpath.py): fits a 16-node site with the CUDA sample's own 300 s
# The documented range of each numeric option (README "Options"): past it a value is a typo, never a wish.
RANGES_S = {"dgxspark_cuda_timeout": (10, 3600), "dgxspark_smi_timeout": (1, 600),
            "dgxspark_command_timeout": (1, 3600), "dgxspark_deadline": (10, 86400)}
RESULTS_SCHEMA = "pytest-dgxspark/results/v1"


@dataclass(frozen=True)
class RunPlan:
    """What one run will do, decided before anything touches a target."""

    site: Site
    site_source: str  # "--site", "scenario <name>", "ini dgxspark_site" or "default"
    testbed_ref: str | None
    scenario: Any
    hosts: tuple[HostSpec, ...]  # the real targets' hosts (empty for a testbed: it writes its own inventory)
    kubeconfig: Path | None
    report_dir: Path
    cuda_timeout_s: int
    smi_timeout_s: int
    handover: bool
    no_block: bool
    baseline_force: bool
    waivers: Mapping[str, Waiver]
    manual_checks: tuple[ManualCheck, ...]
    # the handover bundle's inputs (the report plugin's options)
    operator: str | None = None
    lang: str = "both"
    sign_key: Path | None = None  # checked: an SSH private key (or a .pub held by ssh-agent)
    baseline: Any = None  # report.drift.Baseline, loaded and checked
    command_timeout_s: int = DEFAULT_COMMAND_TIMEOUT_S  # a host command's limit (the gathering round follows it)
    deadline_s: int = DEFAULT_DEADLINE_S  # the whole run ends (INCOMPLETE, cause deadline) past this
    site_digest: str | None = None  # governance.site_digest of the site: a waiver applies to this site only
    notes: tuple[str, ...] = ()  # what would stop a run, shown by --dgxspark-plan (a run raises them as usage errors)
    testbed_api: str = "standin"  # --testbed-api: the testbed's workload API (standin | real)
    testbed_plane: Path | None = None  # --testbed-plane: a kept real control plane the testbed attaches to

    def __repr__(self) -> str:
        return (f"RunPlan(site={self.site.name!r} ({self.site_source}), testbed={self.testbed_ref!r}, "
                f"hosts={[h.name for h in self.hosts]!r}, report_dir={str(self.report_dir)!r})")


def listing_rules(config: pytest.Config) -> bool:
    """--dgxspark-rules: print the catalog and exit (no plan is made)."""
    return bool(config.getoption("dgxspark_rules", False))


def is_active(config: pytest.Config) -> bool:
    """A dgxspark run: --site, --testbed or --dgxspark-rules given, or paths under a suites/ folder collected."""
    if any(config.getoption(o, None) for o in ("dgxspark_site", "dgxspark_testbed", "dgxspark_rules")):
        return True
    return any("suites" in Path(str(arg).split("::")[0]).resolve().parts for arg in config.args)


def report_dir(config: pytest.Config) -> Path:
    """--report-dir, else the ini dgxspark_report_dir (default reports/), relative to the rootdir."""
    path = Path(config.getoption("dgxspark_report_dir", None) or config.getini("dgxspark_report_dir") or "reports")
    return path if path.is_absolute() else Path(config.rootpath) / path


def of(config: pytest.Config) -> RunPlan:
    """The run's plan (a UsageError outside a dgxspark run)."""
    if plan_key not in config.stash:
        raise pytest.UsageError("pytest-dgxspark fixtures need a dgxspark run (--site or --testbed, tests under suites/)")
    return config.stash[plan_key]


def _root_relative(config: pytest.Config, path: str) -> Path:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return Path(config.rootpath) / p


def _seconds(config: pytest.Config, name: str, default: int, problems: list[str]) -> int:
    """--<name> (dashes), else the ini <name>, else the default; a whole number of seconds in RANGES_S[name]."""
    option = f"--{name.replace('_', '-')}"
    value = config.getoption(name, None)
    where = option
    low, high = RANGES_S.get(name, (1, 86400))
    expected = f"expected a whole number of seconds from {low} to {high}"
    if value is None:
        raw = config.getini(name) or str(default)
        where = f"ini {name}"
        try:
            value = int(str(raw).strip())
        except ValueError:
            problems.append(f"{where}: {expected}, got {str(raw)[:40]!r}")
            return default
    if not low <= value <= high:
        problems.append(f"{where}: {expected}, got {value}")
        return default
    return int(value)


def _writable_report_dir(path: Path, problems: list[str]) -> None:
    """The report dir (or, when it does not exist yet, its nearest existing parent) accepts a new file."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(probe))
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".dgxspark-write-test-"):
            pass
    except OSError as exc:
        problems.append(f"--report-dir {path}: cannot be written ({exc.strerror or exc}); "
                        "expected a directory this user can create files in")


def _scenario(ref: str | None, problems: list[str]) -> Any:
    if not ref:
        return None
    from pytest_dgxspark.testbed import ScenarioError, bring_up_problems, load_scenario


    try:
        loaded = load_scenario(ref)
    except ScenarioError as exc:
        problems.append(f"--testbed {ref}: {exc}")
        return None
    problems.extend(f"--testbed {ref}: {problem}" for problem in bring_up_problems(loaded))
    return loaded


def available_targets(config: pytest.Config) -> str:
    """The sites under the rootdir's sites/ and the bundled scenarios, for a usage error that names what to give."""
    from pytest_dgxspark.testbed import bundled_scenarios

    sites = sorted(p.parent.name for p in (Path(config.rootpath) / "sites").glob("*/inventory.yml"))
    names = [name for name, _ in bundled_scenarios()]
    return (f"  --site sites/<name>     a real site: its inventory's hosts over SSH and its kubeconfig context "
            f"(sites here: {', '.join(sites) or 'none'})\n"
            f"  --testbed <scenario>    a simulated DGX Spark (scenarios: {', '.join(names)})\n"
            "  --dgxspark-plan         with either: print what the run would contact and write, and exit")


def no_target_given(config: pytest.Config) -> bool:
    """A dgxspark run with neither --site nor --testbed: nothing may be contacted (a real target is never implied)."""
    return not config.getoption("dgxspark_site") and not config.getoption("dgxspark_testbed")


def _site(config: pytest.Config, scenario: Any) -> tuple[Path, str]:
    """Site precedence, decided once: --site, else (for a testbed) the scenario's own site, else the ini key, else the
    bundled default. A real run always names its site (no_target_given refuses it before this)."""
    if config.getoption("dgxspark_site"):
        return _root_relative(config, config.getoption("dgxspark_site")), "--site"
    if scenario is not None and scenario.site_dir is not None:
        return Path(scenario.site_dir), f"scenario {scenario.name}"
    if config.getini("dgxspark_site"):
        return _root_relative(config, config.getini("dgxspark_site")), "ini dgxspark_site"
    return _root_relative(config, DEFAULT_SITE), "default"


def _kubeconfig(config: pytest.Config, site: Site, problems: list[str]) -> Path | None:
    """--dgxspark-kubeconfig, else the site's rke2/kubeconfig.yml, else $KUBECONFIG's first file, else ~/.kube/config."""
    option = config.getoption("dgxspark_kubeconfig")
    env = os.environ.get("KUBECONFIG", "")
    if option:
        path, where = Path(option), f"--dgxspark-kubeconfig {option}"
    elif site.kubeconfig is not None:
        path, where = site.kubeconfig, f"{site.kubeconfig}"
    elif env:
        path, where = Path(env.split(os.pathsep)[0]), f"$KUBECONFIG {env.split(os.pathsep)[0]}"
    else:
        home = Path.home() / ".kube" / "config"
        if not home.is_file():
            problems.append(f"no kubeconfig for context {site.context!r}: looked for --dgxspark-kubeconfig, "
                            f"{site.root / 'rke2' / 'kubeconfig.yml'}, $KUBECONFIG and {home}; give one of them "
                            f"(make rke2/kubeconfig SITE={site.name} writes {home})")
            return None
        path, where = home, str(home)
    if not path.is_file():
        problems.append(f"{where}: kubeconfig not found (give --dgxspark-kubeconfig or run make rke2/kubeconfig)")
        return None
    problems.extend(kubeconfig_problems(path, site.context))
    management = site.management_context
    if management and management != site.context:  # the Argo CD check opens it from the same kubeconfig
        problems.extend(f"{p} (argocd_context of {site.root}/rke2/vars.yml)"
                        for p in kubeconfig_problems(path, management))
    return path


# testinfra's own host options: the same meaning is honoured (--ssh-config, --ansible-inventory), the rest is refused
# with where its setting lives, since the hosts, their route and sudo come from the inventory (as for Ansible).
_TESTINFRA_REFUSED = {
    "hosts": "--hosts: the hosts are the inventory's (the site's inventory.yml or --dgxspark-inventory FILE)",
    "connection": "--connection: set ansible_connection (ssh, or local at the node's console) in the inventory",
    "ssh_extra_args": "--ssh-extra-args: set ansible_ssh_common_args (e.g. -o ProxyJump=bastion) in the inventory",
    "ssh_identity_file": "--ssh-identity-file: set ansible_ssh_private_key_file in the inventory, or IdentityFile "
                         "in the SSH config",
    "sudo": "--sudo: sudo follows ansible_user (root logs in as root; any other user runs sudo -n)",
    "sudo_user": "--sudo-user: sudo follows ansible_user (root logs in as root; any other user runs sudo -n)",
    "force_ansible": "--force-ansible: the suite reaches hosts over SSH itself, with the route Ansible takes",
}


def _testinfra_refused(config: pytest.Config, problems: list[str]) -> None:
    for dest, why in _TESTINFRA_REFUSED.items():
        if config.getoption(dest, None):
            problems.append(f"{why}; testinfra's option is not used by pytest-dgxspark")


def _testinfra_options(config: pytest.Config, problems: list[str]) -> tuple[str | None, str | None]:
    """(--dgxspark-inventory, --dgxspark-ssh-config), testinfra's --ansible-inventory and --ssh-config standing in
    for them; testinfra's other host options are refused naming where their setting lives."""
    found = []
    for ours, theirs in (("dgxspark_inventory", "ansible_inventory"), ("dgxspark_ssh_config", "ssh_config")):
        mine, other = config.getoption(ours, None), config.getoption(theirs, None)
        if mine and other and mine != other:
            problems.append(f"--{theirs.replace('_', '-')} {other} and --{ours.replace('_', '-')} {mine}: give one")
        found.append(mine or other)
    return found[0], found[1]


def _hosts(config: pytest.Config, site: Site, problems: list[str]) -> tuple[HostSpec, ...]:
    from pytest_dgxspark.targets.sshroute import alias_only_blocks

    inventory, ssh_config = _testinfra_options(config, problems)
    if ssh_config and not Path(ssh_config).is_file():
        problems.append(f"--dgxspark-ssh-config {ssh_config}: file not found")
        ssh_config = None
    hosts = site.hosts
    if inventory:
        if not Path(inventory).exists():
            problems.append(f"--dgxspark-inventory {inventory}: file not found")
            return ()
        try:
            hosts = load_inventory(Path(inventory), ssh_config)[1]
        except SiteError as exc:
            problems.append(str(exc))
            return ()
    elif ssh_config:
        hosts = tuple(replace(h, ssh_config=ssh_config) for h in site.hosts)
    for host in hosts:
        if host.connection == "ssh":
            problems.extend(alias_only_blocks(host.ssh_config, host.name, host.address))
    return hosts


def _bundle_inputs(config: pytest.Config, problems: list[str]) -> tuple[Path | None, Any]:
    """--dgxspark-sign (a usable key) and --dgxspark-baseline (loaded), each problem named by its option."""
    from pytest_dgxspark.report.drift import BaselineError, load_baseline
    from pytest_dgxspark.report.signing import key_problem

    key = config.getoption("dgxspark_sign", None)
    sign_key = Path(key).expanduser() if key else None
    problem = key_problem(sign_key) if sign_key is not None else None
    if problem:
        problems.append(problem)
    baseline = None
    if config.getoption("dgxspark_baseline", None):
        try:
            baseline = load_baseline(Path(config.getoption("dgxspark_baseline")).expanduser())
        except BaselineError as exc:
            problems.append(str(exc))
    return sign_key, baseline


def _baseline_problems(baseline: Any, site: Site, force: bool) -> list[str]:
    if baseline is None or force:
        return []
    run = baseline.results.get("run") or {}
    problems = []
    if baseline.results.get("schema") != RESULTS_SCHEMA:
        problems.append(f"--dgxspark-baseline {baseline.path}: schema {baseline.results.get('schema')!r}, this run "
                        f"writes {RESULTS_SCHEMA!r}; give a baseline of this schema or --dgxspark-baseline-force")
    if run.get("site") != site.name:
        problems.append(f"--dgxspark-baseline {baseline.path}: a run of site {run.get('site')!r}, this run checks "
                        f"{site.name!r}; give a baseline of this site or --dgxspark-baseline-force")
    return problems


def _testbed_api(config: pytest.Config, testbed_ref: str | None, problems: list[str]) -> str:
    """--testbed-api: only with --testbed; `real` needs the control plane's binaries (checked before any start)."""
    api = config.getoption("dgxspark_testbed_api", None)
    if api is None:
        return "standin"
    if not testbed_ref:
        problems.append(f"--testbed-api {api} needs --testbed NAME (it chooses the testbed's API, not a site's)")
    elif api == "real":
        from pytest_dgxspark.testbed import RealPlaneError, real_plane_binaries

        try:
            real_plane_binaries()
        except RealPlaneError as exc:
            problems.append(f"--testbed-api real: {exc}")
    return api


def _testbed_plane(config: pytest.Config, testbed_api: str, problems: list[str]) -> Path | None:
    """--testbed-plane DIR: only with --testbed-api real, and a kept plane must be up in DIR (checked before any start)."""
    given = config.getoption("dgxspark_testbed_plane", None)
    if given is None:
        return None
    if testbed_api != "real":
        problems.append(f"--testbed-plane {given} needs --testbed-api real (a kept plane is a real control plane)")
        return None
    from pytest_dgxspark.testbed import KeptPlaneError, load_kept_plane

    try:
        return load_kept_plane(Path(given)).directory
    except KeptPlaneError as exc:
        problems.append(f"--testbed-plane: {exc}")
        return None


def _redacted_note(check: ManualCheck, root: Path) -> ManualCheck:
    """A manual check whose free-text note went through the redaction layer (tokens by shape, URL credentials), the
    values it removed remembered for the bundle scan: the note reaches results.json, the summary and the PDF."""
    if not check.note:
        return check
    return replace(check, note=redact_text(check.note, f"{root}/manual-checks.yml {check.id}.note", remember=True))


def _run_date(config: pytest.Config, problems: list[str]) -> None:
    """--dgxspark-run-date is a calendar day (the run_date fixture reads it; refused here, before any target)."""
    given = config.getoption("dgxspark_run_date", None)
    if given:
        try:
            datetime.date.fromisoformat(str(given))
        except ValueError:
            problems.append(f"--dgxspark-run-date {given!r}: expected a calendar day as YYYY-MM-DD (e.g. 2027-02-28)")


def resolve(config: pytest.Config, catalog: Catalog, planning: bool = False) -> RunPlan:
    """The plan of this run; one UsageError lists every problem (file or option, key, what was expected). `planning`
    (--dgxspark-plan): a missing kubeconfig is a note of the printed plan instead."""
    problems: list[str] = []
    notes: list[str] = []
    if no_target_given(config):
        raise pytest.UsageError("no target given: pytest-dgxspark never implies a real site; give one of\n"
                                + available_targets(config))
    testbed_ref = config.getoption("dgxspark_testbed")
    if testbed_ref:
        clash = [o for o, d in (("--dgxspark-kubeconfig", "dgxspark_kubeconfig"),
                                ("--dgxspark-inventory", "dgxspark_inventory"),
                                ("--dgxspark-ssh-config", "dgxspark_ssh_config"),
                                ("--ansible-inventory", "ansible_inventory"), ("--ssh-config", "ssh_config"))
                 if config.getoption(d, None)]
        if clash:
            problems.append(f"--testbed {testbed_ref} supplies its own kubeconfig, inventory and ssh_config: "
                            f"drop {' and '.join(clash)} (or drop --testbed to check a real site)")
    _testinfra_refused(config, problems)
    testbed_api = _testbed_api(config, testbed_ref, problems)
    testbed_plane = _testbed_plane(config, testbed_api, problems)
    cuda = _seconds(config, "dgxspark_cuda_timeout", DEFAULT_CUDA_TIMEOUT_S, problems)
    smi = _seconds(config, "dgxspark_smi_timeout", DEFAULT_SMI_TIMEOUT_S, problems)
    command = _seconds(config, "dgxspark_command_timeout", DEFAULT_COMMAND_TIMEOUT_S, problems)
    deadline = _seconds(config, "dgxspark_deadline", DEFAULT_DEADLINE_S, problems)
    _run_date(config, problems)
    reports = report_dir(config)
    _writable_report_dir(reports, problems)
    config.stash[report_dir_key] = reports  # the bundle's results.py takes it from here
    sign_key, baseline = _bundle_inputs(config, problems)
    scenario = _scenario(testbed_ref, problems)
    site_path, source = _site(config, scenario)
    site: Site | None = None
    escaping = outside_links(site_path, f"site {site_path}")  # no site file may be read from outside the site
    problems.extend(escaping)
    try:
        site = None if escaping else load_site(site_path)
    except SiteError as exc:
        problems.append(str(exc))
    hosts: tuple[HostSpec, ...] = ()
    kubeconfig = None
    waivers: Mapping[str, Waiver] = {}
    manual: list[ManualCheck] = []
    force = bool(config.getoption("dgxspark_baseline_force", False))
    if site is not None:
        if not testbed_ref:
            hosts = _hosts(config, site, problems)
            # --collect-only dials nothing either: a missing kubeconfig stops only a run
            collecting = bool(getattr(config.option, "collectonly", False))
            kubeconfig = _kubeconfig(config, site, notes if planning or collecting else problems)
        approvers: dict = {}
        try:
            approvers = load_approvers(site.root / "approvers.yml")
        except SiteError as exc:
            problems.append(str(exc))
        for load in (lambda: load_waivers(site.root / "waivers.yml", catalog.rules, approvers),
                     lambda: load_manual_checks(site.root / "manual-checks.yml")):
            try:
                loaded = load()
            except SiteError as exc:
                problems.append(str(exc))
                continue
            if isinstance(loaded, dict):
                waivers = loaded
            else:
                manual = [_redacted_note(check, site.root) for check in loaded]
        problems.extend(_baseline_problems(baseline, site, force))
    if problems or site is None:
        # a usage error names the file and key, never a value: every problem through the redaction layer too
        raise pytest.UsageError("invalid run input:\n" + "\n".join(redact_text(p, "usage error") for p in problems))
    return RunPlan(
        site=site, site_source=source, testbed_ref=testbed_ref or None, scenario=scenario, hosts=hosts,
        kubeconfig=kubeconfig, report_dir=reports, cuda_timeout_s=cuda, smi_timeout_s=smi,
        handover=bool(config.getoption("dgxspark_handover")), no_block=bool(config.getoption("dgxspark_no_block")),
        baseline_force=force, waivers=waivers, manual_checks=tuple(manual),
        operator=config.getoption("dgxspark_operator", None), lang=config.getoption("dgxspark_lang", None) or "both",
        sign_key=sign_key, baseline=baseline, command_timeout_s=command, deadline_s=deadline, notes=tuple(notes),
        site_digest=site_digest(site.root), testbed_api=testbed_api, testbed_plane=testbed_plane,
    )


def _host_line(host: HostSpec) -> str:
    """One host of the plan: alias, what is dialled (address, port), as whom (root or sudo), SSH config, known_hosts."""
    from pytest_dgxspark.targets.sshroute import SshRouteError, resolved, route

    role = f"{host.role}, {'GPU' if host.gpu else 'CPU-only'}"
    if host.connection == "local":
        return f"{host.name} ({role}): local (ansible_connection: local), as {os.environ.get('USER') or 'this user'}"
    try:
        r = route(host)
        ssh = resolved(r)
    except SshRouteError as exc:
        return f"{host.name} ({role}): {exc}"
    one = lambda key, default="none": (ssh.get(key) or [default])[0]  # noqa: E731
    user = one("user", "?")
    proxy = one("proxyjump") if one("proxyjump") != "none" else one("proxycommand")
    known = " ".join(v for key in ("userknownhostsfile", "globalknownhostsfile") for v in ssh.get(key, []))
    return (f"{host.name} ({role}): ssh {user}@{one('hostname', r.destination)} port {one('port', '22')} "
            f"({'root' if user == 'root' else 'sudo -n as ' + user}); ssh config: {r.config or '~/.ssh/config'}; "
            f"known_hosts: {known}; proxy: {proxy}; host keys: "
            + ("checked (an unknown or changed key stops the run)" if one("stricthostkeychecking") in ("ask", "true", "yes")
               else f"StrictHostKeyChecking {one('stricthostkeychecking')} (set in the SSH config)"))


def describe(plan: RunPlan) -> list[str]:
    """The run plan as printed before a real run and by --dgxspark-plan: what will be contacted and written. Files are
    read (ssh -G applies the SSH config); nothing is dialled."""
    from pytest_dgxspark.site.kubeconfig import context_server

    lines = [f"dgxspark: run plan (nothing contacted yet): site {plan.site.name} ({plan.site_source}: {plan.site.root})",
             f"  site digest (a waiver's site_digest): {plan.site_digest}"]
    if plan.testbed_ref:
        lines.append(f"  targets: the simulated DGX Spark of scenario {plan.testbed_ref} (SIMULATED): its hosts, "
                     "kubeconfig and ssh_config are written when it starts; no site address is dialled")
    else:
        lines.append(f"  hosts ({len(plan.hosts)}, over SSH with BatchMode, the route Ansible takes):")
        lines.extend(f"    {_host_line(h)}" for h in plan.hosts)
        kubeconfig = plan.kubeconfig
        for label, context in (("Kubernetes API", plan.site.context), ("management API", plan.site.management_context)):
            if context is None:
                lines.append(f"  {label}: no context (rke2/vars.yml names no argocd_context): not contacted")
                continue
            if kubeconfig is None:
                lines.append(f"  {label}: context {context}: no kubeconfig found")
                continue
            server = context_server(kubeconfig, context)
            lines.append(f"  {label}: context {context} -> {server or 'no server in the kubeconfig'} "
                         f"(kubeconfig {kubeconfig})")
        lines.append("  written on the cluster: namespace dgxspark-cuda-<run id> with the CUDA sample pod "
                     f"({plan.site.cuda_sample_image}) and a Lease, then dgxspark-cuda-<run id>-nogpu, -onegpu (and -sharing where the site time-slices GPUs) with "
                     "the GPU isolation probe pods (the same image, /bin/sh -c 'ls /dev/nvidia*; nvidia-smi -L') and "
                     "their Leases; each deleted after its check, also on failure and Ctrl-C; nothing else is written on "
                     "a target")
    lines.append(f"  written here: {plan.report_dir}/<run id>/ (the bundle) and {plan.report_dir}/latest")
    lines.extend(f"  a run would stop here: {note}" for note in plan.notes)
    if plan.waivers:
        lines.append(f"  waivers: {', '.join(sorted(plan.waivers))} ({plan.site.root / 'waivers.yml'})")
    return lines
