"""Accelerator health judged by rules (docs/concepts/out-of-service.md "Health"): the probe's facts
(runtime/model/facts.py ``AcceleratorFacts.health`` and ``healthy``) against rules/health.yaml, with a clean
period and hysteresis.

:func:`judge` gives, per accelerator, its health record (what the Devices ``spec`` carries under
``status.health``: ``fact``, ``rule``, ``lastFailure``, ``until``, ``strikes``, and whether it is out of
service now) and the transitions to report. An accelerator whose fact matches a rule (first match wins) is
unhealthy while the fact is read and ``cleanSeconds`` after the first pass that no longer reads it; a
failure within ``repeat.withinSeconds`` of the previous one's start, or one read during the clean period, is
a repeat (one more strike) and multiplies the clean period by ``repeat.factor`` (at most
``repeat.maxCleanSeconds``). The history is the record the node's Devices
already carries (``previous``), so a restarted agent keeps it. Pure: ``now`` is passed in.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Mapping

from runtime.engine.devices.ledger import LedgerEvent
from runtime.engine.devices.maintenance import parse_time
from runtime.engine.policy import Policy
from runtime.model.facts import AcceleratorFacts
from runtime.model.health import AcceleratorHealthSpec, HealthRule
from runtime.model.rfc3339 import format_time


def health_rules(policy: Policy) -> AcceleratorHealthSpec | None:
    """rules/health.yaml, or None when the rules hold no AcceleratorHealth (then only a lost device is
    unhealthy, while it is lost)."""
    try:
        return policy.ruleset.get("AcceleratorHealth")
    except KeyError:
        return None


@dataclass(frozen=True)
class Transition:
    """An accelerator going ``unhealthy`` or ``healthy`` (``to``), by ``rule`` on ``fact``; ``until``:
    the end of its clean period (RFC 3339), ``strikes``: its failures within the repeat window."""

    uuid: str
    index: int
    to: str
    fact: str
    rule: str
    until: str
    strikes: int


def matching_rule(rules: AcceleratorHealthSpec, acc: AcceleratorFacts) -> tuple[HealthRule, str] | None:
    """(the first rule whose fact holds for ``acc``, the fact as read: ``xid 79``,
    ``eccUncorrectableVolatile 2``, ``remappedRowsPending``, ``lost``), or None."""
    facts = acc.health
    for rule in rules.rules:
        if rule.fact == "lost":
            if not acc.healthy:
                return rule, "lost"
            continue
        if facts is None:
            continue
        if rule.fact == "xid":
            hit = next((x for x in facts.xids if x in rule.xids), None)
            if hit is not None:
                return rule, f"xid {hit}"
        elif rule.fact == "eccUncorrectableVolatile":
            value = facts.eccUncorrectableVolatile
            if value is not None and value > (rule.above or 0):
                return rule, f"eccUncorrectableVolatile {value}"
        elif getattr(facts, rule.fact):
            return rule, rule.fact
    return None


def _record(fact: str, rule: str, last: datetime, strikes: int, out: bool, until: datetime | None) -> dict:
    record = {"fact": fact, "rule": rule, "lastFailure": format_time(last), "strikes": strikes,
              "unhealthy": out}
    if until is not None:
        record["until"] = format_time(until)
    return record


def judge_one(rules: AcceleratorHealthSpec, acc: AcceleratorFacts, previous: Mapping | None, was_out: bool,
              now: datetime) -> tuple[dict | None, Transition | None]:
    """(the accelerator's record at ``now``, or None when it has no history worth keeping; the transition
    to report, or None). ``previous``: the record its Devices carries; ``was_out``: whether its Devices
    says it is unhealthy now.

    While a fact holds the record carries no ``until`` and does not change from pass to pass (no write);
    the first pass without it starts the clean period (``until``); a fact read again before ``until`` is a
    repeat. ``lastFailure`` is when the failure began; the repeat window counts from it.
    """
    hit = matching_rule(rules, acc)
    prev = dict(previous or {})
    last, until = parse_time(prev.get("lastFailure")), parse_time(prev.get("until"))
    strikes = int(prev.get("strikes") or 0)
    known = last is not None and bool(prev.get("rule"))
    if hit is not None:
        rule, fact = hit
        if known and until is None:                   # the same failure, still read
            return _record(fact, rule.name, last, strikes, True, None), None
        if known and now < until:                     # read again during its clean period: a repeat
            strikes, last = strikes + 1, now
        else:
            repeat = known and (now - last).total_seconds() < rules.repeat.withinSeconds
            strikes, last = (strikes + 1 if repeat else 1), now
        record = _record(fact, rule.name, last, strikes, True, None)
        moved = None if was_out else Transition(
            acc.uuid, acc.index, "unhealthy", fact, rule.name,
            format_time(now + timedelta(seconds=rules.clean_seconds(strikes))), strikes)
        return record, moved
    if not known:
        return None, None
    if until is None:                                 # no fact any more: the clean period starts now
        until = now + timedelta(seconds=rules.clean_seconds(strikes))
    out = now < until
    record = _record(prev.get("fact", ""), prev.get("rule", ""), last, strikes, out, until)
    moved = None
    if was_out and not out:
        moved = Transition(acc.uuid, acc.index, "healthy", record["fact"], record["rule"], record["until"],
                           strikes)
    if not out and (now - last).total_seconds() >= rules.repeat.withinSeconds:
        return None, moved   # past the repeat window: the history is forgotten
    return record, moved


def judge(policy: Policy, accelerators: Iterable[AcceleratorFacts], devices: Mapping | None,
          now: datetime) -> tuple[dict[str, dict], list[Transition], datetime | None]:
    """(accelerator UUID -> its health record, the transitions, the earliest clean-period end ahead: when
    the agent looks again) for the node's ``accelerators`` at ``now``; ``devices``: the node's Devices as the
    cluster holds it (the history). Without rules/health.yaml: no records (a lost device is unhealthy while
    it is lost, as the facts say)."""
    rules = health_rules(policy)
    if rules is None:
        return {}, [], None
    groups = ((devices or {}).get("spec") or {}).get("groups") or []
    history = {str(a.get("id")): a.get("status") or {} for g in groups for a in g.get("accelerators") or []}
    records: dict[str, dict] = {}
    moves: list[Transition] = []
    wake: datetime | None = None
    for acc in accelerators:
        status = history.get(acc.uuid, {})
        record, moved = judge_one(rules, acc, status.get("health"), bool(status.get("unhealthy")), now)
        if record is not None:
            records[acc.uuid] = record
            until = parse_time(record.get("until"))
            if until is not None and until > now:
                wake = until if wake is None else min(wake, until)
        if moved is not None:
            moves.append(moved)
    return records, moves, wake


def as_read(policy: Policy, accelerators: Iterable[AcceleratorFacts],
            devices: Mapping | None) -> dict[str, dict]:
    """The health records of a reading without a clock (offline planning of a DRA node, the rule suites):
    the record the node's Devices already carries for an accelerator, as it says (its ``unhealthy``); else,
    when a rule's fact holds, a first failure (unhealthy, no ``until`` yet)."""
    rules = health_rules(policy)
    if rules is None:
        return {}
    groups = ((devices or {}).get("spec") or {}).get("groups") or []
    history = {str(a.get("id")): a.get("status") or {} for g in groups for a in g.get("accelerators") or []}
    out: dict[str, dict] = {}
    for acc in accelerators:
        status = history.get(acc.uuid, {})
        if status.get("health"):
            out[acc.uuid] = {**status["health"], "unhealthy": bool(status.get("unhealthy"))}
            continue
        hit = matching_rule(rules, acc)
        if hit is not None:
            out[acc.uuid] = {"fact": hit[1], "rule": hit[0].name, "strikes": 1, "unhealthy": True}
    return out


def health_events(policy: Policy, node: str, moves: Iterable[Transition]) -> list[LedgerEvent]:
    """One Event on the node's Devices per transition, naming the accelerator, the fact and the rule
    (rules/health.yaml ``events``: Warning going out, Normal coming back)."""
    rules = health_rules(policy)
    if rules is None:
        return []
    out = []
    for move in moves:
        spec = rules.events.unhealthy if move.to == "unhealthy" else rules.events.healthy
        message = spec.message.format(node=node, accelerator=move.uuid, index=move.index, fact=move.fact,
                                      rule=move.rule, until=move.until, strikes=move.strikes)
        out.append(LedgerEvent("Devices", "", node, spec.reason, message,
                               "Warning" if move.to == "unhealthy" else "Normal"))
    return out
