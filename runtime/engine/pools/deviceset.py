"""The Devices as a derive reads them: managed label mirrored, refused ledgers, sound ones.

:func:`read_devices` gives a derive (the Devices with their Node's managed label, their refused
ledgers (decision 19), the sound ones, the label index of the sound ones). With a memo it keeps them
in a :class:`DeviceSet` and, while the node problems are the same, updates them from the Devices
that changed and those whose node's managed mark changed (by object identity, a C-speed pass over
the maps): a ledger row (the usual event) replaces one object in the lists, a managed flip one
object and its label index entries. An added or removed Devices, or one becoming refused or sound again,
rebuilds them. The results equal the rebuilt ones (tests/engine/test_incremental_derive.py).
"""
from __future__ import annotations

from functools import partial
from typing import Mapping

from runtime.engine.devices.factcheck import FactProblem, ledger_problems
from runtime.engine.policy import Policy
from runtime.engine.pools.incremental import DeriveMemo
from runtime.engine.pools.nodeset import changed_keys
from runtime.engine.snapshot import Snapshot, labels_of, name_of

DeviceLists = tuple[list[dict], list[FactProblem], list[dict], dict]


def read_devices(policy: Policy, snapshot: Snapshot, effective: dict[str, dict[str, str]],
                 node_problems: list[FactProblem], memo: DeriveMemo | None) -> DeviceLists:
    """(the Devices with their Node's managed label, their refused ledgers (decision 19), the sound
    ones (neither refused nor of a node in ``node_problems``), the label index of the sound ones),
    each list in name order; with a memo, updated from what changed (see the module docstring)."""
    if memo is None:
        return _build(policy, snapshot, effective, node_problems, None)
    kept = memo.state("deviceset", DeviceSet)
    return kept.update(policy, snapshot, effective, node_problems, memo)


def _build(policy: Policy, snapshot: Snapshot, effective, node_problems: list[FactProblem],
           memo: DeriveMemo | None) -> DeviceLists:
    devices = [mirrored(policy, d, effective) for d in snapshot.list("Devices")]
    problems = list(node_problems)
    sound = _sound_devices(policy, devices, problems, memo)
    return devices, problems[len(node_problems):], sound, label_index(sound)


class DeviceSet:
    """The last :func:`read_devices` result with what it was read from, updated from the changes."""

    def __init__(self) -> None:
        self.devices: Mapping | None = None  # the snapshot's Devices map read last
        self.marks: object = None  # the node marks (or effective labels) and node problems read last
        self.problems: tuple = ()
        self.result: DeviceLists | None = None
        self.at: dict[str, int] = {}  # name -> position in the result's first list
        self.sound_at: dict[str, int] = {}  # name -> position in the sound list

    def update(self, policy: Policy, snapshot: Snapshot, effective, node_problems: list[FactProblem],
               memo: DeriveMemo) -> DeviceLists:
        devices = snapshot.objects.get("Devices") or {}
        marks = memo.node_marks()
        marks = effective if marks is None else marks
        problems = tuple(node_problems)
        result = None
        if self.result is not None and problems == self.problems:
            if devices is self.devices and marks is self.marks:
                memo.reused["deviceset"] += 1
                memo.carry("ledger")
                return self.result
            result = self._patch(policy, devices, marks, effective, memo)
        if result is None:
            result = _build(policy, snapshot, effective, node_problems, memo)
            self.at = {name_of(d): i for i, d in enumerate(result[0])}
            self.sound_at = {name_of(d): i for i, d in enumerate(result[2])}
            memo.computed["deviceset"] += 1
        self.devices, self.marks, self.problems, self.result = devices, marks, problems, result
        return result

    def _patch(self, policy: Policy, devices: Mapping, marks, effective,
               memo: DeriveMemo) -> DeviceLists | None:
        """The last result with the Devices that changed (or whose node's managed mark did) replaced;
        None when a list would change shape (a Devices added or removed, one refused or sound again)."""
        every, refused, sound, index = self.result
        names = {key[1] for key in changed_keys(self.devices, devices)}
        if marks is not self.marks:
            names |= changed_keys(self.marks, marks)
        every, sound, index = list(every), list(sound), dict(index)
        for name in names:
            obj = devices.get(("", name))
            if obj is None or name not in self.at:
                if obj is None and name not in self.at:
                    continue  # a node without Devices
                return None
            old = every[self.at[name]]
            new = mirrored(policy, obj, effective)
            own = memo.ledger_problems(policy, new, partial(ledger_problems, policy, new))
            if own or any(p.node == name for p in refused):
                return None  # refused now or before: the lists change shape
            every[self.at[name]] = new
            if name in self.sound_at:
                sound[self.sound_at[name]] = new
                move_in_index(index, self.sound_at[name], labels_of(old), labels_of(new))
        memo.reused["deviceset"] += 1
        memo.carry("ledger")
        return every, refused, sound, index


def move_in_index(index: dict, position: int, old: dict, new: dict) -> None:
    """Move ``position`` in the label ``index`` from the ``old`` labels to the ``new`` ones (the
    index's lists are replaced, never changed: the last result shares them)."""
    for item in old.items() - new.items():
        rest = [p for p in index[item] if p != position]
        if rest:
            index[item] = rest
        else:
            del index[item]
    for item in new.items() - old.items():
        index[item] = sorted([*index.get(item, []), position])


def _sound_devices(policy: Policy, devices: list[dict], problems: list[FactProblem],
                   memo: DeriveMemo | None = None) -> list[dict]:
    """``devices`` less those of nodes with a refused fact (decision 19): the node problems already in
    ``problems`` and each Devices object's own out-of-range ledger (:func:`ledger_problems`, appended)."""
    bad_nodes = {p.node for p in problems}
    out = []
    for obj in devices:
        own = ledger_problems(policy, obj) if memo is None else \
            memo.ledger_problems(policy, obj, partial(ledger_problems, policy, obj))
        problems.extend(own)
        if not own and name_of(obj) not in bad_nodes:
            out.append(obj)
    return out


def label_index(objects: list[dict]) -> dict[tuple[str, str], list[int]]:
    """(label key, value) -> positions in ``objects`` (ascending) of the objects carrying it."""
    index: dict[tuple[str, str], list[int]] = {}
    for i, obj in enumerate(objects):
        for item in labels_of(obj).items():
            index.setdefault(item, []).append(i)
    return index


def mirrored(policy: Policy, devices: dict, effective: dict[str, dict[str, str]]) -> dict:
    """One Devices object whose ``gpustack.ai/managed`` label mirrors the Node's effective label, as
    the agent keeps it (docs/agent.md "The Devices object and its ledger").

    ``effective``: node name -> effective labels (:func:`effective_node_labels`). An object whose
    label already mirrors the Node is returned as is; otherwise only its ``metadata``/``labels``
    are copied and ``spec``/``status`` stay shared with the snapshot (read-only, like every
    snapshot object): a deep copy of every ledger dominated derive time on large clusters.
    """
    managed = policy.key("managed")
    node_labels = effective.get(name_of(devices))
    current = labels_of(devices)
    if node_labels is None or node_labels.get(managed) == current.get(managed):
        return devices
    labels = dict(current)
    if managed in node_labels:
        labels[managed] = node_labels[managed]
    else:
        labels.pop(managed, None)
    return {**devices, "metadata": {**(devices.get("metadata") or {}), "labels": labels}}
