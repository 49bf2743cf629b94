"""The admission webhook HTTP application (Starlette, ASGI): one POST path per AdmissionPolicy.

Endpoints: ``/healthz`` (process alive), ``/readyz`` (200 only once rules are compiled and the
cluster view is loaded: :meth:`WebhookState.set_ready`; inside the controller, once its watch caches
synced), ``/metrics`` (Prometheus text), ``/generation`` (the rules holder's report: the generation served,
its paths, its own trial of the latest one; :mod:`runtime.reload.replicas`), and each policy's
``spec.path`` (e.g. ``/mutate-pods``, ``/validate-pods``) of the generation served now: a reload that adds,
moves or removes a policy's path serves the new paths from that generation on (no restart); a path no
generation serves answers 404.

A review is never answered with a crash or a 500: a body over ``max_body_bytes`` (default 3 MiB,
kube-apiserver's own request limit), non-JSON, a wrong apiVersion/kind, a missing ``request`` or uid,
wrongly typed fields or strings that are not valid Unicode (lone surrogates) get a well-formed
AdmissionReview denial (code 400), HTTP 200, echoing the uid when one could be read (``""``
otherwise). Each is counted in ``accelpolicy_admission_malformed_reviews{webhook,reason}`` and logged
(WARNING, at most one line per webhook and reason every 10 s; docs/webhook-hardening.md
"Every review gets a well-formed answer"). An unexpected failure inside the engine is a 500-coded
InternalError *denial*. Answers are JSON with non-ASCII escaped, so no value can make the answer
unencodable.

Where a review is judged (docs/performance.md "CPU per review outside decide()"): on the event loop when
its view is at hand (a fixed view, or a live view already built) and it is judged within
``inline_seconds`` (default 50 ms; a review takes about a millisecond): no hand-off to another thread.
A review that needs its view built, or takes longer (stopped at its next budget check, the partial
evaluation dropped), is judged from the start in a pool of ``workers`` threads (default: the CPU
count), bounded by what is left of its deadline, so ``/healthz`` and ``/readyz`` answer while a review
is slow (each review ahead of them on the loop holds them back by at most ``inline_seconds`` and one
budget check). A review not judged within
``deadline_seconds`` (default 8 s, below kube-apiserver's 10 s webhook timeout) is answered with a
504 ``Timeout`` denial naming the deadline; its evaluation stops at the next rule expression or, inside
one, at the next budget check (every ``checkEvery`` comprehension iterations, rules/cel.yaml), so the
worker is free again within milliseconds. A review whose CEL budget was spent is answered per its
policy's failure mode (``Fail``: ``500 InternalError`` alone, naming the policy, rule and the budget
spent; ``Ignore``: allowed), and so is a review whose rule failed to evaluate. Each is counted with its
own verdict (``timeout``, ``budget-exceeded``, ``rule-error``) and logged at WARNING naming the policy,
the rule that was running and the object (at most one line every 10 s per webhook and verdict, and for
a rule error per webhook, policy, rule and error class; the next line says how many were not logged).
A client that disconnects mid-body costs one DEBUG log line.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Callable, Optional

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from runtime.engine.admission import (AdmissionEngine, AdmissionView, Outcome, bad_request, build_response,
                                      decide, is_text)
from runtime.engine.admission.verdict import HALT_TIMEOUT, timeout_denial
from runtime.rules.cel.budget import Deadline
from runtime.webhook.metrics import WebhookMetrics
from runtime.webhook.sample import ReviewSample

DEFAULT_MAX_BODY = 3 * 1024 * 1024
DEFAULT_DEADLINE_SECONDS = 8.0  # kube-apiserver gives a webhook 10 s (timeoutSeconds default and maximum 30)
# a review judged on the event loop stops after this long (wall clock: a descheduled process counts too) and
# is judged again, from the start, in the pool
INLINE_SECONDS = 0.05
_LOG = logging.getLogger(__name__)
# the denial (500 InternalError) of a review that arrives before the rules and view
NOT_READY = "webhook not ready; retry"


@dataclass(frozen=True)
class Generation:
    """What a review is judged with, swapped as one object: the compiled rules (``engine``) and the
    cluster view, fixed (``view``, snapshots) or live (``view_source``, the controller's caches);
    ``routes``: the engine's paths (path -> policy name)."""

    engine: Optional[AdmissionEngine] = None
    view: Optional[AdmissionView] = None
    view_source: Optional[Callable[[], AdmissionView]] = None
    routes: dict = field(default_factory=dict)


def routes_of(engine: Optional[AdmissionEngine]) -> dict[str, str]:
    """HTTPS path -> policy name of every policy ``engine`` serves."""
    policies = getattr(engine, "policies", None) or {}
    return {spec.path: name for name, spec in policies.items()}


@dataclass
class WebhookState:
    """What the app serves with: the rules and cluster view in force (:attr:`served`, None until
    loaded), limits, metrics.

    A review reads :attr:`served` once and is judged with that :class:`Generation` to the end, so a
    hot reload (:meth:`set_ready` again, one assignment) never lets a review mix two generations.
    ``engine``, ``view`` and ``view_source`` read its parts; assigning ``engine`` replaces the rules
    alone (the controller's reload, whose live view follows the new policy itself).
    """

    served: Optional[Generation] = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    metrics: WebhookMetrics = field(default_factory=WebhookMetrics)
    ready: bool = False
    # once ready: why not ready now, or None (blocking)
    ready_check: Optional[Callable[[], Optional[str]]] = None
    deadline_seconds: float = DEFAULT_DEADLINE_SECONDS
    workers: int = field(default_factory=lambda: os.cpu_count() or 2)
    inline_seconds: float = INLINE_SECONDS   # 0: every review goes to the pool (module docstring)
    view_error: Optional[str] = None  # the last failure to build the cluster view (/readyz 503 while set)
    # recent reviews, for the reload gate (in memory)
    sample: ReviewSample = field(default_factory=ReviewSample)
    # the instant each review is judged at (PolicyExceptions' expiry): an aware UTC datetime
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    # the rules holder's report (``/generation``), when a holder serves here
    report: Optional[Callable[[], dict]] = None
    _pool: Optional[ThreadPoolExecutor] = field(default=None, repr=False)
    _pool_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The bounded pool reviews are judged in (``workers`` threads, created on first use)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="admission")
            return self._pool

    @property
    def engine(self) -> Optional[AdmissionEngine]:
        """The compiled rules in force (None until loaded)."""
        return self.served.engine if self.served else None

    @engine.setter
    def engine(self, engine: AdmissionEngine) -> None:
        self.served = replace(self.served or Generation(), engine=engine, routes=routes_of(engine))

    def routes(self) -> dict[str, str]:
        """Path -> policy name of the generation served now (``{}`` before any)."""
        return self.served.routes if self.served else {}

    @property
    def view(self) -> Optional[AdmissionView]:
        """The fixed cluster view in force (None with a live source or until loaded)."""
        return self.served.view if self.served else None

    @property
    def view_source(self) -> Optional[Callable[[], AdmissionView]]:
        """The live view's source in force (None with a fixed view)."""
        return self.served.view_source if self.served else None

    def set_ready(self, engine: AdmissionEngine, view: AdmissionView | Callable[[], AdmissionView]) -> None:
        """Install compiled rules and a loaded view as one :class:`Generation` (one assignment: a
        hot reload calls it again); /readyz turns 200.

        ``view`` is a fixed :class:`AdmissionView` (snapshots) or a callable returning the view in force
        now, asked once per review (the controller's live view,
        :class:`runtime.controller.webhooks.LiveAdmissionView`).
        """
        self.served = Generation(engine, None, view, routes_of(engine)) if callable(view) \
            else Generation(engine, view, None, routes_of(engine))
        self.ready = True

    def decide(self, data: dict, name: str, cancel: Optional[threading.Event] = None,
               served: Optional[Generation] = None,
               view: Optional[AdmissionView] = None) -> tuple[dict, Outcome]:
        """The AdmissionReview answer of policy ``name`` to the parsed review ``data``, and its outcome
        (:func:`runtime.engine.admission.decide` with the generation ``served``, default the one served
        now, against ``view``, default that generation's view, at :attr:`clock`'s now); ``cancel`` (an
        Event or a :class:`runtime.rules.cel.budget.Deadline`) stops it (a ``timeout`` outcome). Raises
        what the engine raises."""
        served = served or self.served
        view = view if view is not None else self._view_of(served)
        return decide(served.engine, data, view, name, cancel=cancel, now=self.clock())

    def view_at_hand(self, served: Optional[Generation]) -> Optional[AdmissionView]:
        """The view ``served`` judges against when it is at hand without waiting: the fixed view, or
        the current view of a live source that says so (its ``current()``: the controller's and the
        admission process's); None when it must be built or asked for first (a plain callable)."""
        if served is None or served.view_source is None:
            return served.view if served is not None else None
        current = getattr(served.view_source, "current", None)
        return current() if current is not None else None

    def current_view(self) -> AdmissionView:
        """The view a review judges against (rebuilt by a live source when the cluster changed).

        A live source that fails sets :attr:`view_error` (``/readyz`` answers 503 until a build
        succeeds) and the failure propagates."""
        return self._view_of(self.served)

    def _view_of(self, served: Generation) -> AdmissionView:
        if served.view_source is None:
            return served.view
        try:
            view = served.view_source()
        except Exception as exc:
            self.view_error = f"cluster view: {type(exc).__name__}: {exc}"
            raise
        self.view_error = None
        return view

    def readiness(self) -> Optional[str]:
        """None when ready, else why not (rules and view not loaded; the cluster view failed). With a
        ``ready_check`` the view's state is its to say (it builds the view), not the last review's."""
        if not self.ready:
            return "rules or cluster view not loaded"
        return None if self.ready_check is not None else self.view_error

    def close(self) -> None:
        """Stop the worker pool (running reviews finish; queued ones are dropped)."""
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


class _AsciiJSON(JSONResponse):
    """JSON with non-ASCII escaped: a lone surrogate echoed from a review cannot break the answer."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _answer(body: dict) -> Response:
    return _AsciiJSON(body, status_code=200)


async def _read_limited(request: Request, limit: int) -> Optional[bytes]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _judge(state: WebhookState, data, name: str) -> tuple[dict, Outcome]:
    """Judge on the event loop when the view is at hand and the review is judged within
    ``state.inline_seconds``; otherwise (a view to build, a longer review: stopped at its next budget check
    and judged again from the start) in the worker pool, within what is left of its deadline."""
    deadline = Deadline(state.deadline_seconds, threading.Event())   # from the review's start
    served = state.served
    view = state.view_at_hand(served) if state.inline_seconds > 0 else None
    if view is not None:
        inline = Deadline(min(state.inline_seconds, state.deadline_seconds))
        try:
            answer, outcome = state.decide(data, name, inline, served, view)
        except Exception as exc:  # noqa: BLE001 - the server must answer every review
            return _failed(data, name, exc)
        if outcome.halt != HALT_TIMEOUT:
            return answer, outcome
    return await _pooled(state, data, name, deadline)


async def _pooled(state: WebhookState, data, name: str, deadline: Deadline) -> tuple[dict, Outcome]:
    """Run the engine in the worker pool until ``deadline`` (the review's); at the deadline the review
    is answered with a Timeout denial and its evaluation cancelled."""
    future = asyncio.get_running_loop().run_in_executor(state.pool, state.decide, data, name, deadline)
    try:
        return await asyncio.wait_for(future, max(0.0, deadline.at - time.monotonic()))
    except asyncio.TimeoutError:
        deadline.cancel.set()
        uid = _uid_of(data)
        outcome = Outcome(policy=name, denial=timeout_denial(name, state.deadline_seconds), halt=HALT_TIMEOUT,
                          halt_rule=deadline.running,   # the rule whose expression runs at the deadline
                          halt_detail="answered at the deadline; the evaluation stops at its next budget "
                                      "check",
                          **_object_of(data))
        return build_response(uid, outcome), outcome
    except Exception as exc:  # noqa: BLE001 - the server must answer every review
        return _failed(data, name, exc)


def _failed(data, name: str, exc: Exception) -> tuple[dict, Outcome]:
    """The 500 InternalError denial of a review whose evaluation failed unexpectedly."""
    outcome = Outcome(policy=name,
                      denial=(500, "InternalError", f"webhook {name}: {type(exc).__name__}: {exc}"))
    return build_response(_uid_of(data), outcome), outcome


def build_app(state: WebhookState, paths: dict[str, str]) -> Starlette:
    """The ASGI app. Reviews are routed by the served generation's paths (:meth:`WebhookState.routes`);
    ``paths`` (HTTPS path -> policy name) answer before any generation is served (with "not ready")."""

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        why = state.readiness()
        if why is None and state.ready_check is not None:
            why = await run_in_threadpool(state.ready_check)  # blocking: reads the caches, may build the view
        return PlainTextResponse("ok" if why is None else f"not ready: {why}",
                                 status_code=200 if why is None else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def generation(_: Request) -> Response:
        if state.report is None:
            return PlainTextResponse("no rules holder here", status_code=404)
        return _AsciiJSON(state.report(), status_code=200)

    async def review(request: Request) -> Response:
        started = time.perf_counter()
        name = (state.routes() if state.ready else paths).get(request.url.path)
        if name is None:
            return PlainTextResponse(f"no webhook is served at {request.url.path}", status_code=404)
        try:
            body = await _read_limited(request, state.max_body_bytes)
        except ClientDisconnect:
            _LOG.debug("%s: client %s disconnected before the review body was read", name,
                       request.client.host if request.client else "?")
            return Response(status_code=400)  # nobody reads it
        client = request.client.host if request.client else "?"
        if body is None:
            message = f"request body exceeds {state.max_body_bytes} bytes"
            state.metrics.malformed_review(name, "body-too-large", message, client)
            return _answer(bad_request("", message))
        try:
            data = json.loads(body, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            state.metrics.malformed_review(name, "not-json",
                                           f"request body is not JSON ({type(exc).__name__}: "
                                                             f"{str(exc)[:200]})", client)
            return _answer(bad_request("", "request body is not JSON"))
        if not state.ready:
            uid = _uid_of(data)
            return _answer(build_response(uid,
                                          Outcome(policy=name, denial=(500, "InternalError", NOT_READY))))
        answer, outcome = await _judge(state, data, name)
        state.metrics.observe(name, outcome, time.perf_counter() - started)
        if outcome.denial is not None and outcome.denial[1] == "BadRequest":  # parse_review refused it
            state.metrics.malformed_review(name, "not-a-review", outcome.denial[2], client)
        else:
            state.sample.record(name, data, len(body))
        return _answer(answer)

    routes = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics),
              Route("/generation", generation), Route("/{path:path}", review, methods=["POST"])]
    return Starlette(routes=routes)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _object_of(data) -> dict:
    """``object_kind``, ``namespace`` and ``name`` of a review's object as far as they can be read
    (for the log line of a review that timed out); empty strings otherwise."""
    request = data.get("request") if isinstance(data, dict) else None
    request = request if isinstance(request, dict) else {}
    obj = request.get("object") if isinstance(request.get("object"), dict) else {}
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
    found = {"object_kind": kind.get("kind"), "namespace": request.get("namespace"),
             "name": meta.get("name") or request.get("name")}
    return {key: value if isinstance(value, str) and is_text(value) else "" for key, value in found.items()}


def _uid_of(data) -> str:
    request = data.get("request") if isinstance(data, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and is_text(uid) else ""
