"""Leader election on a ``coordination.k8s.io/v1`` Lease (docs/architecture.md "Which package holds what": the
controller is a leader-elected Deployment, ``gpustack-operator-worker``).

The holder renews ``spec.renewTime`` every ``renew_seconds``; a candidate takes the Lease when it is
free, held by itself, or not renewed for ``leaseDurationSeconds``. Every write is an update guarded by
the Lease's resourceVersion, so two candidates never both win (the loser gets 409 and retries).
Leadership that cannot be renewed within ``renew_deadline_seconds`` (10 s, below the 15 s lease
duration, as client-go's RenewDeadline: the holder stops leading before anyone else may take the
Lease) is given up (``on_lost``); every request to the API server gives up after ``request_seconds``,
so a frozen API server cannot hold a renewal past the deadline. A replica that lost leadership may
campaign again with the same identity (:meth:`LeaderElector.acquire`): while the Lease still names
it, it leads again at once.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Callable

from loguru import logger

from runtime.controller.clock import Clock, utc_now
from runtime.kube.session import KubeApiError, Session
from runtime.model.rfc3339 import MICRO_TIME_FORMAT, TIME_FORMAT, format_micro_time

LEASE_NAME = "gpustack-operator-worker"


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    for fmt in (MICRO_TIME_FORMAT, TIME_FORMAT):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


class LeaderElector:
    """Acquire, renew and release one Lease for ``identity``."""

    def __init__(self, session: Session, name: str, namespace: str, identity: str,
                 lease_seconds: int = 15, renew_seconds: float = 5.0, retry_seconds: float = 2.0,
                 renew_deadline_seconds: float = 10.0, request_seconds: float = 4.0, clock: Clock = utc_now):
        if not renew_deadline_seconds < lease_seconds:
            raise ValueError(f"renew deadline {renew_deadline_seconds}s must be below the lease duration "
                             f"{lease_seconds}s")
        self.session, self.name, self.namespace, self.identity = session, name, namespace, identity
        self.lease_seconds, self.renew_seconds, self.retry_seconds = (lease_seconds, renew_seconds,
                                                                      retry_seconds)
        self.renew_deadline_seconds, self.request_seconds = renew_deadline_seconds, request_seconds
        self.clock = clock  # the wall clock the Lease's acquire and renew times are written and judged by
        self.leading = False
        self._stop_renew = threading.Event()

    def _paths(self) -> tuple[str, str]:
        ref = self.session.ref("Lease")
        return ref.path(namespace=self.namespace), ref.path(namespace=self.namespace, name=self.name)

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this identity holds the Lease afterwards."""
        collection, path = self._paths()
        now = self.clock()
        try:
            lease = self.session.call("get", path, timeout=self.request_seconds)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                             "acquireTime": format_micro_time(now), "renewTime": format_micro_time(now),
                             "leaseTransitions": 0}}
            try:
                self.session.call("post", collection, body=body, timeout=self.request_seconds)
                return True
            except KubeApiError as err:
                if err.status == 409:
                    return False
                raise
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
        expired = renewed is None or now > renewed + timedelta(seconds=duration)
        if holder and holder != self.identity and not expired:
            return False
        new_spec = dict(spec, holderIdentity=self.identity, leaseDurationSeconds=self.lease_seconds,
                        renewTime=format_micro_time(now))
        if holder != self.identity:
            new_spec["acquireTime"] = format_micro_time(now)
            new_spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            # resourceVersion guards it
            self.session.call("put", path, body=lease, timeout=self.request_seconds)
            return True
        except KubeApiError as exc:
            if exc.status == 409:
                return False
            raise

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this identity leads (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    self.leading = True
                    logger.info("leader Lease {}/{} acquired by {}", self.namespace, self.name, self.identity)
                    return True
            except KubeApiError as exc:
                logger.warning("leader election: {}", exc)
            stop.wait(self.retry_seconds)
        return False

    def keep_renewing(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew in a daemon thread until :meth:`release`; call ``on_lost`` (once) when renewal has failed
        for ``renew_deadline_seconds`` or another identity holds the Lease. ``leading`` is False from then
        on."""
        stop_renew = self._stop_renew = threading.Event()

        def loop() -> None:
            last_ok = time.monotonic()
            while not stop_renew.wait(self.renew_seconds):
                try:
                    if self.try_acquire_or_renew():
                        last_ok = time.monotonic()
                        continue
                except KubeApiError as exc:
                    logger.warning("leader Lease renewal: {}", exc)
                if time.monotonic() - last_ok > self.renew_deadline_seconds or not self._still_mine():
                    self.leading = False
                    logger.error("leadership of {}/{} lost", self.namespace, self.name)
                    on_lost()
                    return
        thread = threading.Thread(target=loop, name="lease-renew", daemon=True)
        thread.start()
        return thread

    def _still_mine(self) -> bool:
        try:
            lease = self.session.call("get", self._paths()[1], timeout=self.request_seconds)
        except KubeApiError:
            return True  # unknown: keep trying until the duration passes
        return (lease.get("spec") or {}).get("holderIdentity") == self.identity

    def release(self) -> None:
        """Stop renewing and clear the holder so a successor need not wait for expiry."""
        self._stop_renew.set()
        if not self.leading:
            return
        try:
            lease = self.session.call("get", self._paths()[1])
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                self.session.call("put", self._paths()[1], body=lease)
        except KubeApiError as exc:
            logger.warning("leader Lease release: {}", exc)
        self.leading = False
