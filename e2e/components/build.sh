#!/usr/bin/env bash
# Build the cluster components the local control plane runs beside kube-apiserver (Kueue's
# controller manager, nfd-master, kwok) from the Go modules pinned in versions.txt, into
# $ACCELPOLICY_CACHE/bin/components-<versions>/, and copy the module files they need at run time:
#   kwok-stages/*.yaml       kwok's default Node and Pod stages (kustomize/stage/{node,pod}/...)
#   kueue-webhook/*.yaml     Kueue's webhook configurations and their kustomize patches
#
# Each binary is built inside its own module directory in Go's module cache (`go mod download
# -json` gives it), so the module's own go.mod, go.sum and replace directives apply.
# A no-op when every binary and data file is already there.
#
# Usage: e2e/components/build.sh              (ACCELPOLICY_CACHE defaults to ~/.cache/accelpolicy)
#        e2e/components/build.sh --print-dir  (print the output directory and exit)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
versions_file="$here/versions.txt"

mapfile -t specs < <(grep -v '^\s*\(#\|$\)' "$versions_file")
if [[ ${#specs[@]} -eq 0 ]]; then
  echo "components: $versions_file lists no components" >&2; exit 2
fi
key=""
for spec in "${specs[@]}"; do
  read -r mod ver pkg bin xvar <<<"$spec"
  if [[ -z "$mod" || -z "$ver" || -z "$pkg" || -z "$bin" || -z "$xvar" ]]; then
    echo "components: $versions_file: expected '<module> <version> <package> <binary> <ldflag var|->' in line: $spec" >&2
    exit 2
  fi
  key+="${key:+_}${bin}-${ver}"
done
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
out="$cache/bin/components-$key"
if [[ "${1:-}" == "--print-dir" ]]; then echo "$out"; exit 0; fi

complete=1
for spec in "${specs[@]}"; do
  read -r mod ver pkg bin xvar <<<"$spec"
  [[ -x "$out/$bin" ]] || complete=0
done
[[ -f "$out/kwok-stages/node-initialize.yaml" && -f "$out/kueue-webhook/manifests.yaml" ]] || complete=0
if [[ $complete == 1 ]]; then
  echo "components: binaries present in $out (nothing to do)"
  exit 0
fi
command -v go >/dev/null || {
  echo "components: 'go' not found on PATH; install Go (Kueue v0.17 needs go >= 1.25) to build $key" >&2; exit 2; }

mkdir -p "$cache/bin"
tmp="$(mktemp -d "$cache/bin/.components.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
echo "components: building $key -> $out"
echo "components: $(go version); GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)"

module_dir() {  # $1 = module@version -> its directory in the module cache (downloads it if needed)
  (cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$1") | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p'
}

# A module may replace a nested module of its own repository with a local directory (NFD:
# `sigs.k8s.io/node-feature-discovery/api/nfd => ./api/nfd`). Module zips leave nested modules
# out, so such a directory is missing in the module cache; the same tag of the nested module is
# published, so it is downloaded and the replace pointed at it in a copy of go.mod (-modfile).
local_replaces() {  # $1 = go.mod -> lines "<module> <relative dir>" for replaces to a local directory
  awk '/=>/ { split($0, side, "=>"); n = split(side[1], l, " "); m = (l[1] == "replace") ? l[2] : l[1];
              split(side[2], r, " "); if (r[1] ~ /^\.\.?\//) print m, r[1] }' "$1"
}

declare -A dirs
for spec in "${specs[@]}"; do
  read -r mod ver pkg bin xvar <<<"$spec"
  dir="$(module_dir "$mod@$ver")"
  if [[ -z "$dir" || ! -f "$dir/go.mod" ]]; then
    echo "components: go mod download $mod@$ver did not give a module directory" >&2; exit 1
  fi
  dirs[$bin]="$dir"
  if [[ -x "$out/$bin" ]]; then
    echo "components: $bin already built"; cp -p "$out/$bin" "$tmp/$bin"; continue
  fi
  modfile_args=()
  while read -r rmod rel; do
    [[ -z "$rmod" || -f "$dir/$rel/go.mod" ]] && continue
    if [[ "$rmod" != "$mod/${rel#./}" ]]; then
      echo "components: $mod@$ver replaces $rmod with $rel, which is not in the module zip and not its nested module" >&2; exit 1
    fi
    ndir="$(module_dir "$rmod@$ver")"
    [[ -f "$ndir/go.mod" ]] || { echo "components: go mod download $rmod@$ver did not give a module directory" >&2; exit 1; }
    [[ -f "$tmp/$bin.go.mod" ]] || { cp "$dir/go.mod" "$tmp/$bin.go.mod"; cp "$dir/go.sum" "$tmp/$bin.go.sum"; chmod u+w "$tmp/$bin.go."*; }
    awk -v rel="$rel" -v abs="$ndir" '{ if (index($0, "=>") && $NF == rel) sub(/=>.*/, "=> " abs); print }' \
      "$tmp/$bin.go.mod" > "$tmp/$bin.go.mod.new" && mv "$tmp/$bin.go.mod.new" "$tmp/$bin.go.mod"
    echo "components: $bin: replace $rmod => $ndir (published $ver; $rel is not in the module zip)"
    modfile_args=("-modfile=$tmp/$bin.go.mod")
  done < <(local_replaces "$dir/go.mod")
  ldflags="-s -w"
  [[ "$xvar" != "-" ]] && ldflags+=" -X $xvar=$ver"
  s=$(date +%s)
  echo "components: $bin: go build $pkg in $dir (cold: several minutes on 2 cores)"
  # -v prints each package as it is compiled; show a progress line every 100 packages.
  (cd "$dir" && CGO_ENABLED=0 go build -v -trimpath "${modfile_args[@]}" -ldflags "$ldflags" -o "$tmp/$bin" "$pkg") 2>&1 |
    awk -v label="$bin" -v t0="$s" '/ |^#/ { print; fflush(); next }
      { n++; if (n % 100 == 0) { printf "components: %s: %d packages compiled (%ds)\n", label, n, systime()-t0; fflush() } }'
  [[ -x "$tmp/$bin" ]] || { echo "components: building $bin failed" >&2; exit 1; }
  echo "components: $bin built in $(( $(date +%s) - s ))s ($(du -h "$tmp/$bin" | cut -f1))"
done

# Module files the binaries need at run time (read by testing/localcluster/components.py).
kwok="${dirs[kwok]:-}" kueue="${dirs[kueue]:-}"
[[ -n "$kwok" && -n "$kueue" ]] || { echo "components: versions.txt must list kwok and kueue" >&2; exit 2; }
mkdir -p "$tmp/kwok-stages" "$tmp/kueue-webhook"
cp "$kwok/kustomize/stage/node/fast/node-initialize.yaml" "$kwok/kustomize/stage/node/heartbeat/node-heartbeat.yaml" \
   "$kwok/kustomize/stage/pod/fast/pod-ready.yaml" "$kwok/kustomize/stage/pod/fast/pod-complete.yaml" \
   "$kwok/kustomize/stage/pod/fast/pod-delete.yaml" "$tmp/kwok-stages/"
cp "$kueue/config/components/webhook/manifests.yaml" "$kueue/config/components/webhook/kustomization.yaml" \
   "$tmp/kueue-webhook/"
chmod -R u+w "$tmp"

mkdir -p "$out"
cp -r "$tmp/kwok-stages" "$tmp/kueue-webhook" "$out/"
for spec in "${specs[@]}"; do
  read -r mod ver pkg bin xvar <<<"$spec"
  mv -f "$tmp/$bin" "$out/$bin"
  echo "$mod $ver $pkg" >> "$tmp/VERSIONS"
done
go version >> "$tmp/VERSIONS"
mv -f "$tmp/VERSIONS" "$out/VERSIONS"
echo "components: done in $(( $(date +%s) - t0 ))s -> $out"
