#!/usr/bin/env bash
# Import the node image's component images (/kind/images/*.tar, made by e2e/kind/node-image.sh with
# `docker import` and tagged as `kubeadm config images list` prints) into containerd's k8s.io namespace
# before the kubelet starts, so no Pod ever needs a pull.
set -o errexit -o nounset -o pipefail
shopt -s nullglob
tars=(/kind/images/*.tar)
((${#tars[@]})) || { echo "preload-images: no image tarballs in /kind/images" >&2; exit 1; }
for tar in "${tars[@]}"; do
  ctr --namespace k8s.io images import "$tar" >/dev/null
done
ctr --namespace k8s.io images ls -q | grep -v '^sha256:' > /kind/accelpolicy/preloaded-images.txt
