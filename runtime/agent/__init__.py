"""The per-node agent (spec/README.md §3.1): probes -> engine -> runtime.kube.client."""
