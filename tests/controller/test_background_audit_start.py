"""When the background audit first runs in a leader term (docs/performance.md "Fast to start, light to hold"): after the controller's first pass
of that term, not beside it (the two share one interpreter; at 10,000 nodes together they made the
first pass 13.5-16.8 s instead of 7.6-10.2)."""
from __future__ import annotations

import threading

from runtime.controller.backgroundaudit import BackgroundAudit


class _Controller:
    """What the audit's scheduling reads of the controller: the observers told of every pass."""

    def __init__(self):
        self.observers: list = []

    def pass_ended(self) -> None:
        for observer in self.observers:
            observer(None)


def _audit(controller: _Controller) -> tuple[BackgroundAudit, list[threading.Event]]:
    audit = BackgroundAudit(controller, interval=3600.0)
    runs: list[threading.Event] = []
    audit.tick = lambda: runs[-1].set()
    return audit, runs


def _term(audit: BackgroundAudit, controller: _Controller, runs: list[threading.Event]) -> None:
    """One leader term: no audit before the controller's pass, one at once after it."""
    runs.append(threading.Event())
    audit.start()
    try:
        assert not runs[-1].wait(0.6)   # no pass yet in this term: no audit
        controller.pass_ended()
        assert runs[-1].wait(5.0)
    finally:
        audit.stop()


def test_the_first_run_of_a_term_waits_for_the_controllers_pass():
    controller = _Controller()
    audit, runs = _audit(controller)
    _term(audit, controller, runs)


def test_a_new_term_waits_for_its_own_pass():
    controller = _Controller()
    audit, runs = _audit(controller)
    _term(audit, controller, runs)
    _term(audit, controller, runs)   # the last term's pass does not count


def test_stopped_before_any_pass_the_thread_ends_without_a_run():
    controller = _Controller()
    audit, runs = _audit(controller)
    runs.append(threading.Event())
    audit.start()
    audit.stop()
    assert not audit._thread.is_alive()
    assert not runs[0].is_set()
