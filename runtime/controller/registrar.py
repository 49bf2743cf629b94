"""Webhook registration (docs/reference/controller.md "Controller and webhooks").

:class:`WebhookRegistrar` keeps the Mutating/ValidatingWebhookConfigurations of
:func:`runtime.engine.admission.registration.webhook_configurations` in the cluster, both ways: the
webhooks of the rules generation in force whose paths the serving replicas serve, and no other. Its
own watch of both kinds, server-side apply (field manager ``accelpolicy``) when a configuration is
missing or drifted (e.g. someone edits ``caBundle``), the whole webhook list written over when a
configuration holds a webhook no replica serves (a path a generation dropped: never left behind),
deletion of configurations accelpolicy owns that the rules no longer name. A path a new generation
adds is registered only once every serving replica serves it (``served``; docs/rule-authoring.md "How
a rules change goes live"). A same-named configuration without the ownership labels is left alone and
reported. Nothing is deleted when the controller stops: the registrations stay (a restart
re-applies them with its CA bundle). With an owner (``--webhook-owner-clusterrole``, the chart's
ClusterRole) each configuration carries an ownerReference to it, so the garbage collector deletes
them once the owner is gone (``helm uninstall``, with or without hooks), and the registrar, which
watches the owner, stops re-applying them from that moment on.
"""
from __future__ import annotations

import threading
from typing import Callable

from loguru import logger

from runtime.engine.admission.registration import (KINDS, ClientConfig, drift, owned_configuration,
                                                   registration_of, stale_configurations,
                                                   webhook_configurations)
from runtime.engine.policy import Policy
from runtime.kube.applier import Applier
from runtime.kube.cache import WatchedKind
from runtime.kube.clustercache import ClusterCache
from runtime.kube.session import KubeApiError, Session

OWNER_KIND = "ClusterRole"   # what owns the configurations (--webhook-owner-clusterrole)


class WebhookRegistrar:
    """Keeps the webhook configurations rendered for ``client`` current (see the module docstring).

    ``start()`` watches both configuration kinds, applies once and then keeps them in a daemon
    thread (after every event, every :meth:`poke`, and every ``resync_seconds``; every ``poll_seconds``
    while a path of the rules is not served yet); ``sync()`` is one pass and returns what it did
    (``apply <Kind> <name>``, ``delete <Kind> <name>``); ``errors`` collects failures and foreign objects
    (one line each). ``policy_of()``: the rules generation in force (default ``policy`` for good);
    ``served()``: the webhook paths every serving replica serves (None, or no ``served``: unknown, every
    path of the rules).
    """

    def __init__(self, session: Session, policy: Policy, client: ClientConfig, resync_seconds: float = 300.0,
                 owner: str | None = None, policy_of: Callable[[], Policy] | None = None,
                 served: Callable[[], set[str] | None] | None = None, poll_seconds: float = 2.0):
        self.policy = policy
        self.policy_of = policy_of or (lambda: policy)
        self.served = served or (lambda: None)
        self.client = client
        self.owner = owner   # the name of the ClusterRole that owns the configurations, or None
        self.desired = [] if owner else webhook_configurations(policy, client, paths=self.served())
        self.complete = True   # every path of the rules registered (else polled)
        self.resync_seconds, self.poll_seconds = resync_seconds, poll_seconds
        self._dirty = threading.Event()
        watched = [WatchedKind(k) for k in KINDS.values()]
        if owner:
            watched.append(WatchedKind(OWNER_KIND, field_selector=f"metadata.name={owner}"))
        self.cache = ClusterCache(session, watched, on_event=lambda *_: self._dirty.set())
        self.applier = Applier(session, policy, cache=self.cache)
        self.errors: list[str] = []
        self._reported: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, sync_timeout: float = 60.0) -> "WebhookRegistrar":
        """Sync the watch, apply what is missing or drifted, then keep it in a daemon thread.

        Raises ``TimeoutError`` when the watch does not sync, :class:`KubeApiError` when the first
        pass cannot write.
        """
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout):
            raise TimeoutError(f"webhook configuration watch not synced within {sync_timeout}s")
        for line in self.sync(raise_errors=True):
            logger.info("webhook registration: {}", line)
        self._thread = threading.Thread(target=self._run, name="webhook-registrar", daemon=True)
        self._thread.start()
        return self

    def retarget(self, client: ClientConfig) -> None:
        """Register ``client`` from now on (e.g. a rotated CA bundle); the next pass applies it."""
        self.client = client
        self.desired = webhook_configurations(self.policy, client, paths=self.served()) if not self.owner \
            else self.desired
        self._dirty.set()

    def poke(self) -> None:
        """Sync soon (a new rules generation is in force)."""
        self._dirty.set()

    def _render(self) -> bool:
        """Set :attr:`desired` for this pass; False when the owner is gone (nothing may be applied)."""
        self.policy = self.applier.policy = self.policy_of()
        served = self.served()
        paths = {spec.path for spec in (d.spec for d in self.policy.ruleset.all("AdmissionPolicy"))}
        self.complete = served is None or paths <= served
        owner = self.cache.get(OWNER_KIND, self.owner) if self.owner else None
        if self.owner and owner is None:
            self._error(f"{OWNER_KIND} {self.owner}, the configurations' owner, is gone (an uninstall?): "
                        "nothing is registered while it is missing")
            return False
        self.desired = webhook_configurations(self.policy, self.client, owner, paths=served)
        return True

    def stop(self) -> None:
        """Stop keeping the configurations (they stay registered)."""
        self._stop.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self.cache.stop()

    def sync(self, raise_errors: bool = False) -> list[str]:
        """One pass: apply each missing or drifted configuration, delete stale ones we own (nothing
        while the owner is gone)."""
        done: list[str] = []
        if not self._render():
            return done
        for desired in self.desired:
            kind, name = desired["kind"], desired["metadata"]["name"]
            live = self.cache.get(kind, name)
            if live is not None and not owned_configuration(self.policy, live):
                self._error(f"{kind} {name} exists without the labels "
                            f"{dict(registration_of(self.policy).labels)} "
                            "of rules/admission/registration.yaml: not ours, left alone")
                continue
            paths = drift(live, desired)
            if not paths:
                continue
            try:
                self.applier.apply(desired)
                if any(p.endswith("(extra)") for p in paths):   # one no replica serves: the list written over
                    self.applier.merge_patch(kind, name, {"webhooks": desired["webhooks"]})
            except KubeApiError as exc:
                if raise_errors:
                    raise
                self._error(f"apply {kind} {name}: {exc}")
                self._dirty.set()
                continue
            what = "created" if live is None else f"drifted at {', '.join(paths[:3])}"
            done.append(f"apply {kind} {name} ({what})")
        live_all = [o for kind in KINDS.values() for o in self.cache[kind].objects()] \
            if all(k in self.cache.caches for k in KINDS.values()) else []
        for stale in stale_configurations(self.policy, live_all, self.desired):
            try:
                self.applier.delete(stale)
                done.append(f"delete {stale['kind']} {stale['metadata']['name']}")
            except KubeApiError as exc:
                self._error(f"delete {stale['kind']} {stale['metadata']['name']}: {exc}")
        return done

    def _error(self, line: str) -> None:
        if line not in self._reported:
            self._reported.add(line)
            self.errors.append(line)
            logger.error("webhook registration: {}", line)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(self.resync_seconds if self.complete else self.poll_seconds)
            if self._stop.is_set():
                break
            self._dirty.clear()
            try:
                for line in self.sync():  # after the first pass, every write puts something back
                    logger.warning("webhook registration: {}", line)
            except Exception as exc:  # noqa: BLE001 - keep the registrar alive; retry after a pause
                logger.exception("webhook registration failed: {}", exc)
                self._stop.wait(1.0)
                self._dirty.set()
