"""durable_rules behind one narrow backend: compile a decision table -> handle; evaluate -> row.

durable_rules keeps module-global state, refuses a ruleset name twice and (through its ``Host``)
starts timer threads. This module never creates a ``Host``: it uses the C engine directly, names
each ruleset ``<table>-g<generation>-<n>`` so a reload never collides, uses a fresh session id per
evaluation and deletes that session's state afterwards. It is the only importer of durable_rules.

First-match semantics: row ``i`` becomes rule ``r<i>`` with salience ``pri: i``; a catch-all rule
(``$ex sid``) with the lowest salience reports "no row matched". The first action the engine
starts is therefore the earliest matching row.
"""
from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import durable_rules_engine as _dre

_COUNTER = itertools.count(1)
_LOCK = threading.Lock()
_NO_MATCH = "nomatch"


class DurableBackendError(RuntimeError):
    """The engine refused a ruleset or failed to evaluate a fact."""


@dataclass(frozen=True)
class DurableHandle:
    """A compiled ruleset: the engine handle, its name and the number of rows."""

    handle: Any
    name: str
    rows: int


def compile_table(table: str, generation: int, conditions: Sequence[Mapping[str, Any]]) -> DurableHandle:
    """Compile first-match rows (each a ``{fact: value}`` conjunction; empty = always) into a ruleset."""
    definition: dict[str, Any] = {}
    for i, cond in enumerate(conditions):
        if cond:
            terms = [{fact: value} for fact, value in cond.items()]
            match = terms[0] if len(terms) == 1 else {"$and": terms}
        else:
            match = {"$ex": {"sid": 1}}
        definition[f"r{i}"] = {"pri": i, "all": [{"m": match}]}
    definition[_NO_MATCH] = {"pri": len(conditions) + 1, "all": [{"m": {"$ex": {"sid": 1}}}]}
    name = f"{table}-g{generation}-{next(_COUNTER)}"
    with _LOCK:
        try:
            handle = _dre.create_ruleset(name, json.dumps(definition))
        except Exception as exc:  # durable_rules_engine.error
            raise DurableBackendError(f"decision table {table}: engine refused the ruleset: {exc}") from exc
    return DurableHandle(handle=handle, name=name, rows=len(conditions))


def first_match(compiled: DurableHandle, facts: Mapping[str, Any]) -> int | None:
    """Index of the first row whose conditions all hold for ``facts``, or None."""
    with _LOCK:
        sid = f"s{next(_COUNTER)}"
        message = dict(facts)
        message["sid"] = sid
        message["id"] = sid
        try:
            result = _dre.assert_event(compiled.handle, json.dumps(message))
            started = _dre.start_action_for_state(compiled.handle, result[1])
        except Exception as exc:
            raise DurableBackendError(f"ruleset {compiled.name}: evaluation failed: {exc}") from exc
        finally:
            try:
                _dre.delete_state(compiled.handle, sid)
            except Exception:  # noqa: BLE001 - nothing to clean when the session never started
                pass
    if not started:
        return None
    action = next(iter(json.loads(started[1])))
    if action == _NO_MATCH:
        return None
    return int(action[1:])
