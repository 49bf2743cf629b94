#!/usr/bin/env bash
# The DRA driver stand-in (docs/tasks/e2e.md "The offline kind cluster") built from its pinned module (go.mod beside this file) and
# packaged for a cluster without a registry, the way deploy/components/images.sh packages Kueue: a static
# binary in $ACCELPOLICY_CACHE/bin/kind-dra-plugin-<hash>/, then `docker import` of a rootfs holding only
# it (plus /tmp and the passwd/group entries of root), tagged
#   accelpolicy.local/kind-dra-plugin:<dynamic-resource-allocation version>-<hash of the sources>
# A no-op when that tag exists. Needs the guarded docker daemon (e2e/kind/dockerd.sh). Prints the tag.
#
# Usage: e2e/kind/kind_draplugin/build.sh              build what is missing, print the tag
#        e2e/kind/kind_draplugin/build.sh --print-tag  print the tag of the current sources and exit
#        e2e/kind/kind_draplugin/build.sh --binary     build the binary only (no docker), print its path
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
version="$(awk '$1=="k8s.io/dynamic-resource-allocation" {print $2; exit}' "$here/go.mod")"
hash="$(cd "$here" && cat go.mod go.sum build.sh $(ls *.go | grep -v _test.go | LC_ALL=C sort) | sha256sum | cut -c1-12)"
tag="accelpolicy.local/kind-dra-plugin:${version}-${hash}"
bin="$cache/bin/kind-dra-plugin-$hash/kind-dra-plugin"
case "${1:-}" in
  --print-tag) echo "$tag"; exit 0 ;;
  --binary|"") ;;
  *) sed -n '9,12p' "$0" >&2; exit 2 ;;
esac

start=$(date +%s)
say() { echo "kind-dra-plugin: $* ($(( $(date +%s) - start ))s)" >&2; }
if [[ "${1:-}" != "--binary" ]]; then
  bash "$here/../dockerd.sh" check >/dev/null || { echo "kind_draplugin/build.sh: refusing without the guarded docker daemon (bash e2e/kind/dockerd.sh start)" >&2; exit 1; }
  if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; exit 0; fi
fi
if [[ ! -x "$bin" ]]; then
  command -v go >/dev/null || { echo "kind_draplugin/build.sh: 'go' not found on PATH" >&2; exit 2; }
  say "building from k8s.io/dynamic-resource-allocation $version (Go caches shared with make controlplane)"
  mkdir -p "$(dirname "$bin")"
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
  mv -f "$bin.tmp" "$bin"
  say "built $bin"
fi
if [[ "${1:-}" == "--binary" ]]; then echo "$bin"; exit 0; fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
install -m 0755 "$bin" "$root/kind-dra-plugin"
printf 'root:x:0:0:root:/root:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"
# root: the driver creates its sockets in the kubelet's root-owned plugin directories (hostPath)
tar --numeric-owner --owner=0 --group=0 -C "$root" -c . | docker import \
  --change 'ENTRYPOINT ["/kind-dra-plugin"]' - "$tag" >/dev/null
say "image $tag"
echo "$tag"
