#!/usr/bin/env bash
# Build the kind node image offline (docs/tasks/e2e.md "The offline kind cluster"), cached by the hash of its recipe.
#
#   base rootfs   debootstrap of Debian bookworm (the mirror in /etc/apt/sources.list.d) with the
#                 packages in node/packages.txt: systemd, containerd, runc, CNI plugins, iptables, ...
#                 cached as $ACCELPOLICY_CACHE/kind/rootfs/base-<hash>.tar
#   node files    node/files/ (our own entrypoint, containerd config, kubelet units, preload and
#                 Service-route units), kubelet/kubeadm/kubectl, /kind/version
#   images        one per line of `kubeadm config images list` (kube-apiserver, kube-controller-manager,
#                 kube-scheduler, kube-proxy, etcd, coredns, pause): a minimal rootfs with the binary built
#                 by build-tools.sh, `docker import`ed with exactly that tag, `docker save`d into
#                 /kind/images/ of the node and imported into its containerd before the kubelet starts
#   node image    `docker import` of the assembled rootfs, tagged accelpolicy.local/kind-node:<k8s>-<hash>
#
# Usage: e2e/kind/node-image.sh              build when missing (no-op when the tag exists), print the tag
#        e2e/kind/node-image.sh --print-tag  print the tag the current recipe gives and exit
# Needs a guarded docker daemon (e2e/kind/dockerd.sh check must pass) and root (debootstrap, chroot).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${ACCELPOLICY_CACHE:-$HOME/.cache/accelpolicy}"
export ACCELPOLICY_CACHE="$cache"
k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$repo/e2e/controlplane/go.mod")"
suite=bookworm
mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
mirror="${mirror:-http://deb.debian.org/debian}"

recipe_hash() {
  (cd "$here" && cat node-image.sh build-tools.sh versions.txt node/packages.txt kube/go.mod coredns/go.mod coredns/main.go \
     "$repo/e2e/controlplane/go.mod" && find node/files -type f | LC_ALL=C sort | xargs cat && \
     find node/files -printf '%p %m\n' | LC_ALL=C sort) | sha256sum | cut -c1-12
}
tag="accelpolicy.local/kind-node:${k8s_version}-$(recipe_hash)"
if [[ "${1:-}" == "--print-tag" ]]; then echo "$tag"; exit 0; fi

start=$(date +%s)
say() { echo "kind-node-image: $* ($(( $(date +%s) - start ))s)"; }
bash "$here/dockerd.sh" check >/dev/null || { bash "$here/dockerd.sh" check || true; echo "node-image.sh: refusing to build without the network guard" >&2; exit 1; }
if docker image inspect "$tag" >/dev/null 2>&1; then say "$tag present (nothing to do)"; echo "$tag"; exit 0; fi

bash "$here/build-tools.sh"
declare -A bin
while read -r name path; do bin[$name]="$path"; done < <(bash "$here/build-tools.sh" --print)

# 1. base rootfs (debootstrap), cached by the package list.
packages="$(grep -v '^#' "$here/node/packages.txt" | paste -sd, -)"
base_hash="$(printf '%s %s %s' "$suite" "$mirror" "$packages" | sha256sum | cut -c1-12)"
base_tar="$cache/kind/rootfs/base-$base_hash.tar"
mkdir -p "$cache/kind/rootfs"
if [[ -f "$base_tar" ]]; then say "base rootfs present: $base_tar"
else
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
  dir="$(mktemp -d "$cache/kind/rootfs/.debootstrap.XXXXXX")"
  say "debootstrap $suite from $mirror with $packages (~1-2 min)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$dir" "$mirror" > "$dir.log" 2>&1 \
    || { tail -20 "$dir.log" >&2; echo "node-image.sh: debootstrap failed; log $dir.log" >&2; exit 1; }
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  tar --numeric-owner -C "$dir" -cf "$base_tar.tmp" . && mv -f "$base_tar.tmp" "$base_tar"
  rm -rf "$dir" "$dir.log"
  say "base rootfs cached: $base_tar ($(du -h "$base_tar" | cut -f1))"
fi

stage="$(mktemp -d "$cache/kind/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/node"
mkdir -p "$root"
tar --numeric-owner -C "$root" -xf "$base_tar"

# 2. component images, tagged as kubeadm lists them.
copy_with_libs() {  # $1 = source rootfs, $2 = image rootfs, rest = absolute paths inside $1 (symlinks kept)
  local src="$1" dst="$2"; shift 2
  local p lib
  for p in "$@"; do
    mkdir -p "$dst$(dirname "$p")"
    cp -a "$src$p" "$dst$p"
    if [[ -L "$src$p" ]]; then
      local target; target="$(readlink "$src$p")"
      [[ "$target" == /* ]] || target="$(dirname "$p")/$target"
      copy_with_libs "$src" "$dst" "$target"
      continue
    fi
    for lib in $(chroot "$src" ldd "$p" 2>/dev/null | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
      [[ -e "$dst$lib" ]] && continue
      mkdir -p "$dst$(dirname "$lib")"
      cp -aL "$src$lib" "$dst$lib"
    done
  done
}

images_dir="$root/kind/images"
mkdir -p "$images_dir"
mapfile -t image_list < <("${bin[kubeadm]}" config images list --kubernetes-version "$k8s_version")
say "component images: ${image_list[*]}"
pause_image=""
for image in "${image_list[@]}"; do
  name="${image##*/}"; name="${name%%:*}"
  img="$stage/img-$name"
  mkdir -p "$img/usr/local/bin" "$img/tmp" "$img/etc"
  chmod 1777 "$img/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$img/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$img/etc/group"
  changes=(--change 'ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
  case "$name" in
    kube-apiserver|kube-controller-manager|kube-scheduler|etcd)
      cp "${bin[$name]}" "$img/usr/local/bin/$name"
      changes+=(--change "ENTRYPOINT [\"/usr/local/bin/$name\"]") ;;
    kube-proxy)
      cp "${bin[kube-proxy]}" "$img/usr/local/bin/kube-proxy"
      # kube-proxy programs rules with iptables (nft backend, as in the node) and needs its extensions
      copy_with_libs "$root" "$img" /usr/sbin/xtables-nft-multi /usr/sbin/iptables-nft /usr/sbin/iptables-nft-save \
        /usr/sbin/iptables-nft-restore /usr/sbin/ip6tables-nft /usr/sbin/ip6tables-nft-save /usr/sbin/ip6tables-nft-restore \
        $(cd "$root" && ls -d usr/lib/x86_64-linux-gnu/xtables/*.so | sed 's|^|/|')
      for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
        ln -sf "/usr/sbin/${t/tables/tables-nft}" "$img/usr/sbin/$t"
      done
      mkdir -p "$img/run/xtables.lock.d"
      changes+=(--change 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]') ;;
    coredns)
      cp "${bin[coredns]}" "$img/coredns"
      changes+=(--change 'ENTRYPOINT ["/coredns"]') ;;
    pause)
      cp "${bin[pause]}" "$img/pause"
      pause_image="$image"
      changes+=(--change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535') ;;
    *) echo "node-image.sh: no recipe for image $image (kubeadm lists it); add one" >&2; exit 1 ;;
  esac
  docker rmi "$image" >/dev/null 2>&1 || true      # the previous build's image of this tag, if unused
  tar --numeric-owner -C "$img" -c . | docker import "${changes[@]}" - "$image" >/dev/null
  docker save "$image" -o "$images_dir/$name.tar"
  say "image $image ($(du -h "$images_dir/$name.tar" | cut -f1))"
done
[[ -n "$pause_image" ]] || { echo "node-image.sh: kubeadm listed no pause image" >&2; exit 1; }

# 3. node files, binaries and systemd units.
cp -a "$here/node/files/." "$root/"
sed -i "s|@PAUSE_IMAGE@|$pause_image|" "$root/etc/containerd/config.toml"
for b in kubelet kubeadm kubectl; do cp "${bin[$b]}" "$root/usr/bin/$b"; done
echo "$k8s_version" > "$root/kind/version"
printf '%s\n' "${image_list[@]}" > "$root/kind/images/list.txt"
printf '%s\n' "${image_list[@]}" | grep -E '/(kube-proxy|coredns|pause):' > "$root/kind/images/worker.txt"
mkdir -p "$root/etc/cni/net.d" "$root/opt/cni" "$root/var/lib/kubelet" "$root/etc/kubernetes/manifests"
# systemd as a container's init: no udev, getty, timers or units of the distribution beyond ours
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
      "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
      "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup* \
      "$root"/lib/systemd/system/basic.target.wants/*
chroot "$root" systemctl enable containerd.service kubelet.service accelpolicy-preload.service accelpolicy-service-route.service >/dev/null 2>&1
chroot "$root" systemctl mask systemd-binfmt.service getty.target console-getty.service systemd-udevd.service systemd-modules-load.service >/dev/null 2>&1
chroot "$root" systemctl set-default multi-user.target >/dev/null 2>&1
echo 'ReadKMsg=no' >> "$root/etc/systemd/journald.conf"
rm -f "$root/etc/machine-id"; : > "$root/etc/machine-id"

say "importing the node image"
tar --numeric-owner -C "$root" -c . | docker import \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' \
  --change "LABEL io.accelpolicy.kind.recipe=$tag" - "$tag" >/dev/null
# older node images (other recipe hashes) are ~1 GB each: remove those no container uses
for old in $(docker images --format '{{.Repository}}:{{.Tag}}' "${tag%%:*}" | grep -vx "$tag" || true); do
  docker rmi "$old" >/dev/null 2>&1 && say "removed the older node image $old" || true
done
say "node image $tag built ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$tag"
