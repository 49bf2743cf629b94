"""The agent reloads its mounted rules live (docs/install.md "Upgrade": a rules edit restarts no agent): the chart's
ConfigMap changes, the holder of `accelpolicy agent --rules DIR` loads the new set, the next pass plans
with it and the generation metric names it by its content hash; a broken set is refused and the working one
stays. With the rules ConfigMap (--rules-configmap) it plans with a new set only once the controller's leader
accepted that generation there, like every component."""
from __future__ import annotations

import shutil

from prometheus_client import CollectorRegistry

from probes.backend import select_backend
from runtime.agent.runner import NodeAgent
from runtime.cli.agent import _watch_rules
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.seedfiles import REPO


def test_an_edited_rule_set_is_planned_with_from_the_next_pass(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("*.py", "__pycache__", "tests"))
    policy = Policy(load_rules(rules))
    probe = select_backend("fake", str(REPO / "probes" / "recorded" / "node-a10g.yaml"))
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a10g", "uid": "", "labels": {}},
            "status": {"capacity": {"cpu": "4"}}}
    agent = NodeAgent(policy, probe, "node-a10g", node=node, allocation_source="annotation")
    before = agent.reconcile(dry_run=True)
    key = "feature.gpustack.ai/cpu-name"
    assert key in before.node_patch["metadata"]["annotations"]
    registry = CollectorRegistry()
    holder = _watch_rules(agent, str(rules), 3600, registry)   # its thread waits an hour: polled by hand below
    watcher = holder.watcher
    first = holder.id
    assert registry.get_sample_value("accelpolicy_rules_generation", {"generation": first}) == 1.0
    # the CPU-name annotation key is rules/labels.yaml's: rename it in the mounted copy
    labels = rules / "labels.yaml"
    labels.write_text(labels.read_text().replace(f"cpuNameAnnotation: {key}", "cpuNameAnnotation: example.com/cpu-name"))
    assert watcher.poll() is True
    assert agent.policy is policy   # a pass in progress keeps the old set: the swap waits for the next pass
    after = agent.reconcile(dry_run=True)
    assert agent.policy is not policy
    annotations = after.node_patch["metadata"]["annotations"]
    assert "example.com/cpu-name" in annotations and key not in annotations
    assert registry.get_sample_value("accelpolicy_rules_generation", {"generation": first}) is None
    assert registry.get_sample_value("accelpolicy_rules_generation", {"generation": holder.id}) == 1.0
    # a broken set: refused, counted, the working one stays
    labels.write_text("kind: [\n")
    assert watcher.poll() is False
    assert registry.get_sample_value("accelpolicy_rules_reload_failures_total") == 1.0
    again = agent.reconcile(dry_run=True)
    assert "example.com/cpu-name" in again.node_patch["metadata"]["annotations"]
    watcher.stop()



def test_a_set_that_fails_its_rule_suites_is_refused_by_the_agent(tmp_path):
    """The reload gate's part an agent runs (docs/rule-authoring.md "How a rules change goes live"): the
    rule suites beside the rules; a failing case refuses the set, the working one stays."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    policy = Policy(load_rules(rules))
    probe = select_backend("fake", str(REPO / "probes" / "recorded" / "node-a10g.yaml"))
    agent = NodeAgent(policy, probe, "node-a10g", node={"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-a10g", "uid": "", "labels": {}}, "status": {"capacity": {"cpu": "4"}}},
        allocation_source="annotation")
    registry = CollectorRegistry()
    holder = _watch_rules(agent, str(rules), 3600, registry)
    watcher = holder.watcher
    pods = rules / "admission" / "pods.yaml"
    pods.write_text(pods.read_text().replace("'a Pod may request only one accelerator family, found ['",
                                             "'one family per Pod, found ['"))
    assert watcher.poll() is False
    assert registry.get_sample_value("accelpolicy_rules_refused_total", {"reason": "suite"}) == 1.0
    assert registry.get_sample_value("accelpolicy_rules_generation", {"generation": holder.id}) == 1.0
    agent.reconcile(dry_run=True)
    assert agent.policy is policy and watcher.current is policy.ruleset
    watcher.stop()


def test_with_the_rules_configmap_an_agent_plans_with_a_generation_only_once_the_leader_accepted_it(tmp_path):
    from runtime.cli.agent import apply_manufacturer_env
    from runtime.reload.board import Board
    from runtime.reload.holder import RulesHolder
    from runtime.reload.hosts import AgentHost
    from tests.fakeapi import FakeApi

    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("*.py", "__pycache__", "tests"))
    policy = Policy(load_rules(rules))
    agent = NodeAgent(policy, select_backend("fake", str(REPO / "probes" / "recorded" / "node-a10g.yaml")), "node-a10g",
                      node={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a10g", "uid": "", "labels": {}},
                            "status": {"capacity": {"cpu": "4"}}}, allocation_source="annotation")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "accelpolicy-rules", "namespace": "gpustack-system", "annotations": {}}}
    board = Board(FakeApi({"ConfigMap": [configmap]}), "gpustack-system", "accelpolicy-rules",
                  keys=lambda: policy.ruleset.get("ReloadGate").annotations)
    holder = RulesHolder(AgentHost(agent, apply_manufacturer_env), rules, policy.ruleset, board=board,
                         decides=lambda: False, interval=0)
    labels = rules / "labels.yaml"
    labels.write_text(labels.read_text().replace("cpuNameAnnotation: feature.gpustack.ai/cpu-name",
                                                 "cpuNameAnnotation: example.com/cpu-name"))
    assert holder.watcher.poll() is False
    agent.reconcile(dry_run=True)
    assert agent.policy is policy                    # not decided yet: the generation in force plans
    configmap["metadata"]["annotations"]["rules.accelpolicy.dev/verdict"] = f"held:{holder.pending.id}"
    holder.settle()
    agent.reconcile(dry_run=True)
    assert agent.policy is policy                    # held: still the generation in force
    configmap["metadata"]["annotations"]["rules.accelpolicy.dev/verdict"] = f"accepted:{holder.pending.id}"
    holder.settle()
    after = agent.reconcile(dry_run=True)
    assert agent.policy is not policy and "example.com/cpu-name" in after.node_patch["metadata"]["annotations"]
