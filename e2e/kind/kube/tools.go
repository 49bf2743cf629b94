//go:build tools

// Package kube pins the node programs of the kind node image (e2e/kind/build-tools.sh): kubelet,
// kubeadm, kubectl and kube-proxy from the same k8s.io/kubernetes version as e2e/controlplane/go.mod
// (build-tools.sh refuses to build when the two differ). No code of its own: the build tag keeps it out
// of every build, and the imports keep go.mod/go.sum honest.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
