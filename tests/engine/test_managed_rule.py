"""rules/pools/derivation.yaml spec.managed: a Node without ``gpustack.ai/managed`` is unmanaged.

A real cluster has such Nodes (the control plane's; the local cluster's nfd-master Node), and the
controller reads every Node: the rule must answer False for them, not fail the whole pass.
"""
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules


def test_managed_needs_the_label_set_to_true():
    managed = Policy(load_rules()).derivation.managed
    assert managed.evaluate({"labels": {"node-role.kubernetes.io/control-plane": ""}}) is False
    assert managed.evaluate({"labels": {"gpustack.ai/managed": "false"}}) is False
    assert managed.evaluate({"labels": {"gpustack.ai/managed": "true"}}) is True
