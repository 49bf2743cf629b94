"""The per-node agent (spec/README.md §3.1): probes -> engine -> runtime.agent.cluster
(the controller's runtime.kube session, watch cache and applier, narrowed to one node)."""
