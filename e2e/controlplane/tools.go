//go:build tools

// Package controlplane pins the control-plane programs that `make controlplane`
// builds (kube-apiserver, kube-controller-manager, kube-scheduler, etcd). It contains no code of its own:
// the build tag keeps it out of every build, and the imports keep go.mod/go.sum
// honest about which modules those programs need.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
