#!/usr/bin/env bash
# The offline base image of deploy/image/Dockerfile: a Debian bookworm minbase rootfs with Debian's python3
# (packages.txt), made by debootstrap from the mirror in /etc/apt/sources.list.d and `docker import`ed as
#   accelpolicy.local/python-base:bookworm-<hash of suite, mirror, packages and this script>
# The rootfs tar is cached in $ACCELPOLICY_CACHE/image/ (outside the clone), so a fresh clone re-imports it
# without debootstrap. Prints the tag on its last line. Needs root (debootstrap) and a running docker.
#
# Usage: deploy/image/base.sh [--print-tag]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
suite=bookworm
mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"
packages="$(grep -v '^\s*\(#\|$\)' "$here/packages.txt" | paste -sd, -)"
hash="$( (printf '%s %s %s\n' "$suite" "$mirror" "$packages"; cat "$here/base.sh") | sha256sum | cut -c1-12)"
tag="accelpolicy.local/python-base:$suite-$hash"
if [[ "${1:-}" == "--print-tag" ]]; then echo "$tag"; exit 0; fi
say() { echo "image-base: $*" >&2; }

if docker image inspect "$tag" >/dev/null 2>&1; then say "$tag present"; echo "$tag"; exit 0; fi
tar_file="$cache/image/python-base-$suite-$hash.tar"
mkdir -p "$cache/image"
if [[ ! -f "$tar_file" ]]; then
  command -v debootstrap >/dev/null || { echo "image-base: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
  dir="$(mktemp -d "$cache/image/.debootstrap.XXXXXX")"
  trap 'rm -rf "$dir" "$dir.log"' EXIT
  s=$(date +%s)
  say "debootstrap --variant=minbase $suite from $mirror with $packages"
  debootstrap --variant=minbase --include="$packages" "$suite" "$dir" "$mirror" > "$dir.log" 2>&1 \
    || { tail -20 "$dir.log" >&2; echo "image-base: debootstrap failed" >&2; exit 1; }
  # what an image needs no more: package caches, docs, apt lists
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* \
         "$dir"/usr/share/man/* "$dir"/usr/share/info/*
  tar --numeric-owner -C "$dir" -cf "$tar_file.tmp" . && mv -f "$tar_file.tmp" "$tar_file"
  say "rootfs cached: $tar_file ($(du -h "$tar_file" | cut -f1), $(( $(date +%s) - s ))s)"
fi
docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["/usr/bin/python3"]' "$tar_file" "$tag" >/dev/null
say "imported $tag"
echo "$tag"
