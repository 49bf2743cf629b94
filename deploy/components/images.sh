#!/usr/bin/env bash
# Images of Kueue's manager and nfd-master for a cluster without a registry: `docker import` of a rootfs
# holding only the static binary `make controlplane` built from its Go module (e2e/components/build.sh),
# plus the passwd/group entries of the non-root user 65532 and a /tmp. Tags (what deploy/components/render.py
# puts in the manifests):
#   accelpolicy.local/kueue:<version>                   /manager (the chart's command)
#   accelpolicy.local/node-feature-discovery:<version>  /usr/bin/nfd-master (the chart's command: nfd-master)
# A no-op for a tag already present. Needs the guarded docker daemon (e2e/kind/dockerd.sh). Prints the tags.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bindir="$(bash "$repo/e2e/components/build.sh" --print-dir)"
guard="$repo/e2e/kind/dockerd.sh"
if [[ -f "$guard" ]]; then
  bash "$guard" check >/dev/null || { echo "components-images: refusing without the guarded docker daemon (bash e2e/kind/dockerd.sh start)" >&2; exit 1; }
fi
version_of() { awk -v m="$1" '$1 == m {print $2}' "$repo/e2e/components/versions.txt"; }

image() {  # $1 tag, $2 binary, $3 path inside the image, $4 entrypoint (JSON)
  local tag="$1" bin="$2" path="$3" entry="$4"
  if docker image inspect "$tag" >/dev/null 2>&1; then echo "$tag"; return; fi
  [[ -x "$bin" ]] || { echo "components-images: $bin missing: run \`make controlplane\`" >&2; exit 1; }
  local root; root="$(mktemp -d)"
  mkdir -p "$root/$(dirname "$path")" "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  install -m 0755 "$bin" "$root$path"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  tar --numeric-owner --owner=0 --group=0 -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' --change 'USER 65532:65532' \
    --change "ENTRYPOINT $entry" - "$tag" >/dev/null
  rm -rf "$root"
  echo "$tag"
}

image "accelpolicy.local/kueue:$(version_of sigs.k8s.io/kueue)" "$bindir/kueue" /manager '["/manager"]'
image "accelpolicy.local/node-feature-discovery:$(version_of sigs.k8s.io/node-feature-discovery)" \
  "$bindir/nfd-master" /usr/bin/nfd-master '["/usr/bin/nfd-master"]'
