"""The controller reads the time from one injected clock: a Controller built with a fixed ``clock``
stamps that time in what it writes (the AdmissionCheck's ``Active`` transition planned by the pool
plan, the InvalidSetting Event of a pass step), on the in-memory API of tests/fakeapi.py."""
from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from cryptography import x509

from runtime.controller.leader import LeaderElector
from runtime.controller.reconciler import Controller
from runtime.controller.servingcert import CERT_KEY, issue, rotation_reason, service_names
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from tests.controller.test_cache_and_seed import lease_server, the_lease
from tests.controller.test_pass_writes import seed_api

FIXED = datetime(2031, 4, 5, 6, 7, 8, tzinfo=timezone.utc)


def test_a_fixed_clock_is_the_time_the_controller_writes():
    api = seed_api()
    (secret,) = api.objects["Secret"]
    secret["data"]["node-management-manual"] = base64.b64encode(b"perhaps").decode()  # not a bool
    controller = Controller(api, Policy(load_rules()), env={}, fit_coalesce_seconds=0, tune_gc=False,
                            clock=lambda: FIXED)
    controller.cache.start()
    try:
        assert controller.cache.wait_synced(10)
        result = controller.reconcile()
    finally:
        api.stop.set()
        controller.cache.stop()
    assert result.errors == []
    (check,) = api.objects["AdmissionCheck"]
    assert [c["lastTransitionTime"] for c in check["status"]["conditions"]] == ["2031-04-05T06:07:08Z"]
    (event,) = [e for e in api.objects.get("Event", []) if e.get("reason") == "InvalidSetting"]
    assert event["involvedObject"]["name"] == "gpustack-settings"
    assert (event["firstTimestamp"], event["lastTimestamp"]) == ("2031-04-05T06:07:08Z", "2031-04-05T06:07:08Z")


def test_the_default_clock_is_aware_utc():
    controller = Controller(seed_api(), Policy(load_rules()), env={}, tune_gc=False)
    now = controller.clock()
    assert now.tzinfo is not None and now.utcoffset().total_seconds() == 0
    assert controller.device_classes.clock is controller.clock


def test_the_lease_is_written_and_judged_by_the_electors_clock():
    """docs/availability.md "Losing the leader Lease": a Lease is taken over once ``leaseDurationSeconds`` have
    passed on the candidate's clock since the holder's ``renewTime``, and never sooner."""
    server = lease_server()
    holder = LeaderElector(server, "gpustack-operator-worker", "gpustack-system", "a", lease_seconds=15,
                           clock=lambda: FIXED)
    assert holder.try_acquire_or_renew() is True
    spec = the_lease(server)["spec"]
    assert (spec["acquireTime"], spec["renewTime"]) == ("2031-04-05T06:07:08.000000Z",) * 2
    at_expiry = LeaderElector(server, "gpustack-operator-worker", "gpustack-system", "b", lease_seconds=15,
                              clock=lambda: FIXED + timedelta(seconds=15))
    assert at_expiry.try_acquire_or_renew() is False and the_lease(server)["spec"]["holderIdentity"] == "a"
    after = LeaderElector(server, "gpustack-operator-worker", "gpustack-system", "b", lease_seconds=15,
                          clock=lambda: FIXED + timedelta(seconds=16))
    assert after.try_acquire_or_renew() is True
    assert (the_lease(server)["spec"]["holderIdentity"], the_lease(server)["spec"]["acquireTime"]) == (
        "b", "2031-04-05T06:07:24.000000Z")


def test_a_serving_certificate_is_issued_and_judged_by_its_clock():
    """docs/tasks/install.md "With Helm" (``certMode: accelpolicy``): a leaf valid ``days`` from the
    issuer's now; within ``renew_days`` of its end it must be re-issued."""
    names = service_names("gpustack-system", "gpustack-operator-worker")
    data = issue(names, days=90, now=FIXED)
    leaf = x509.load_pem_x509_certificate(data[CERT_KEY])
    assert leaf.not_valid_before_utc <= FIXED and leaf.not_valid_after_utc == FIXED + timedelta(days=90)
    assert rotation_reason(data, names, 90, 30, FIXED + timedelta(days=59)) is None
    assert rotation_reason(data, names, 90, 30, FIXED + timedelta(days=61)) is not None
