"""Decision 19 (docs/node-facts-robustness.md "A malformed fact costs only its node (decision 19)"): a
malformed node fact costs only the node that carries it.

* :func:`read_count` - a ``.count`` label (cores, accelerators of a group) as an integer inside
  ``factChecks.countMin..countMax`` of rules/node-facts.yaml, or the reason it is not one.
* :func:`read_memory` - an accelerator ``.memory`` label as a quantity of ``1Mi..memoryMibMax`` Mi.
  * :func:`ledger_sound` / :func:`ledger_problems` - whether / which fields of a Devices object whose numbers
  are out of range (``remaining``/``allocated`` outside ``0..D``, a mode that is not one of rules/agent.yaml
  ``ledger.modes``, slice and profile counts outside ``0..countMax``, memory outside
  ``0..memoryMibMax``). A Devices object with any problem counts in no view.

Both return data (:class:`FactProblem`) that the caller renders with the messages of
``factChecks.messages``, so the audit can report the same facts the warnings name.
"""
from __future__ import annotations

from dataclasses import dataclass

from runtime.engine.devices.nodefacts import agent_rules
from runtime.engine.policy import Policy
from runtime.model.normalize import QuantityError, parse_quantity


@dataclass(frozen=True)
class FactProblem:
    """One rejected fact: the node, the label key or Devices field path, the value as read, and the
    warning text (rules/node-facts.yaml ``factChecks.messages``)."""

    node: str
    key: str
    value: str
    message: str


def read_count(policy: Policy, value: str | None) -> tuple[int, str]:
    """(count, reason) of a count label; reason is "" when the value counts, ``"notInteger"`` or
    ``"outOfRange"`` otherwise (count 0 then). An absent label is (0, "")."""
    if value is None:
        return 0, ""
    limits = policy.node_facts.factChecks
    text = str(value).strip()
    if not text.lstrip("+-").isdigit() or not text.isascii():
        return 0, "notInteger"
    number = int(text)
    if not limits.countMin <= number <= limits.countMax:
        return 0, "outOfRange"
    return number, ""


def read_memory(policy: Policy, value: str | None) -> str:
    """"" when an accelerator ``.memory`` label reads as a quantity of ``1..memoryMibMax`` MiB (or is
    absent), else the reason (``"notQuantity"``, ``"outOfRange"``)."""
    if value is None:
        return ""
    try:
        number = parse_quantity(value)
    except QuantityError:
        return "notQuantity"
    if not 2 ** 20 <= number <= policy.node_facts.factChecks.memoryMibMax * 2 ** 20:
        return "outOfRange"
    return ""


def count_problem(policy: Policy, node: str, key: str, value: str, reason: str,
                  akey: str = "") -> FactProblem:
    """The :class:`FactProblem` of a label :func:`read_count` or :func:`read_memory` refused (``akey``
    "" for the CPU count); the range named is the one of the key's suffix (count, cores, memory)."""
    limits = policy.node_facts.factChecks
    messages = limits.messages
    what = messages.deviceFlavor.format(akey=akey) if akey else messages.cpuFlavor
    template = getattr(messages, reason)
    low, high = limits.countMin, limits.countMax
    if key.endswith(agent_rules(policy).suffixes.memory):
        low, high = "1Mi", f"{limits.memoryMibMax}Mi"
    elif key.endswith(agent_rules(policy).suffixes.cores):
        low = 0
    return FactProblem(node=node, key=key, value=value,
                       message=template.format(node=node, key=key, value=value, what=what, low=low,
                                               high=high))


def _ledger_modes(policy: Policy) -> set[int]:
    """The mode numbers of rules/agent.yaml ``ledger.modes``."""
    return set(agent_rules(policy).ledger.modes.model_dump().values())


def _bounds(policy: Policy) -> tuple[int, int, int, frozenset[int]]:
    """(D, countMax, memoryMibMax, ledger modes), looked up once per Policy."""
    cache = policy.__dict__.setdefault("_fact_bounds", [])
    if not cache:
        limits = policy.node_facts.factChecks
        cache.append((policy.constants.creditsPerAccelerator, limits.countMax, limits.memoryMibMax,
                      frozenset(_ledger_modes(policy))))
    return cache[0]


def ledger_sound(policy: Policy, devices: dict) -> bool:
    """True when :func:`ledger_problems` finds nothing (the fast check every reader of a Devices
    object runs; the messages are built only for an object that fails it). Comparisons are inline:
    this runs for every Devices object of every derive."""
    d, cmax, mmax, modes = _bounds(policy)
    for group in (devices.get("spec") or {}).get("groups") or []:
        for acc in group.get("accelerators") or []:
            status = acc.get("status") or {}
            physical = status.get("physicalSliced") or {}
            for value in (acc.get("index"), (status.get("logicalSliced") or {}).get("count"),
                          physical.get("count")):
                if value is not None and (type(value) is not int or not 0 <= value <= cmax):
                    return False
            for prof in physical.get("profiles") or []:
                count, mib = prof.get("count"), prof.get("memoryMib")
                if count is not None and (type(count) is not int or not 0 <= count <= cmax):
                    return False
                if mib is not None and (type(mib) is not int or not 0 <= mib <= mmax):
                    return False
    for group in (devices.get("status") or {}).get("groups") or []:
        for acc in group.get("accelerators") or []:
            mode = acc.get("mode")
            if mode is not None and (type(mode) is not int or mode not in modes):
                return False
            for value, high in ((acc.get("index"), cmax), (acc.get("remaining"), d),
                                (acc.get("allocated"), d), (acc.get("allocatedSlices"), cmax)):
                if value is not None and (type(value) is not int or not 0 <= value <= high):
                    return False
            for key in ("allocatedProfiles", "remainingProfiles"):
                for prof in acc.get(key) or []:
                    count = prof.get("count")
                    if count is not None and (type(count) is not int or not 0 <= count <= cmax):
                        return False
    return True


def ledger_problems(policy: Policy, devices: dict) -> list[FactProblem]:
    """Out-of-range numbers of one Devices object (spec and status), in field order; [] when sound.

    Types were checked when the object entered the snapshot (:data:`runtime.engine.snapshot.DEVICES_SHAPE`);
    a value of the wrong type here (a live object) is a problem too.
    """
    if ledger_sound(policy, devices):
        return []
    limits = policy.node_facts.factChecks
    d = policy.constants.creditsPerAccelerator
    node = ((devices.get("metadata") or {}).get("name")) or "<unnamed>"
    out: list[FactProblem] = []

    def check(path: str, value, low: int, high: int) -> None:
        if value is None:
            return
        if type(value) is not int or not low <= value <= high:
            out.append(FactProblem(node=node, key=path, value=str(value),
                                   message=limits.messages.ledger.format(
                node=node, field=path, value=value, low=low, high=high)))

    cmax, mmax = limits.countMax, limits.memoryMibMax
    modes = _ledger_modes(policy)
    for side in ("spec", "status"):
        for gi, group in enumerate((devices.get(side) or {}).get("groups") or []):
            for ai, acc in enumerate(group.get("accelerators") or []):
                at = f"{side}.groups[{gi}].accelerators[{ai}]"
                check(f"{at}.index", acc.get("index"), 0, cmax)
                if side == "spec":
                    status = acc.get("status") or {}
                    check(f"{at}.status.logicalSliced.count",
                          (status.get("logicalSliced") or {}).get("count"), 0, cmax)
                    physical = status.get("physicalSliced") or {}
                    check(f"{at}.status.physicalSliced.count", physical.get("count"), 0, cmax)
                    for pi, prof in enumerate(physical.get("profiles") or []):
                        check(f"{at}.status.physicalSliced.profiles[{pi}].count", prof.get("count"), 0, cmax)
                        check(f"{at}.status.physicalSliced.profiles[{pi}].memoryMib", prof.get("memoryMib"),
                              0, mmax)
                    continue
                mode = acc.get("mode")
                if mode is not None and (type(mode) is not int or mode not in modes):
                    out.append(FactProblem(node=node, key=f"{at}.mode", value=str(mode),
                                           message=limits.messages.ledger.format(
                                               node=node, field=f"{at}.mode", value=mode,
                                               low=min(modes), high=max(modes))))
                check(f"{at}.remaining", acc.get("remaining"), 0, d)
                check(f"{at}.allocated", acc.get("allocated"), 0, d)
                check(f"{at}.allocatedSlices", acc.get("allocatedSlices"), 0, cmax)
                for key in ("allocatedProfiles", "remainingProfiles"):
                    for pi, prof in enumerate(acc.get(key) or []):
                        check(f"{at}.{key}[{pi}].count", prof.get("count"), 0, cmax)
    return out
