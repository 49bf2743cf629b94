"""The admission webhook HTTP application (Starlette, ASGI): one POST path per AdmissionPolicy.

Endpoints: ``/healthz`` (process alive), ``/readyz`` (200 only once rules are compiled and the
cluster view is loaded: :meth:`WebhookState.set_ready`; inside the controller, once its watch caches
synced), ``/metrics`` (Prometheus text), and each
policy's ``spec.path`` (e.g. ``/mutate-pods``, ``/validate-pods``).

A review is never answered with a crash or a 500: a body over ``max_body_bytes`` (default 3 MiB,
kube-apiserver's own request limit), non-JSON, a wrong apiVersion/kind, a missing uid or wrongly
typed fields get a well-formed AdmissionReview denial (code 400) echoing the uid when one could be
read, with HTTP 200; with no uid, HTTP 400 and the same body shape. An unexpected failure inside the
engine is a 500-coded InternalError *denial* (HTTP 200), never an HTTP 500.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from runtime.engine.admission import AdmissionEngine, AdmissionView, Outcome, bad_request, build_response, decide

DEFAULT_MAX_BODY = 3 * 1024 * 1024
_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass
class WebhookMetrics:
    """Prometheus collectors in their own registry (no process globals)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self):
        self.reviews = Counter("accelpolicy_admission_reviews", "Admission reviews answered",
                               ["webhook", "verdict"], registry=self.registry)
        self.rules = Counter("accelpolicy_admission_rule_hits", "Rules that fired (denials, mutations)",
                             ["webhook", "rule"], registry=self.registry)
        self.latency = Histogram("accelpolicy_admission_review_seconds", "Time to answer one review",
                                 ["webhook"], buckets=_BUCKETS, registry=self.registry)

    def observe(self, webhook: str, outcome: Outcome, seconds: float) -> None:
        self.reviews.labels(webhook, outcome.verdict()).inc()
        for rule in outcome.rules:
            self.rules.labels(webhook, rule).inc()
        self.latency.labels(webhook).observe(seconds)


@dataclass
class WebhookState:
    """What the app serves with: the engine and cluster view (None until loaded), limits, metrics."""

    engine: Optional[AdmissionEngine] = None
    view: Optional[AdmissionView] = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    metrics: WebhookMetrics = field(default_factory=WebhookMetrics)
    ready: bool = False
    view_source: Optional[Callable[[], AdmissionView]] = None  # a live view (the controller's caches)
    ready_check: Optional[Callable[[], Optional[str]]] = None  # once ready: why not ready now, or None

    def set_ready(self, engine: AdmissionEngine, view: AdmissionView | Callable[[], AdmissionView]) -> None:
        """Install compiled rules and a loaded view; /readyz turns 200.

        ``view`` is a fixed :class:`AdmissionView` (snapshots) or a callable returning the view in force
        now, asked once per review (the controller's live view,
        :class:`runtime.controller.webhooks.LiveAdmissionView`).
        """
        if callable(view):
            self.engine, self.view_source, self.view = engine, view, None
        else:
            self.engine, self.view_source, self.view = engine, None, view
        self.ready = True

    def decide(self, data: dict, name: str) -> tuple[dict, Outcome]:
        """The AdmissionReview answer of policy ``name`` to the parsed review ``data``, and its outcome
        (:func:`runtime.engine.admission.decide` against :meth:`current_view`). Raises what the engine raises."""
        return decide(self.engine, data, self.current_view(), name)

    def current_view(self) -> AdmissionView:
        """The view a review judges against (rebuilt by a live source when the cluster changed)."""
        return self.view_source() if self.view_source is not None else self.view


def _answer(body: dict, uid: str) -> JSONResponse:
    return JSONResponse(body, status_code=200 if uid else 400)


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


def build_app(state: WebhookState, paths: dict[str, str]) -> Starlette:
    """The ASGI app; ``paths`` maps HTTPS path -> policy name (one webhook per path)."""

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(_: Request) -> Response:
        reason = None if state.ready else "not ready"
        if reason is None and state.ready_check is not None:
            reason = await run_in_threadpool(state.ready_check)
        return PlainTextResponse(reason or "ok", status_code=503 if reason else 200)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def review(request: Request) -> Response:
        started = time.perf_counter()
        name = paths[request.url.path]
        body = await _read_limited(request, state.max_body_bytes)
        if body is None:
            return _answer(bad_request("", f"request body exceeds {state.max_body_bytes} bytes"), "")
        try:
            data = json.loads(body, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return _answer(bad_request("", "request body is not JSON"), "")
        if not state.ready:
            uid = _uid_of(data)
            return _answer(build_response(uid, Outcome(policy=name, denial=(500, "InternalError",
                                                                             "webhook not ready; retry"))), uid)
        try:
            answer, outcome = state.decide(data, name)
        except Exception as exc:  # noqa: BLE001 - the server must answer every review
            uid = _uid_of(data)
            outcome = Outcome(policy=name, denial=(500, "InternalError", f"webhook {name}: {type(exc).__name__}: {exc}"))
            answer = build_response(uid, outcome)
        state.metrics.observe(name, outcome, time.perf_counter() - started)
        return _answer(answer, answer["response"]["uid"])

    routes = [Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
    routes += [Route(path, review, methods=["POST"]) for path in paths]
    return Starlette(routes=routes)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _uid_of(data) -> str:
    request = data.get("request") if isinstance(data, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""
