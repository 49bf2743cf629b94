module accelpolicy.local/e2e/crdsources

go 1.26.0

require (
	sigs.k8s.io/kueue v0.17.0
	sigs.k8s.io/node-feature-discovery v0.19.0
)
