"""The status and Events of PolicyExceptions (docs/concepts/exceptions.md "Status and Events"), kept by the
controller's leader.

Every ``interval`` seconds, after a PolicyException event, and at the next expiry of an exception in force,
:meth:`ExceptionStatus.run_once` judges every exception at the controller's clock with the function the
webhooks and the audit use (:func:`runtime.report.exceptions.coverage`) and applies, where it changed,
``status.inForce``, ``status.coveredObjects`` (the existing objects its policy judges and its match selects
now) and ``status.message`` (why it does not apply). An exception whose ``status.inForce`` turns true gets
the ``started`` Event of rules/exceptions.yaml, one whose ``status.inForce`` turns false the ``ended`` Event:
the status written is the memory, so a restarted controller raises no Event twice.
"""
from __future__ import annotations

import threading
from datetime import datetime
from typing import Optional

from loguru import logger

from runtime.engine.admission import AdmissionEngine, AdmissionView
from runtime.engine.admission.exceptions import EXCEPTION_KIND, read_grant
from runtime.engine.snapshot import KNOWN_KINDS
from runtime.kube.events import CONTROLLER_COMPONENT, event
from runtime.kube.session import KubeApiError
from runtime.report.audit import audited_requests
from runtime.report.exceptions import Coverage, coverage


_STATUS_FIELDS = ("inForce", "coveredObjects", "message")


def status_of(state: Coverage) -> dict:
    """The ``status`` of a PolicyException in ``state``."""
    out = {"inForce": state.in_force, "coveredObjects": state.covered}
    if state.why:
        out["message"] = state.why
    return out


class ExceptionStatus:
    """See the module docstring. ``wake()`` asks for a run now (a PolicyException event); ``start()`` /
    ``stop()`` run it in a daemon thread (``interval`` 0: never)."""

    def __init__(self, controller, interval: float = 30.0):
        self.controller = controller
        self.interval = interval
        self._engine: Optional[AdmissionEngine] = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.runs = 0
        # a new list, not an edit: the controller's loop may be iterating the old one
        controller.listeners = controller.listeners + [self.on_event]

    def on_event(self, kind: str, _event_type: str, _obj: dict) -> None:
        """A cache event: a PolicyException changed, so run soon."""
        if kind == EXCEPTION_KIND:
            self._wake.set()

    def engine(self) -> AdmissionEngine:
        """The admission engine of the rules in force (rebuilt after a reload)."""
        if self._engine is None or self._engine.policy is not self.controller.policy:
            self._engine = AdmissionEngine(self.controller.policy)
        return self._engine

    def run_once(self) -> Optional[datetime]:
        """Judge every PolicyException now; apply changed statuses, raise the Events. Returns the next
        expiry of an exception in force (None when none)."""
        engine, now = self.engine(), self.controller.clock()
        snapshot = self.controller.cache.snapshot()
        view = AdmissionView(snapshot=snapshot, settings={})
        states = coverage(engine, view, now, audited_requests(engine, snapshot))
        spec = engine.exception_spec
        upcoming = []
        for obj in snapshot.list(EXCEPTION_KIND):
            grant = read_grant(obj)
            state = states[(grant.namespace, grant.name)]
            if state.in_force and grant.expires is not None:
                upcoming.append(grant.expires)
            held, status = obj.get("status") or {}, status_of(state)
            was = held.get("inForce") is True
            if all(held.get(k) == status.get(k) for k in _STATUS_FIELDS):
                continue
            self._write(obj, status)
            if spec is not None and was != state.in_force:
                self._event(obj, spec.events.started if state.in_force else spec.events.ended,
                            grant.words(covered=state.covered), now)
        self.runs += 1
        return min(upcoming) if upcoming else None

    def _write(self, obj: dict, status: dict) -> None:
        meta = obj["metadata"]
        body = {"apiVersion": KNOWN_KINDS[EXCEPTION_KIND][0], "kind": EXCEPTION_KIND,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "status": status}
        try:
            self.controller.applier.apply_status(body)
        except KubeApiError as exc:
            logger.warning("PolicyException {}/{} status: {}", meta["namespace"], meta["name"], exc)

    def _event(self, obj: dict, template, words: dict, now: datetime) -> None:
        meta = obj["metadata"]
        involved = {"apiVersion": KNOWN_KINDS[EXCEPTION_KIND][0], "kind": EXCEPTION_KIND,
                    "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")}
        body = event(involved, template.type, template.reason, template.message.format(**words)[:1024],
                     CONTROLLER_COMPONENT, now)
        try:
            self.controller.applier.create(body)
        except KubeApiError as exc:
            logger.warning("{} event for PolicyException {}/{}: {}", template.reason, meta["namespace"],
                           meta["name"], exc)

    def start(self) -> "ExceptionStatus":
        """Run in a daemon thread until :meth:`stop`; returns self."""
        self._stop.clear()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="exception-status", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread (the statuses stay)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            wait = self.interval
            try:
                upcoming = self.run_once()
                if upcoming is not None:   # wake at the next expiry, a little after it
                    wait = min(wait, max(0.1, (upcoming - self.controller.clock()).total_seconds() + 0.05))
            except Exception as exc:  # noqa: BLE001 - the next run retries
                logger.exception("exception status: {}", exc)
            self._wake.wait(wait)
