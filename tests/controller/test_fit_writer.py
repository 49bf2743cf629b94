"""FitLabelWriter (docs/performance.md "A pass proportional to what changed"): fit label patches written outside the pass, in order, never twice
while their echo is on its way (judged by the pass's snapshot, not the watch cache), planned again
after a failure.

The "cluster" here is a dict of Node objects that the write function patches as the API server
would (a new resourceVersion per write); the writer's threads are real.
"""
from __future__ import annotations

import threading

from runtime.controller.fitlabels import FitLabelWriter
from runtime.engine.plan import Action, Verb
from runtime.kube.session import KubeApiError


class Nodes:
    """Node objects by name; ``write`` applies a fit label merge patch and bumps resourceVersion."""

    def __init__(self, *names: str):
        self.objects = {n: {"metadata": {"name": n, "resourceVersion": "1", "labels": {}}} for n in names}
        self.version = 1
        self.sent: list[tuple[str, dict]] = []
        self.fail: set[str] = set()
        self.hold = threading.Event()
        self.hold.set()
        self.lock = threading.Lock()

    def write(self, action: Action) -> None:
        self.hold.wait(10)
        if action.name in self.fail:
            raise KubeApiError(409, "Conflict", "the object has been modified")
        with self.lock:
            self.sent.append((action.name, action.body["metadata"]["labels"]))
            self.version += 1
            labels = {**self.objects[action.name]["metadata"]["labels"], **action.body["metadata"]["labels"]}
            self.objects[action.name] = {"metadata": {"name": action.name, "resourceVersion": str(self.version),
                                                      "labels": {k: v for k, v in labels.items() if v is not None}}}

    def cached(self, name: str) -> dict | None:
        return self.objects.get(name)


def patch(node: str, value: str) -> Action:
    return Action(Verb.PATCH, "Node", node, body={"metadata": {"labels": {"shared-free-cards.fit.gpustack.ai/x": value}}})


def writer_for(nodes: Nodes, workers: int = 4, errors: list | None = None) -> FitLabelWriter:
    return FitLabelWriter(nodes.write, workers, (errors if errors is not None else []).append)


def test_a_batch_is_written_in_the_background_and_not_planned_twice():
    nodes = Nodes("node-a", "node-b")
    writer = writer_for(nodes)
    nodes.hold.clear()  # the writes wait: the hand-over itself must not
    batch = [patch("node-a", "1"), patch("node-b", "2")]
    assert writer.submit(batch, nodes.cached) == 2
    other = Action(Verb.APPLY_STATUS, "InstanceType", "t4", body={})
    # in flight and not yet echoed: a pass planning the same patches writes nothing twice
    assert writer.fresh(batch + [other], nodes.cached) == [other]
    assert writer.fresh([patch("node-a", "3")], nodes.cached) == [patch("node-a", "3")]  # a different body is news
    nodes.hold.set()
    assert writer.wait(10)
    assert sorted(nodes.sent) == [("node-a", {"shared-free-cards.fit.gpustack.ai/x": "1"}),
                                  ("node-b", {"shared-free-cards.fit.gpustack.ai/x": "2"})]
    assert (writer.written, writer.failed) == (2, 0)
    # the echo (a new resourceVersion) reached the pass's snapshot: the entry is forgotten, a re-plan is a real one
    assert writer.fresh(batch, nodes.cached) == batch
    writer.close()


def test_a_pass_whose_snapshot_predates_the_echo_does_not_write_it_again():
    nodes = Nodes("node-a", "node-b")
    writer = writer_for(nodes)
    before = {name: dict(obj) for name, obj in nodes.objects.items()}   # a pass's snapshot, taken as it starts
    batch = [patch("node-a", "1"), patch("node-b", "2")]
    writer.submit(batch, before.get)
    assert writer.wait(10)          # written, and (here at once) echoed into the cache
    assert writer.fresh(batch, before.get) == []   # that pass planned from the Nodes before the echo
    assert writer.fresh(batch, nodes.cached) == batch   # a pass that saw the echo: the entries are forgotten
    assert len(nodes.sent) == 2
    writer.close()


def test_a_later_patch_of_the_same_node_supersedes_one_not_yet_sent():
    nodes = Nodes("node-a", "node-b")
    writer = writer_for(nodes, workers=1)
    nodes.hold.clear()
    writer.submit([patch("node-b", "1"), patch("node-a", "1")], nodes.cached)  # node-b blocks the one worker
    writer.submit([patch("node-a", "2")], nodes.cached)
    nodes.hold.set()
    assert writer.wait(10)
    assert nodes.sent == [("node-b", {"shared-free-cards.fit.gpustack.ai/x": "1"}),
                          ("node-a", {"shared-free-cards.fit.gpustack.ai/x": "2"})]
    assert nodes.objects["node-a"]["metadata"]["labels"] == {"shared-free-cards.fit.gpustack.ai/x": "2"}
    writer.close()


def test_a_failed_patch_is_reported_and_planned_again():
    nodes = Nodes("node-a")
    errors: list[str] = []
    writer = writer_for(nodes, errors=errors)
    nodes.fail.add("node-a")
    writer.submit([patch("node-a", "1")], nodes.cached)
    assert writer.wait(10)
    assert errors == ["patch Node node-a: 409 Conflict: the object has been modified"]
    assert (writer.written, writer.failed) == (0, 1)
    assert writer.fresh([patch("node-a", "1")], nodes.cached) == [patch("node-a", "1")]
    writer.close()
