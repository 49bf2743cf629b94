"""docs/webhook-hardening.md "Bounded memory": memo keys are type-tagged content digests; memo tables are bounded."""
from __future__ import annotations

import gc

import pytest

from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
from runtime.engine.admission.memokeys import _key_of
from runtime.engine.policy import Policy
from runtime.rules.cel.compile import compile_expression
from runtime.rules.cel.runtime import cel_runtime
from runtime.rules.loader import load_rules
from runtime.rules.memo import BoundedMemo, fingerprint


@pytest.mark.parametrize("first, second, want", [
    (1, True, ("1", "True")),  # cel-python spells string(true) "True"
    (1, 1.0, ("1", "1.0")),
    (0, False, ("0", "False")),
    ([1], [True], ("1", "True")),
    ({"a": 1}, {"a": True}, ("1", "True")),
])
def test_cel_memo_tells_types_apart(first, second, want):
    source = {int: "string(x)", list: "string(x[0])", dict: "string(x.a)"}[type(first)]
    expr = compile_expression(source, "test")
    fresh = compile_expression(source, "test")
    assert (expr.evaluate({"x": first}), expr.evaluate({"x": second})) == want
    assert fresh.evaluate({"x": second}, memo=False) == want[1]


def test_fingerprints_tag_types_and_map_key_types():
    values = [1, True, 1.0, "1", None, [1], [True], {"1": 1}, {1: 1}, {"a": 1}, {"a": True}]
    prints = [fingerprint(v) for v in values]
    assert len(set(prints)) == len(values)
    assert fingerprint({"a": [1, {"b": "c"}]}) == fingerprint({"a": [1, {"b": "c"}]})


def test_engine_key_parts_tag_types_and_digest_containers():
    digests: dict = {}
    assert len({_key_of(v, digests) for v in (1, True, 1.0, "1", None)}) == 5
    big = {"spec": {"x": "y" * 10_000}}
    key = _key_of(big, digests)
    assert isinstance(key, bytes) and len(key) == 16  # the key never holds the object
    assert _key_of("z" * 10_000, digests) == fingerprint("z" * 10_000)


def test_bounded_memo_evicts_by_entries_and_by_bytes():
    memo = BoundedMemo(max_entries=3, max_bytes=1 << 20)
    for i in range(5):
        memo.put(i, i)
    assert len(memo) == 3 and memo.get(0) is None and memo.get(4) == 4
    memo = BoundedMemo(max_entries=1000, max_bytes=40_000)
    for i in range(20):
        memo.put(i, "x" * 5_000)
    assert memo.bytes <= 40_000 and 0 < len(memo) < 20
    memo.put("huge", "x" * 20_000)  # over a quarter of the bound: not kept
    assert memo.get("huge") is None


def test_a_review_object_is_not_kept_after_its_review():
    """The engine's memo holds results, never the request: the review object is freed afterwards."""
    import weakref

    policy = Policy(load_rules())
    engine = AdmissionEngine(policy)
    view = admission_view(policy, None)

    class Tracked(dict):
        pass

    pod = Tracked({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}]}})
    ref = weakref.ref(pod)
    body = review_for(pod)
    decide(engine, body, view, "pods-validation")
    del pod, body
    gc.collect()
    assert ref() is None


def test_every_cel_expression_shares_one_memo_bounded_for_the_process(monkeypatch):
    """Each expression had its own 32 MiB memo: ~500 expressions of a rules generation could hold
    ~16 GiB. Now one table bounds them all (here shrunk to 100 kB to see it)."""
    shared = BoundedMemo(max_entries=1000, max_bytes=100_000)
    monkeypatch.setattr(cel_runtime(), "memo", shared)
    exprs = [compile_expression(f"x + '{i}'", "test") for i in range(40)]
    for i, expr in enumerate(exprs):
        assert expr.evaluate({"x": "y" * 10_000}) == "y" * 10_000 + str(i)
    assert 0 < len(shared) < 40 and shared.bytes <= 100_000
    assert exprs[-1].evaluate({"x": "y" * 10_000}) == "y" * 10_000 + "39"   # a hit of the newest entry
    assert exprs[0].evaluate({"x": "z"}) == "z0" and exprs[1].evaluate({"x": "z"}) == "z1"   # keys per expression


def test_the_engine_memo_and_the_cel_memo_have_the_one_bound():
    """runtime.rules.memo's MEMO_ENTRIES / MEMO_BYTES bound both memos (docs/webhook-hardening.md)."""
    from runtime.rules.cel.runtime import CelRuntime
    from runtime.rules.memo import MEMO_BYTES, MEMO_ENTRIES

    assert (MEMO_ENTRIES, MEMO_BYTES) == (65536, 32 * 1024 * 1024)
    engine = AdmissionEngine(Policy(load_rules()))
    for memo in (engine._memo, CelRuntime().memo):
        assert (memo.max_entries, memo.max_bytes) == (65536, 33554432)
