"""rules/pools/derivation.yaml spec.managed: a Node without ``gpustack.ai/managed`` is unmanaged.

A real cluster has such Nodes (the control plane's; the local cluster's nfd-master Node), and the
controller reads every Node: the rule must answer False for them, not fail the whole pass.
"""
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules


def test_managed_needs_the_label_set_to_true():
    policy = Policy(load_rules())

    def managed(labels: dict) -> bool:   # the rule's variables: the labels and the key's home (labels.yaml)
        return policy.derivation.managed.evaluate({"labels": labels, "managedKey": policy.key("managed")})

    assert managed({"node-role.kubernetes.io/control-plane": ""}) is False
    assert managed({"gpustack.ai/managed": "false"}) is False
    assert managed({"gpustack.ai/managed": "true"}) is True
