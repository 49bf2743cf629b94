"""The per-node agent (docs/agent.md "The node agent (`accelpolicy agent`)"): probes -> engine ->
runtime.agent.cluster (the controller's runtime.kube session, watch cache and applier, narrowed to one
node)."""
