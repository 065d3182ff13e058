"""Probe of what will change on a host without anyone deciding it today: the driver's versions on disk and in use,
the NVIDIA/CUDA/kernel/toolkit packages (and their holds), a pending reboot, and what unattended-upgrades may touch."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pytest_dgxspark.probes import Command, Reading, Settings, quoted

NAME = "upkeep"

# the packages an unattended upgrade can swap under a running GPU stack (pando85/homelab#4110's blacklist)
PACKAGE_PATTERNS = ("nvidia-*", "libnvidia-*", "cuda-*", "linux-image-*", "nvidia-container-toolkit*")
CPU_PACKAGE_PATTERNS = ("linux-image-*",)  # a host without a GPU: only its kernel


def packages_command(gpu: bool) -> str:
    """dpkg-query of the packages that matter on the host (installed, held, removed), one tab-separated line each."""
    patterns = PACKAGE_PATTERNS if gpu else CPU_PACKAGE_PATTERNS
    return ("dpkg-query -W --showformat='${db:Status-Abbrev}\\t${Package}\\t${Version}\\n' "
            + " ".join(f"'{p}'" for p in patterns) + " 2>/dev/null; true")


PACKAGES = packages_command(True)
NVML_FILES = "ls -1 /usr/lib/*-linux-gnu/libnvidia-ml.so.* /usr/lib64/libnvidia-ml.so.* 2>/dev/null; true"
REBOOT = ("for f in /var/run/reboot-required /var/run/reboot-required.pkgs; do "
          "[ -e \"$f\" ] && { echo \"### $f\"; cat \"$f\"; }; done; true")
APT_CONFIG = "command -v apt-config >/dev/null && apt-config dump; true"  # APT's effective configuration
# RKE2's certificates (public parts only, never a key): the server's under server/tls, every node's under agent/
SNAPSHOT_DIR = "/var/lib/rancher/rke2/server/db/snapshots"  # RKE2's default etcd-snapshot-dir


def snapshot_listing(directory: str = SNAPSHOT_DIR) -> str:
    """`<mtime> <size> <name>` of each etcd snapshot file in `directory` (GNU find), nothing when there is none."""
    return quoted("find {} -maxdepth 1 -type f -printf '%T@ %s %f\\n' 2>/dev/null; true", directory)


RKE2_CERTS = ("for f in /var/lib/rancher/rke2/server/tls/*.crt /var/lib/rancher/rke2/agent/*.crt; do "
              "[ -f \"$f\" ] && { echo \"### $f\"; cat \"$f\"; }; done; true")


def commands(spec: Any, settings: Settings) -> tuple[Command, ...]:
    found = [Command(packages_command(spec.gpu)), Command(REBOOT), Command(APT_CONFIG), Command(RKE2_CERTS)]
    if spec.gpu:
        found.append(Command(NVML_FILES))
    if spec.role == "server":
        found.append(Command(snapshot_listing()))
    return tuple(found)


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    held: bool

    @property
    def upstream(self) -> str:
        """The upstream version (580.95.05 of 580.95.05-0ubuntu0.24.04.1; an epoch dropped)."""
        return self.version.split(":", 1)[-1].split("-", 1)[0]


def parse_packages(text: str) -> tuple[Package, ...]:
    """dpkg-query lines `<abbrev>\\t<name>\\t<version>` of installed packages (ii, hi; hi: on hold)."""
    found = []
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0][:2] in ("ii", "hi"):
            found.append(Package(parts[1].strip(), parts[2].strip(), parts[0].startswith("h")))
    return tuple(found)


def parse_sections(text: str) -> dict[str, str]:
    """`### <file>` sections (the REBOOT command) as file -> content."""
    found: dict[str, str] = {}
    for chunk in (text or "").split("### ")[1:]:
        name, _, body = chunk.partition("\n")
        found[name.strip()] = body
    return found


_APT_LINE = re.compile(r'^(?P<key>[^ ]+?)(?P<list>::)? "(?P<value>.*)";$')


def parse_apt_config(text: str) -> dict[str, Any]:
    """`apt-config dump` as key -> value (a string) or list (keys dumped as `Key:: "v";`)."""
    found: dict[str, Any] = {}
    for line in (text or "").splitlines():
        match = _APT_LINE.match(line.strip())
        if not match:
            continue
        key, value = match["key"], match["value"]
        if match["list"]:  # `Key "";` opens a list that `Key:: "v";` lines fill
            if not isinstance(found.get(key), list):
                found[key] = []
            found[key].append(value)
        elif key not in found:
            found[key] = value
    return found


_VERSION = re.compile(r"^\d+(?:\.\d+)+$")


@dataclass(frozen=True)
class Certificate:
    subject: str
    not_after: datetime.datetime
    ca: bool


def parse_certificate(pem: str) -> Certificate | None:
    """The first PEM certificate of a file (cryptography's parser), or None when it holds none."""
    from cryptography import x509

    start = (pem or "").find("-----BEGIN CERTIFICATE-----")
    if start < 0:
        return None
    try:
        cert = x509.load_pem_x509_certificate(pem[start:].encode())
    except ValueError:
        return None
    try:
        ca = bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        ca = False
    return Certificate(cert.subject.rfc4514_string(), cert.not_valid_after_utc, ca)


class Upkeep(Reading):
    """One host's packages, pending reboot, APT configuration and NVML library files."""

    @property
    def packages(self) -> Any:
        return self.answer(packages_command(bool(self.target.spec.gpu)))

    @property
    def reboot(self) -> Any:
        return self.answer(REBOOT)

    @property
    def apt_config(self) -> Any:
        return self.answer(APT_CONFIG)

    @property
    def rke2_certs(self) -> Any:
        return self.answer(RKE2_CERTS)

    @cached_property
    def certificates(self) -> dict[str, Certificate]:
        """RKE2's certificate files -> the first certificate in each (files that hold none are left out)."""
        return {path: cert for path, text in parse_sections(self.rke2_certs.stdout).items()
                if (cert := parse_certificate(text)) is not None}

    @property
    def nvml_files(self) -> Any:
        return self.answer(NVML_FILES)

    @cached_property
    def installed(self) -> tuple[Package, ...]:
        return parse_packages(self.packages.stdout)

    @cached_property
    def reboot_files(self) -> dict[str, str]:
        return parse_sections(self.reboot.stdout)

    @cached_property
    def apt(self) -> dict[str, Any]:
        return parse_apt_config(self.apt_config.stdout)

    @cached_property
    def nvml_versions(self) -> dict[str, str]:
        """libnvidia-ml.so.<version> file -> version (the real files, not the .so.1 links)."""
        found = {}
        for path in (line.strip() for line in self.nvml_files.stdout.splitlines()):
            version = path.rsplit("libnvidia-ml.so.", 1)[-1]
            if _VERSION.match(version) and version.count(".") >= 1 and version != "1":
                found[path] = version
        return found


@dataclass(frozen=True)
class Snapshot:
    name: str
    size: int
    taken: datetime.datetime


def parse_snapshots(text: str) -> tuple[Snapshot, ...]:
    """The snapshot files of a `snapshot_listing`, oldest first."""
    found = []
    for line in (text or "").splitlines():
        parts = line.split(" ", 2)
        try:
            taken = datetime.datetime.fromtimestamp(float(parts[0]), datetime.timezone.utc)
            found.append(Snapshot(parts[2].strip(), int(parts[1]), taken))
        except (ValueError, IndexError):
            continue
    return tuple(sorted(found, key=lambda s: s.taken))


def module_on_disk(host_driver_output: str) -> str | None:
    """The version modinfo gives the nvidia module on disk for the running kernel (the nvidia_driver probe's
    HOST_DRIVER_PROBE: its last version-looking line)."""
    versions = [ln.strip() for ln in (host_driver_output or "").splitlines() if _VERSION.match(ln.strip())]
    return versions[-1] if versions else None


def read(target: Any, settings: Settings) -> Upkeep:
    """The upkeep probe of one host."""
    return Upkeep(target, settings)
