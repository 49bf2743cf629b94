"""Watch-cache protocol (list, resume, bookmarks, 410 relist) against the in-memory API (tests/fakeapi.py)
with scripted lists and watches, the settings seeding rules (docs/concepts/settings.md "Settings") and the
leader Lease on the same in-memory API, without a real API server."""
from __future__ import annotations

import base64
import threading
import time

import pytest

from runtime.controller import settings_seed
from runtime.controller.leader import LeaderElector
from runtime.kube.cache import KindCache, WatchedKind
from runtime.kube.session import KubeApiError
from tests.fakeapi import FakeApi


def node(name, rv, **labels):
    return {"metadata": {"name": name, "resourceVersion": str(rv), "labels": labels}}


def run_cache(session, **kw):
    events = []
    cache = KindCache(session, WatchedKind("Node"), on_event=lambda k, t, o: events.append((t, o.get("metadata", {}).get("name"))), **kw)
    cache.start()
    assert session.done.wait(5)
    cache.stop()
    cache.join(2)
    return cache, events


def test_list_then_watch_resumes_from_bookmarks_and_relists_on_410():
    session = FakeApi(
        lists=[{"apiVersion": "v1", "metadata": {"resourceVersion": "10"}, "items": [node("a", 5), node("b", 7)]},
               {"apiVersion": "v1", "metadata": {"resourceVersion": "40"}, "items": [node("a", 5), node("c", 39)]}],
        watches=[
            [{"type": "ADDED", "object": node("c", 11)},
             {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}],
            [{"type": "DELETED", "object": node("b", 21)},
             {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}],
            [{"type": "MODIFIED", "object": node("a", 41, x="1")}],
        ])
    cache, events = run_cache(session)
    # watch 1 starts at the list's version, watch 2 at the bookmark's, watch 3 after the relist
    assert [q["resourceVersion"] for q in session.watch_queries[:3]] == ["10", "20", "40"]
    assert all(q["allowWatchBookmarks"] == "true" and q["watch"] == "true" for q in session.watch_queries)
    assert cache.lists == 2 and cache.relists == 1
    assert sorted(o["metadata"]["name"] for o in cache.objects()) == ["a", "c"]
    assert cache.get("a")["metadata"]["labels"] == {"x": "1"}
    assert all(o["kind"] == "Node" for o in cache.objects())
    assert events[:2] == [("ADDED", "c"), ("DELETED", "b")]
    assert ("RELIST", None) in events and events[-1] == ("MODIFIED", "a")


def test_list_pages_are_followed():
    session = FakeApi(
        lists=[{"metadata": {"continue": "tok"}, "items": [node("a", 1)]},
               {"metadata": {"resourceVersion": "9"}, "items": [node("b", 2)]}],
        watches=[])
    cache, _ = run_cache(session, page_size=1)
    assert session.list_queries[0] == {"limit": 1} and session.list_queries[1] == {"limit": 1, "continue": "tok"}
    assert sorted(o["metadata"]["name"] for o in cache.objects()) == ["a", "b"]


def test_write_through_is_not_rolled_back_by_an_older_event():
    session = FakeApi(lists=[{"metadata": {"resourceVersion": "1"}, "items": []}], watches=[])
    cache = KindCache(session, WatchedKind("Node"))
    cache.observe(node("a", 50, v="new"))
    cache._handle({"type": "MODIFIED", "object": node("a", 49, v="old")})
    assert cache.get("a")["metadata"]["labels"] == {"v": "new"}
    cache._handle({"type": "MODIFIED", "object": node("a", 51, v="newer")})
    assert cache.get("a")["metadata"]["labels"] == {"v": "newer"}


def test_write_through_after_delete_event_does_not_resurrect():
    session = FakeApi(lists=[{"metadata": {"resourceVersion": "1"}, "items": []}], watches=[])
    cache = KindCache(session, WatchedKind("Node"))
    cache.observe(node("a", 10))
    cache._handle({"type": "DELETED", "object": node("a", 12)})
    cache.observe(node("a", 11))          # the answer to our last patch, processed late
    assert cache.get("a") is None
    gone = node("b", 20)
    gone["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=[])
    cache.observe(gone)
    assert cache.get("b") is None
    stopping = node("c", 21)              # a Pod-like graceful deletion: still there until confirmed
    stopping["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=30)
    cache.observe(stopping)
    assert cache.get("c") == stopping  # the held form (runtime/kube/held.py): equal, not the same dict
    cache.observe(node("a", 30))          # created again later
    assert cache.get("a") is not None


# -- settings seeding -----------------------------------------------------------------------------------
def b64(text):
    return base64.b64encode(text.encode()).decode()


def test_missing_secret_is_seeded_with_every_default_and_env_overrides(policy):
    data = settings_seed.missing_data(policy.settings, None, {"GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "true"})
    assert len(data) == 11
    assert base64.b64decode(data["instance-privileged-allowed"]).decode() == "true"
    assert base64.b64decode(data["instance-type-derived-from-node"]).decode() == "true"
    assert base64.b64decode(data["instance-ssh-server-image"]).decode() == "gpustack/ssh-server:v1.3.0"


def test_stored_keys_are_never_overwritten(policy):
    stored = {"instance-privileged-allowed": b64("false"), "not-a-setting": b64("x")}
    data = settings_seed.missing_data(policy.settings, stored, {"GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "true"})
    assert "instance-privileged-allowed" not in data and "not-a-setting" not in data
    assert len(data) == 10


def test_settings_namespace_env(policy):
    assert settings_seed.secret_namespace(policy.settings, {}) == "gpustack-system"
    assert settings_seed.secret_namespace(policy.settings, {"KUBERNETES_POD_NAMESPACE": "ops"}) == "ops"
    assert settings_seed.env_name(policy.settings, "workload-fit-affinity") == "GPUSTACK_WORKLOAD_FIT_AFFINITY"


# -- leader Lease ---------------------------------------------------------------------------------------
def lease_server() -> FakeApi:
    """The in-memory API serving Leases (resourceVersion checked on PUT, as the API server does)."""
    return FakeApi(kinds={"Lease": ("coordination.k8s.io/v1", "leases", True)})


def the_lease(server: FakeApi) -> dict:
    """The one Lease the server holds (the stored object: a change to it is the server's)."""
    (lease,) = server.objects["Lease"]
    return lease


def test_lease_is_exclusive_until_released_or_expired():
    server = lease_server()
    a = LeaderElector(server, "gpustack-operator-worker", "gpustack-system", "a", lease_seconds=15)
    b = LeaderElector(server, "gpustack-operator-worker", "gpustack-system", "b", lease_seconds=15)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    assert a.try_acquire_or_renew() is True          # renewal
    assert the_lease(server)["spec"]["holderIdentity"] == "a"
    a.leading = True
    a.release()
    assert the_lease(server)["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew() is True
    assert the_lease(server)["spec"]["leaseTransitions"] == 1
    # an expired holder is replaced
    the_lease(server)["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    assert a.try_acquire_or_renew() is True and the_lease(server)["spec"]["holderIdentity"] == "a"


def test_acquire_stops_when_asked():
    server = lease_server()
    LeaderElector(server, "l", "ns", "other").try_acquire_or_renew()
    stop = threading.Event()
    stop.set()
    assert LeaderElector(server, "l", "ns", "me", retry_seconds=0.01).acquire(stop) is False


@pytest.mark.parametrize("status, reason, retried", [(409, "Conflict", True), (409, "AlreadyExists", False),
                                                      (503, "", True), (404, "NotFound", False)])
def test_transient_errors_are_retried(status, reason, retried):
    from runtime.kube.applier import _transient
    assert _transient(KubeApiError(status, reason, "")) is retried


def test_age_counts_from_when_the_watch_broke_until_current_again(monkeypatch):
    """The cache's age (docs/availability.md "Serving while a watch cache relists"): 0 while watching; from the moment the watch broke through a
    reopened watch that fails before its first event and the relist that follows; 0 after the relist;
    the objects held are served all along."""
    clock = [100.0]
    monkeypatch.setattr("runtime.kube.cache.time.monotonic", lambda: clock[0])
    session = FakeApi(lists=[{"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]},
                                 {"metadata": {"resourceVersion": "40"}, "items": [node("a", 30)]}],
                          watches=[[{"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}]])
    cache = KindCache(session, WatchedKind("Node"))
    assert cache.age() is None                         # nothing listed: nothing served
    cache._list()
    assert cache.age() == 0.0
    clock[0] = 110.0
    cache._went_stale()                                # e.g. the API server went away
    clock[0] = 115.0
    assert cache.age() == 5.0 and [o["metadata"]["resourceVersion"] for o in cache.objects()] == ["5"]
    with pytest.raises(Exception):                     # back: the resumed watch answers 410 at once
        cache._watch()
    cache._went_stale()
    clock[0] = 118.0
    assert cache.age() == 8.0                          # still since 110, not since the reopen
    cache._list()
    assert cache.age() == 0.0 and [o["metadata"]["resourceVersion"] for o in cache.objects()] == ["30"]


def test_a_watch_request_answered_410_relists_like_an_expired_stream():
    """An API server restarted above the held version answers the resumed watch request itself with 410
    (not an ERROR event): the same relist and the same log line (the fault suite's watch-expiry check reads
    it, e2e/chaos/faults.py), and it is not counted as a transport error."""
    from loguru import logger
    lines = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="INFO")
    try:
        session = FakeApi(
            lists=[{"metadata": {"resourceVersion": "10"}, "items": [node("a", 5)]},
                   {"metadata": {"resourceVersion": "40"}, "items": [node("a", 30)]}],
            watches=[KubeApiError(410, "Expired", "too old resource version: 10 (35)"),
                     [{"type": "MODIFIED", "object": node("a", 41)}]])
        cache, _ = run_cache(session)
    finally:
        logger.remove(sink)
    assert [q["resourceVersion"] for q in session.watch_queries[:2]] == ["10", "40"]
    assert (cache.lists, cache.relists, cache.errors) == (2, 1, 0)   # the script's closing 503 comes after stop()
    assert "Node watch expired (410 Gone): relisting (serving the 1 objects held meanwhile)" in lines


def test_renewal_gives_up_before_the_lease_expires_and_leads_again_while_it_names_us():
    """client-go's RenewDeadline (docs/availability.md "Availability: admission through faults, and a start that loses nothing"): renewal failing for the 10 s deadline calls on_lost while
    the Lease (15 s) is still ours, so nobody else can lead yet; once the API server answers again, the
    same identity leads at once; a deadline not below the duration is refused."""
    server = lease_server()
    elector = LeaderElector(server, "l", "ns", "me", renew_seconds=0.05, renew_deadline_seconds=0.3,
                            lease_seconds=15)
    stop = threading.Event()
    assert elector.acquire(stop) is True and elector.leading
    real_call, down = server.call, threading.Event()

    def call(method, path, body=None, **kw):
        if down.is_set():
            raise KubeApiError(0, "Unreachable", "connection refused")
        return real_call(method, path, body, **kw)
    server.call = call
    lost = threading.Event()
    elector.keep_renewing(on_lost=lost.set)
    down.set()
    t0 = time.monotonic()
    assert lost.wait(5.0)
    assert time.monotonic() - t0 < 2.0 and elector.leading is False
    down.clear()
    assert the_lease(server)["spec"]["holderIdentity"] == "me"
    other = LeaderElector(server, "l", "ns", "other")
    assert other.try_acquire_or_renew() is False      # not expired: still ours
    assert elector.acquire(stop) is True               # the same identity leads again at once
    with pytest.raises(ValueError, match="renew deadline 15s must be below the lease duration 15s"):
        LeaderElector(server, "l", "ns", "x", renew_deadline_seconds=15, lease_seconds=15)
