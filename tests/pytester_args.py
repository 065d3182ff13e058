"""What the pytester-based plugin tests pass to a run, and a host check's SSH fault, shared by those tests.

The site is the bundled one (its vars and manifests); no test here reaches its hosts: their checks are stand-ins."""
from __future__ import annotations

SITE_ARGS = ("--site", "sites/tirosh-home", "--report-dir", "out", "-p", "no:cacheprovider")
# A stand-in host check's body: the refused SSH connection the real connection layer raises (never a connection).
SSH_FAULT = ("raise TargetError('gpu-01 (10.0.0.21:22): cannot read the host over SSH: ' + SSH_CAUSES['refused'].meaning,"
             " target='ssh:gpu-01', cause=SSH_CAUSES['refused'])")
