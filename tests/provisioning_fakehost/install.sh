#!/bin/sh
# Fake RKE2 install.sh: honours INSTALL_RKE2_VERSION/TYPE/TAR_PREFIX like the real one, never starts the unit.
set -eu
[ "$(id -u)" = 0 ] || { echo "You need to be root to perform this install" >&2; exit 1; }
printf '{"cmd": "install.sh", "args": ["%s", "%s", "%s", "%s"]}\n' "${INSTALL_RKE2_VERSION:?}" "${INSTALL_RKE2_TYPE:-server}" \
  "${INSTALL_RKE2_TAR_PREFIX:-/usr/local}" "${INSTALL_RKE2_ARTIFACT_PATH:-}" >> "$RKE2_FAKE_LOG"
prefix=${INSTALL_RKE2_TAR_PREFIX:-/usr/local}
mkdir -p "$prefix/bin" "$prefix/lib/systemd/system"
# `rke2 --version` as the real binary prints it: the release with its commit, then the Go toolchain.
printf '#!/bin/sh\necho "rke2 version %s (6ce1a80e4d9c3b0f2a7e5d8c1b4a9f3e2d7c6b5a)"\necho "go version go1.24.11 X:boringcrypto"\n' \
  "$INSTALL_RKE2_VERSION" > "$prefix/bin/rke2"
chmod 0755 "$prefix/bin/rke2"
: > "$prefix/lib/systemd/system/rke2-server.service"
: > "$prefix/lib/systemd/system/rke2-agent.service"
systemctl daemon-reload
