"""apply_writes copies only along the written paths (docs/performance.md "A pass proportional to what changed"): the object is never changed, the
mutated object is what the writes make of a deep copy, and a later write beneath an earlier one
reaches the earlier one's operation."""
from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.engine.admission.patch import REMOVE, apply_writes

_LEAF = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab", max_size=2)
_JSON = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=12)
_SEG = st.sampled_from(["a", "b", "c"]) | st.integers(0, 2)


def _reference(obj, writes):
    """The writes' meaning on a deep copy, written plainly (a missing map on the way is created, a
    removal beneath a missing map does nothing); ValueError where apply_writes raises it."""
    doc = copy.deepcopy(obj)
    for path, value in writes:
        value = value if value is REMOVE else copy.deepcopy(value)
        cur = doc
        for i, seg in enumerate(path[:-1]):
            if isinstance(cur, list):
                if not isinstance(seg, int) or not 0 <= seg < len(cur):
                    raise ValueError(path)
                cur = cur[seg]
                continue
            if not isinstance(cur, dict):
                raise ValueError(path)
            if cur.get(seg) is None:
                if value is not REMOVE:
                    for s in reversed(path[i + 1:]):
                        value = {s: value}
                    cur[seg] = value
                break
            cur = cur[seg]
        else:
            last = path[-1]
            if value is REMOVE:
                if isinstance(cur, dict):
                    cur.pop(last, None)
            elif isinstance(cur, list) and isinstance(last, int) and 0 <= last < len(cur) or isinstance(cur, dict):
                cur[last] = value
            else:
                raise ValueError(path)
    return doc


@settings(max_examples=500, deadline=None)
@given(obj=st.dictionaries(st.sampled_from("abc"), _JSON, max_size=3),
       writes=st.lists(st.tuples(st.lists(_SEG, min_size=1, max_size=3).map(tuple), _JSON | st.just(REMOVE)),
                       max_size=4, unique_by=lambda w: w[0]))  # one write per path (rules write each once)
def test_copy_on_write_keeps_the_object_and_equals_the_writes_on_a_deep_copy(obj, writes):
    before = copy.deepcopy(obj)
    try:
        expected = _reference(obj, writes)
    except ValueError:  # a path through a scalar or out of range: a rule bug, reported
        with pytest.raises(ValueError):
            apply_writes(obj, writes)
        assert obj == before
        return
    mutated, _ = apply_writes(obj, writes)
    assert obj == before
    assert mutated == expected


def test_a_write_beneath_an_earlier_value_lands_in_its_operation_and_shares_the_rest():
    obj = {"spec": {"containers": [{"name": "a", "resources": {}}], "volumes": [{"name": "v"}]},
           "metadata": {"labels": {"x": "1"}}}
    mutated, ops = apply_writes(obj, [(("spec", "containers", 0, "resources"), {"limits": {}}),
                                      (("spec", "containers", 0, "resources", "limits", "cpu"), "1")])
    assert ops == [{"op": "replace", "path": "/spec/containers/0/resources", "value": {"limits": {"cpu": "1"}}},
                   {"op": "add", "path": "/spec/containers/0/resources/limits/cpu", "value": "1"}]  # as with a deep copy
    assert obj["spec"]["containers"][0]["resources"] == {}
    assert mutated["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "1"}}
    assert mutated["metadata"] is obj["metadata"] and mutated["spec"]["volumes"] is obj["spec"]["volumes"]
    assert mutated["spec"] is not obj["spec"] and mutated["spec"]["containers"][0] is not obj["spec"]["containers"][0]
