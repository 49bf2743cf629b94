#!/usr/bin/env bash
# Build the programs of the offline kind cluster from their pinned Go modules / sources, outside the clone:
#   kind                              sigs.k8s.io/kind at the version in versions.txt (unmodified, `go install`)
#   kubelet kubeadm kubectl kube-proxy  k8s.io/kubernetes at the version of e2e/controlplane/go.mod (kube/go.mod)
#   coredns                           github.com/coredns/coredns (coredns/go.mod, cluster-only plugin set)
#   pause                             kubernetes' build/pause/linux/pause.c from the same module, static
# kube-apiserver, kube-controller-manager, kube-scheduler and etcd come from e2e/controlplane/build.sh.
#
# Usage: e2e/kind/build-tools.sh          build what is missing (no-op when built), print the dirs
#        e2e/kind/build-tools.sh --print  print "name path" per program and exit (nothing built)
# Go's module and build caches stay at their defaults (shared with e2e/controlplane), so a warm run is fast.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
export ACCELPOLICY_CACHE="$cache"

pin() { awk -v k="$1" '$1==k {print $3; exit}' "$here/versions.txt"; }
modver() { awk -v m="$1" '$1==m && $2 ~ /^v/ {print $2; exit}' "$2"; }
kind_version="$(pin kind)"
k8s_version="$(modver k8s.io/kubernetes "$repo/e2e/controlplane/go.mod")"
k8s_node_version="$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3; exit}' "$here/kube/go.mod")"
coredns_version="$(awk '$1=="require" && $2=="github.com/coredns/coredns" {print $3; exit}' "$here/coredns/go.mod")"
if [[ -z "$kind_version" || -z "$k8s_version" || -z "$coredns_version" ]]; then
  echo "build-tools.sh: cannot read the pins (versions.txt kind, e2e/controlplane/go.mod k8s.io/kubernetes, coredns/go.mod)" >&2; exit 2
fi
if [[ "$k8s_node_version" != "$k8s_version" ]]; then
  echo "build-tools.sh: e2e/kind/kube/go.mod pins k8s.io/kubernetes $k8s_node_version but e2e/controlplane/go.mod pins $k8s_version; make them equal (kubelet and the control plane must match)" >&2
  exit 2
fi
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
pause_version="$(grep -oE 'PauseVersion = "[^"]+"' "$(go env GOMODCACHE 2>/dev/null || echo /nonexistent)/k8s.io/kubernetes@$k8s_version/cmd/kubeadm/app/constants/constants.go" 2>/dev/null | cut -d'"' -f2 || true)"

kind_dir="$cache/bin/kind-$kind_version"
node_dir="$cache/bin/k8s-node-$k8s_version"
coredns_dir="$cache/bin/coredns-$coredns_version"
pause_dir="$cache/bin/pause-$k8s_version"
cp_dir="$(bash "$repo/e2e/controlplane/build.sh" --print-dir)"

if [[ "${1:-}" == "--print" ]]; then
  printf '%s %s\n' kind "$kind_dir/kind" kubelet "$node_dir/kubelet" kubeadm "$node_dir/kubeadm" kubectl "$node_dir/kubectl" \
    kube-proxy "$node_dir/kube-proxy" coredns "$coredns_dir/coredns" pause "$pause_dir/pause" \
    kube-apiserver "$cp_dir/kube-apiserver" kube-controller-manager "$cp_dir/kube-controller-manager" \
    kube-scheduler "$cp_dir/kube-scheduler" etcd "$cp_dir/etcd"
  exit 0
fi

command -v go >/dev/null || { echo "build-tools.sh: 'go' not found on PATH" >&2; exit 2; }
start=$(date +%s)
say() { echo "kind-tools: $* ($(( $(date +%s) - start ))s)"; }
progress() {  # $1 = label; reads `go build -v` package lines on stdin, prints one line per 250 packages
  awk -v label="$1" '/ |^#/ { print; fflush(); next } { n++; if (n % 250 == 0) { printf "kind-tools: %s: %d packages built\n", label, n; fflush() } }
       END { printf "kind-tools: %s: %d packages built\n", label, n }'
}
export CGO_ENABLED=0

# 1. kube-apiserver, kube-controller-manager, kube-scheduler, etcd (no-op when e2e/controlplane built them).
bash "$repo/e2e/controlplane/build.sh"

# 2. kind, unmodified, from its own go.mod.
if [[ -x "$kind_dir/kind" ]]; then say "kind $kind_version present in $kind_dir"
else
  say "building kind $kind_version"
  mkdir -p "$kind_dir"
  GOBIN="$kind_dir" go install -v -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$kind_version" 2>&1 | progress kind
  say "kind built: $("$kind_dir/kind" version)"
fi

# 3. kubelet, kubeadm, kubectl, kube-proxy (same k8s.io/kubernetes as the control plane).
if [[ -x "$node_dir/kubelet" && -x "$node_dir/kubeadm" && -x "$node_dir/kubectl" && -x "$node_dir/kube-proxy" ]]; then
  say "kubelet, kubeadm, kubectl, kube-proxy $k8s_version present in $node_dir"
else
  say "building kubelet, kubeadm, kubectl, kube-proxy $k8s_version (cold: ~10 min on 2 cores; warm: ~1 min)"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  tmp="$(mktemp -d "$cache/bin/.kind-build.XXXXXX")"
  (cd "$here/kube" && go mod download && go build -v -trimpath -ldflags "$ldflags" -o "$tmp/" \
     k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubectl \
     k8s.io/kubernetes/cmd/kube-proxy) 2>&1 | progress kube-node
  "$tmp/kubelet" --version
  mkdir -p "$node_dir"
  for b in kubelet kubeadm kubectl kube-proxy; do mv -f "$tmp/$b" "$node_dir/$b"; done
  rm -rf "$tmp"
  say "kubelet, kubeadm, kubectl, kube-proxy built"
fi

# 4. CoreDNS (cluster names only: no forward plugin compiled in).
if [[ -x "$coredns_dir/coredns" ]]; then say "coredns $coredns_version present in $coredns_dir"
else
  say "building coredns $coredns_version"
  mkdir -p "$coredns_dir"
  (cd "$here/coredns" && go mod download && go build -v -trimpath -ldflags "-s -w" -o "$coredns_dir/coredns.tmp" .) 2>&1 | progress coredns
  mv -f "$coredns_dir/coredns.tmp" "$coredns_dir/coredns"
  say "coredns built: $("$coredns_dir/coredns" -version | sed -n 1p)"
fi

# 5. pause, from kubernetes' own C source, static.
if [[ -x "$pause_dir/pause" ]]; then say "pause present in $pause_dir"
else
  src="$(go env GOMODCACHE)/k8s.io/kubernetes@$k8s_version/build/pause/linux/pause.c"
  [[ -f "$src" ]] || (cd "$here/kube" && go mod download k8s.io/kubernetes)
  command -v gcc >/dev/null || { echo "build-tools.sh: gcc is needed for pause (apt-get install gcc libc6-dev)" >&2; exit 2; }
  mkdir -p "$pause_dir"
  gcc -Os -Wall -Werror -static -DVERSION="v${pause_version:-unknown}" -o "$pause_dir/pause.tmp" "$src"
  strip "$pause_dir/pause.tmp"; mv -f "$pause_dir/pause.tmp" "$pause_dir/pause"
  say "pause ${pause_version:-} built from $src"
fi
say "all tools present"
