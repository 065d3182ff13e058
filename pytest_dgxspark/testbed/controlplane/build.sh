#!/usr/bin/env bash
# Build the real control plane (kube-apiserver, kube-scheduler, kube-controller-manager, etcd, kwok) from this folder's go.mod files into
# an ignored cache folder, once: a later run whose go.mod/go.sum/flags are unchanged reuses the binaries.
# Never fails `make setup`: without Go, or when a build fails, it prints ONE line saying so and exits 0.
#   DGXSPARK_CONTROLPLANE_BIN   where the binaries go (default <repo>/.cache/controlplane/bin)
#   DGXSPARK_CONTROLPLANE_NICE  niceness of the build (default 10: the build shares the machine)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${DGXSPARK_CONTROLPLANE_BIN:-$root/.cache/controlplane/bin}
nice_n=${DGXSPARK_CONTROLPLANE_NICE:-10}
log="$(dirname "$bin")/build.log"
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:-} -buildvcs=false"

if ! command -v go >/dev/null 2>&1; then
  echo "controlplane: NOT BUILT: no Go toolchain on PATH (needs go >= 1.24); --testbed-api real is unavailable, the rest runs on the Python stand-in"
  exit 0
fi
mkdir -p "$bin"
: >>"$log"
exec 9>"$bin/.lock"
if ! flock -n 9; then  # another `make setup` of this checkout is building: it says when it is done
  echo "controlplane: another build of $bin is running (see $log); not starting a second one"
  exit 0
fi

mod_version() {  # the version go.mod $1 requires of module $2
  awk -v m="$2" '$1 == "require" && $2 == m {print $3} $1 == m && $2 ~ /^v/ {print $2}' "$here/$1/go.mod" | head -n 1
}

kube_version=$(mod_version kubernetes k8s.io/kubernetes)          # v1.34.N
kube_minor=$(echo "$kube_version" | cut -d. -f2)
git_version="${kube_version}+rke2r1"                              # what RKE2 of that release says on /version
kwok_version=$(mod_version kwok sigs.k8s.io/kwok)
etcd_version=$(mod_version etcd go.etcd.io/etcd/server/v3)
vpkg=k8s.io/component-base/version
kube_ldflags="-s -w -X $vpkg.gitVersion=$git_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$kube_minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

# tool folder | binaries | packages | ldflags
build() {
  local dir=$1 outs=$2 pkgs=$3 ldflags=$4
  local stamp key missing=0 b
  key=$( { grep -v '^[[:space:]]*//' "$here/$dir/go.mod"; cat "$here/$dir/go.sum"; echo "$ldflags"; go env GOVERSION GOARCH; } \
        | sha256sum | cut -c1-16)  # comments in go.mod change nothing built
  stamp="$bin/.$dir.stamp"
  for b in $outs; do [ -x "$bin/$b" ] || missing=1; done
  if [ $missing -eq 0 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
    echo "controlplane: $outs: reused ($bin)"
    return 0
  fi
  echo "controlplane: building $outs from $dir/go.mod (a cold build downloads and compiles for minutes; log: $log)"
  local start=$SECONDS
  ( while sleep 60; do echo "controlplane:   ... still building $outs ($((SECONDS - start)) s)"; done ) &
  local ticker=$!
  # shellcheck disable=SC2086
  local out="$bin/"
  [ "$(echo $outs | wc -w)" -eq 1 ] && out="$bin/$outs"  # one package: name the file (etcd's package is .../server/v3)
  (cd "$here/$dir" && nice -n "$nice_n" go build -trimpath -ldflags "$ldflags" -o "$out" $pkgs) >>"$log" 2>&1
  local rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null
  if [ $rc -ne 0 ]; then
    echo "controlplane: NOT BUILT: $outs: $(grep -v '^\s*$' "$log" | tail -n 1); --testbed-api real is unavailable, the rest runs on the Python stand-in (see $log)"
    return 1
  fi
  echo "$key" >"$stamp"
  echo "controlplane: built $outs in $((SECONDS - start)) s"
}

build etcd "etcd" "go.etcd.io/etcd/server/v3" "-s -w" || exit 0
build kubernetes "kube-apiserver kube-scheduler kube-controller-manager" \
  "k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager" \
  "$kube_ldflags" || exit 0
build kwok "kwok" "sigs.k8s.io/kwok/cmd/kwok" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" || exit 0
printf '{"kubernetes": "%s", "gitVersion": "%s", "etcd": "%s", "kwok": "%s"}\n' \
  "$kube_version" "$git_version" "$etcd_version" "$kwok_version" >"$bin/versions.json"
echo "controlplane: ready in $bin (kube-apiserver $git_version, etcd $etcd_version, kwok $kwok_version)"
