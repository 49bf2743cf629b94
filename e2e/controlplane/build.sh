#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler and etcd from the Go modules pinned in
# this directory's go.mod/go.sum into $ACCELPOLICY_CACHE/bin/<version>/.
#
# A no-op when the four binaries are already there (a missing one triggers a build). Go's module and build
# caches stay at their defaults (outside the clone), so a fresh clone reuses
# them. Prints progress (a line per ~250 packages compiled) because a cold
# build takes tens of minutes on 2 cores.
#
# Usage: e2e/controlplane/build.sh            (ACCELPOLICY_CACHE defaults to ~/.cache/accelpolicy)
#        e2e/controlplane/build.sh --print-dir (print the output dir and exit)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' go.mod)"
etcd_version="$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' go.mod)"
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
  echo "build.sh: cannot read k8s.io/kubernetes or go.etcd.io/etcd/server/v3 version from $here/go.mod" >&2
  exit 2
fi
version="k8s-${k8s_version}_etcd-${etcd_version}"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
out="$cache/bin/$version"
if [[ "${1:-}" == "--print-dir" ]]; then echo "$out"; exit 0; fi

if [[ -x "$out/kube-apiserver" && -x "$out/kube-controller-manager" && -x "$out/kube-scheduler" && -x "$out/etcd" ]]; then
  echo "controlplane: binaries present in $out (nothing to do)"
  exit 0
fi
command -v go >/dev/null || { echo "build.sh: 'go' not found on PATH; install Go >= $(awk '$1=="go"{print $2}' go.mod)" >&2; exit 2; }

minor="${k8s_version#v1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

tmp="$(mktemp -d "$cache/bin/.build.XXXXXX" 2>/dev/null || { mkdir -p "$cache/bin"; mktemp -d "$cache/bin/.build.XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
echo "controlplane: building kube-apiserver + kube-controller-manager + kube-scheduler $k8s_version and etcd $etcd_version -> $out"
echo "controlplane: $(go version); GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE); a cold build takes ~17-30 min on 2 cores, ~1 min with a warm build cache"

progress() {  # $1 = label; reads `go build -v` package lines on stdin
  awk -v label="$1" -v t0="$start" '/ |^#/ { print; fflush(); next } { n++; if (n % 250 == 0) { printf "controlplane: %s: %d packages built (%ds)\n", label, n, systime()-t0; fflush() } }
       END { printf "controlplane: %s: %d packages built\n", label, n }'
}

go mod download
echo "controlplane: modules present ($(( $(date +%s) - start ))s)"
export CGO_ENABLED=0
go build -v -trimpath -ldflags "$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler 2>&1 | progress kube
echo "controlplane: kube-apiserver, kube-controller-manager, kube-scheduler done ($(( $(date +%s) - start ))s)"
go build -v -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 2>&1 | progress etcd
echo "controlplane: etcd done ($(( $(date +%s) - start ))s)"
"$tmp/kube-apiserver" --version
"$tmp/etcd" --version | sed -n 1p  # sed reads it all: head would close the pipe (SIGPIPE, exit 141 under pipefail)
mkdir -p "$out"
for b in kube-apiserver kube-controller-manager kube-scheduler etcd; do mv -f "$tmp/$b" "$out/$b"; done
printf 'k8s.io/kubernetes %s\ngo.etcd.io/etcd/server/v3 %s\n%s\n' "$k8s_version" "$etcd_version" "$(go version)" > "$out/VERSIONS"
echo "controlplane: built in $(( $(date +%s) - start ))s -> $out"
