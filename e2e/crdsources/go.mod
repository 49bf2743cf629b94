// Pins the projects whose CRDs the local control plane installs (testing/localcluster/crds.py
// reads them from Go's module cache via `go mod download -json`; nothing is copied into the tree):
//   Kueue: config/components/crd/bases/*.yaml   NFD: deployment/base/nfd-crds/nfd-api-crds.yaml
// go.sum holds only these modules' hashes. Do not run `go mod tidy` here: with no Go code it would
// drop the requirements.
module accelpolicy.local/e2e/crdsources

go 1.26.0

require (
	github.com/openreports/reports-api v0.2.1
	sigs.k8s.io/kueue v0.17.0
	sigs.k8s.io/node-feature-discovery v0.19.0
)
