"""The controller reads the time from one injected clock: a Controller built with a fixed ``clock``
stamps that time in what it writes (the AdmissionCheck's ``Active`` transition planned by the pool
plan, the InvalidSetting Event of a pass step), on the in-memory API of tests/fakeapi.py."""
from __future__ import annotations

import base64
from datetime import datetime, timezone

from runtime.controller.reconciler import Controller
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
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
