#!/usr/bin/env bash
# Import the node image's component images (/kind/images/*.tar, made by e2e/kind/node-image.sh with
# `docker import` and tagged as `kubeadm config images list` prints) into containerd's k8s.io namespace
# before the kubelet starts, so no Pod ever needs a pull. A control-plane node imports every image
# (/kind/images/list.txt); a worker only those its Pods use (/kind/images/worker.txt: kube-proxy, CoreDNS,
# pause), which keeps the parallel imports of a cluster create short.
set -o errexit -o nounset -o pipefail
role="$(cat /kind/accelpolicy/role 2>/dev/null || echo control-plane)"
list=/kind/images/list.txt
[[ "$role" == worker ]] && list=/kind/images/worker.txt
mapfile -t images < "$list"
((${#images[@]})) || { echo "preload-images: $list names no image" >&2; exit 1; }
for image in "${images[@]}"; do
  name="${image##*/}"; name="${name%%:*}"
  ctr --namespace k8s.io images import "/kind/images/$name.tar" >/dev/null
done
ctr --namespace k8s.io images ls -q | grep -v '^sha256:' > /kind/accelpolicy/preloaded-images.txt
