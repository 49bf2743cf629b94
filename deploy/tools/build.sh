#!/usr/bin/env bash
# Build the deployment tools of versions.txt (helm) from their Go modules, each inside its own
# module directory of Go's module cache (so its go.mod/go.sum apply), into
# $ACCELPOLICY_CACHE/bin/<binary>-<version>/<binary>. A no-op when already built.
#
# Usage: deploy/tools/build.sh                 build every tool (quietly skips built ones)
#        deploy/tools/build.sh --print BINARY  print the path BINARY is (or will be) built at
# Env:   ACCELPOLICY_GO_NICE=1  build with `nice -n 19` and GOMAXPROCS=1 (beside another big build)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
mapfile -t specs < <(grep -v '^\s*\(#\|$\)' "$here/versions.txt")

path_of() { echo "$cache/bin/$1-$2/$1"; }

if [[ "${1:-}" == "--print" ]]; then
  for spec in "${specs[@]}"; do
    read -r mod ver pkg bin xvar <<<"$spec"
    [[ "$bin" == "${2:-}" ]] && { path_of "$bin" "$ver"; exit 0; }
  done
  echo "tools: ${2:-<none>} is not in $here/versions.txt" >&2; exit 2
fi

command -v go >/dev/null || { echo "tools: 'go' not found on PATH" >&2; exit 2; }
nice_cmd=()
if [[ "${ACCELPOLICY_GO_NICE:-}" == 1 ]]; then nice_cmd=(nice -n 19); export GOMAXPROCS=1; fi
for spec in "${specs[@]}"; do
  read -r mod ver pkg bin xvar <<<"$spec"
  if [[ -z "$mod" || -z "$ver" || -z "$pkg" || -z "$bin" || -z "$xvar" ]]; then
    echo "tools: $here/versions.txt: expected '<module> <version> <package> <binary> <ldflag var|->' in: $spec" >&2
    exit 2
  fi
  out="$(path_of "$bin" "$ver")"
  if [[ -x "$out" ]]; then echo "tools: $bin $ver present at $out"; continue; fi
  tmp="$(mktemp -d)"
  dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$mod@$ver" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  rm -rf "$tmp"
  [[ -f "$dir/go.mod" ]] || { echo "tools: go mod download $mod@$ver gave no module directory" >&2; exit 1; }
  ldflags="-s -w"
  [[ "$xvar" != "-" ]] && ldflags+=" -X $xvar=$ver"
  s=$(date +%s)
  echo "tools: $bin: go build $pkg in $dir"
  mkdir -p "$(dirname "$out")"
  (cd "$dir" && CGO_ENABLED=0 "${nice_cmd[@]}" go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
  echo "tools: $bin $ver built in $(( $(date +%s) - s ))s -> $out"
done
