"""The fault suite's load generator: its own process, queue-labelled Pods and Instances created and deleted at
a steady rate through the API server, every answer recorded (docs/reliability.md "Reliability: the fault suite").

Run it as ``python -m chaos.load`` with ``e2e/`` on ``PYTHONPATH`` (the suite does: :class:`LoadProcess`).
Every ``1/rate`` seconds one create is due (open loop: a late request counts its wait from its due time, so a
stalled API server shows in the latencies instead of slowing the schedule). The creates cycle through
:data:`MIX`, each object varied by its sequence number as real traffic is:

* ``pod-sliced``: a Pod labelled for the A10G pool's queue entrance asking for a logical slice of ``5..50``
  percent of VRAM. Our mutating webhook must fold it: ``nvidia.com/gpu.sliced.units`` = percent x 16,000
  credits in requests and limits (docs/reference/controller.md "Pod admission", seed step 3's 20% -> ``320k``). The Pod carries
  the scheduling gate :data:`HOLD_GATE` besides Kueue's, so it is never bound: it costs the cluster a
  review, a Kueue Workload and the controller's admission check, never an accelerator, so the pools'
  tables stay those of the cluster's facts while the load runs.
* ``pod-invalid``: the same Pod asking for ``nvidia.com/gpu.sliced: 2``: our validating webhook must deny it
  with the spec's message (docs/reference/controller.md "Pod admission" rule 2).
* ``instance``: an Instance of the T4 pool's type with ``spec.stop: true`` (docs/concepts/instances.md "Life cycle": no Pod is
  made), its image tag and command varied; our defaulting webhook must fill ``spec.imagePullPolicy``.
* ``instance-privileged``: a privileged Instance; our validating webhook must deny it
  (``spec.privileged: Forbidden: privileged mode is not allowed``, docs/concepts/instances.md "Additional volumes and host access"; only the start is
  compared, so an edited tail of that message in the rules still matches).

Each created object is deleted ``hold`` seconds later. One JSON line per answer goes to ``--out``:
``{"t", "due", "lat", "op", "kind", "mix", "name", "class", "status", "reason", "message"}``; ``t`` is the
wall-clock time the request was sent (the suite cuts the timeline into fault windows by it). ``class``:

* ``ok``: a create allowed and carrying our webhook's work, a denial with the expected message, or a
  delete answered 2xx or 404;
* ``unreviewed``: allowed without our webhook's work (no webhook configuration called us) or an object we
  must deny was stored; ``wrong``: our webhook answered, but not what the rules say;
* ``webhook-ours`` / ``webhook-other``: the API server could not call one of our webhooks (names ending in
  ``gpustack.ai``) / another one (Kueue's): the review failed closed (``failurePolicy: Fail``); also our
  replica's "not ready" denial (a restarted replica reached before the Service dropped it);
* ``unavailable``: the API server did not answer, or answered 429/503/504 or an etcd error: nothing was
  reviewed; ``skipped``: not sent because :data:`MAX_IN_FLIGHT` requests were already waiting;
* ``other``: any other error (named in ``message``).

On SIGTERM (or after ``--seconds``) it stops creating, waits for the requests in flight, deletes every
object it still holds, then every object carrying its run label, writes ``{"summary": {...}}`` and exits 0.
Loopback only: the kubeconfig names the kind cluster's API server published on 127.0.0.1.
"""
from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

NOT_READY = "webhook not ready; retry"   # runtime.webhook.app.NOT_READY (the harness test compares them)

LOAD_LABEL = "chaos.accelpolicy.dev/load"      # value: the run id; the cleanup's label selector
HOLD_GATE = "chaos.accelpolicy.dev/hold"       # our own scheduling gate: the load's Pods are never bound
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MIX = ("pod-sliced", "instance", "pod-sliced", "instance", "pod-invalid",
       "pod-sliced", "instance", "pod-sliced", "instance", "instance-privileged")
MAX_IN_FLIGHT = 48
REQUEST_TIMEOUT = 20.0   # seconds; the webhooks' own timeout is 10 s (rules/admission/registration.yaml)
CREDITS_PER_PERCENT = 16_000   # PCT of docs/concepts/four-views.md "The four views" (D = 1,600,000 credits per accelerator)
SLICE_DENIED = ('spec.containers[0].resources.limits[nvidia.com/gpu.sliced]: Invalid value: "2": a logical slice '
                'request is always a single accelerator; multi-accelerator logical slicing is not supported yet')
PRIVILEGED_DENIED = "spec.privileged: Forbidden: privileged mode is not allowed"
OUR_WEBHOOKS = "gpustack.ai"   # every webhook name of rules/admission ends so
# kube-apiserver's words (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors and .../request):
WEBHOOK_CALL = re.compile(r'failed calling webhook "([^"]+)"')
WEBHOOK_DENIAL = re.compile(r'admission webhook "([^"]+)" denied the request')
#: classes that count as a failed review (a create the webhooks must have judged and did not judge right)
FAILED = ("unreviewed", "wrong", "webhook-ours")


def sliced_percent(i: int) -> int:
    """The VRAM percent the ``i``-th sliced Pod asks for: 5, 10, ... 50, then again."""
    return 5 * (1 + i % 10)


def units_of(percent: int) -> str:
    """The canonical credits our webhook folds ``percent`` into (docs/reference/controller.md "Pod admission"):
    ``percent * 16,000`` as decimal SI; for 1..62 percent that is ``<percent * 16>k`` (20 -> ``320k``)."""
    credits = percent * CREDITS_PER_PERCENT
    for suffix, scale in (("M", 10**6), ("k", 10**3)):
        if credits % scale == 0:
            return f"{credits // scale}{suffix}"
    return str(credits)


def pod(name: str, namespace: str, run: str, queue: str, i: int, invalid: bool = False) -> dict:
    """A queue-labelled Pod asking for a logical slice (``sliced: 2`` when ``invalid``)."""
    percent = sliced_percent(i)
    limits = {"nvidia.com/gpu.sliced": "2" if invalid else "1",
              "nvidia.com/gpu.sliced.memory-percentage": str(percent)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: queue, LOAD_LABEL: run}},
            "spec": {"schedulingGates": [{"name": HOLD_GATE}], "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": f"ubuntu:24.{i % 97:02d}",
                                     "command": ["sleep", str(3600 + i)], "resources": {"limits": limits}}]}}


def instance(name: str, namespace: str, run: str, type_name: str, i: int, privileged: bool = False) -> dict:
    """A stopped Instance of ``type_name`` (``privileged`` asks for what the rules refuse)."""
    spec = {"type": type_name, "image": f"ubuntu:24.{i % 97:02d}", "command": ["sleep", str(3600 + i)],
            "stop": True, "volume": {"ephemeral": {"capacity": "1Gi"}}}
    if privileged:
        spec["privileged"] = True
    return {"apiVersion": "worker.gpustack.ai/v1", "kind": "Instance",
            "metadata": {"name": name, "namespace": namespace, "labels": {LOAD_LABEL: run}}, "spec": spec}


def classify_error(status: int, reason: str, message: str) -> str:
    """The class of a non-2xx answer that is not the expected denial (module docstring)."""
    called = WEBHOOK_CALL.search(message)
    if called:
        return "webhook-ours" if called.group(1).endswith(OUR_WEBHOOKS) else "webhook-other"
    if status in (0, 429, 503, 504) or reason in ("Unreachable", "Timeout", "ServiceUnavailable", "TooManyRequests") \
            or "etcdserver" in message or "the server is currently unable" in message.lower() \
            or "apiserver is shutting down" in message:
        return "unavailable"
    denied = WEBHOOK_DENIAL.search(message)
    if denied and denied.group(1).endswith(OUR_WEBHOOKS) and NOT_READY in message:
        return "webhook-ours"   # a replica answered before it was ready: failed closed, not judged
    if denied:
        return "wrong" if denied.group(1).endswith(OUR_WEBHOOKS) else "other"
    return "other"


def judge_create(mix: str, i: int, status: int, reason: str, message: str, body: dict | None) -> str:
    """The class of one create's answer (``body``: the stored object on success)."""
    if mix in ("pod-invalid", "instance-privileged"):
        want = SLICE_DENIED if mix == "pod-invalid" else PRIVILEGED_DENIED
        if status == 0 or status >= 300:
            if want in message and "denied the request" in message:
                return "ok"
            return classify_error(status, reason, message)
        return "unreviewed"   # stored: nothing refused it
    if status == 0 or status >= 300:
        return classify_error(status, reason, message)
    spec = (body or {}).get("spec") or {}
    if mix == "instance":
        return "ok" if spec.get("imagePullPolicy") else "unreviewed"
    resources = ((spec.get("containers") or [{}])[0]).get("resources") or {}
    key = "nvidia.com/gpu.sliced.units"
    got = {(resources.get(m) or {}).get(key) for m in ("requests", "limits")}
    if got == {None}:
        return "unreviewed"
    return "ok" if got == {units_of(sliced_percent(i))} else "wrong"


class Load:
    """The generator's state: the schedule, the objects held, the answer log."""

    def __init__(self, session, namespace: str, run: str, queue: str, type_name: str, rate: float, hold: float,
                 out):
        self.session, self.namespace, self.run, self.queue, self.type_name = session, namespace, run, queue, type_name
        self.rate, self.hold, self.out = rate, hold, out
        self.paths = {"Pod": session.ref("Pod").path(namespace), "Instance": session.ref("Instance").path(namespace)}
        self.lock = threading.Lock()
        self.deletes: list[tuple[float, str, str]] = []   # heap of (due, kind, name)
        self.in_flight = 0
        self.counts: dict[str, int] = {}
        self.stop = threading.Event()

    def record(self, **entry) -> None:
        line = json.dumps(entry, separators=(",", ":"))
        with self.lock:
            key = f"{entry['op']}:{entry['class']}"
            self.counts[key] = self.counts.get(key, 0) + 1
            self.out.write(line + "\n")
            self.out.flush()

    def _send(self, method: str, path: str, body: dict | None, query: dict | None = None):
        from runtime.kube.session import KubeApiError
        try:
            return 200, "", "", self.session.call(method, path, body=body, query=query, timeout=REQUEST_TIMEOUT)
        except KubeApiError as exc:
            return exc.status, exc.reason, exc.message, None
        except Exception as exc:  # noqa: BLE001 - a transport error is an answer here
            return 0, type(exc).__name__, str(exc), None

    def create(self, i: int, due: float) -> None:
        mix = MIX[i % len(MIX)]
        kind = "Pod" if mix.startswith("pod") else "Instance"
        name = f"{self.run}-{'p' if kind == 'Pod' else 'i'}{i:06d}"
        obj = pod(name, self.namespace, self.run, self.queue, i, invalid=mix == "pod-invalid") if kind == "Pod" \
            else instance(name, self.namespace, self.run, self.type_name, i, privileged=mix == "instance-privileged")
        t = time.time()
        status, reason, message, body = self._send("post", self.paths[kind], obj)
        lat = time.monotonic() - due
        cls = judge_create(mix, i, status, reason, message, body)
        if body is not None or status in (0, 504) or "etcdserver" in message:
            # stored, or perhaps stored (the answer was lost): delete it later either way
            with self.lock:
                heapq.heappush(self.deletes, (time.monotonic() + self.hold, kind, name))
        self.record(t=round(t, 3), due=round(due, 3), lat=round(lat, 4), op="create", kind=kind, mix=mix, name=name,
                    **{"class": cls}, status=status, reason=reason, message=message[:400])

    def delete(self, kind: str, name: str, due: float) -> None:
        t = time.time()
        status, reason, message, _ = self._send("delete", f"{self.paths[kind]}/{name}", {"propagationPolicy": "Background"})
        cls = "ok" if status < 300 or status == 404 else classify_error(status, reason, message)
        if status == 0 or cls == "unavailable":
            with self.lock:   # try again later: the object is still ours to remove
                heapq.heappush(self.deletes, (time.monotonic() + 2.0, kind, name))
        self.record(t=round(t, 3), due=round(due, 3), lat=round(time.monotonic() - due, 4), op="delete", kind=kind,
                    mix="", name=name, **{"class": cls}, status=status, reason=reason, message=message[:400])

    def _submit(self, pool: ThreadPoolExecutor, fn, *args) -> bool:
        with self.lock:
            if self.in_flight >= MAX_IN_FLIGHT:
                return False
            self.in_flight += 1

        def run():
            try:
                fn(*args)
            finally:
                with self.lock:
                    self.in_flight -= 1
        pool.submit(run)
        return True

    def run_for(self, seconds: float | None) -> None:
        """Create at ``rate`` until :attr:`stop` is set or ``seconds`` passed; delete as objects fall due."""
        t0 = time.monotonic()
        i = 0
        with ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
            while not self.stop.is_set() and (seconds is None or time.monotonic() - t0 < seconds):
                now = time.monotonic()
                due = t0 + i / self.rate
                while True:
                    with self.lock:
                        item = heapq.heappop(self.deletes) if self.deletes and self.deletes[0][0] <= now else None
                    if item is None:
                        break
                    if not self._submit(pool, self.delete, item[1], item[2], item[0]):
                        with self.lock:
                            heapq.heappush(self.deletes, (now + 0.5, item[1], item[2]))
                        break
                if now >= due:
                    if not self._submit(pool, self.create, i, due):
                        mix = MIX[i % len(MIX)]
                        self.record(t=round(time.time(), 3), due=round(due, 3), lat=0.0, op="create",
                                    kind="Pod" if mix.startswith("pod") else "Instance", mix=mix, name="",
                                    **{"class": "skipped"}, status=0, reason="", message="client saturated")
                    i += 1
                    continue
                self.stop.wait(min(due - now, 0.05))
            self.created = i
        self.drain()

    def drain(self, timeout: float = 180.0) -> None:
        """Delete every object still held, then every object carrying the run label (bounded in time)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with self.lock:
                items, self.deletes = list(self.deletes), []
            if not items:
                break
            for _, kind, name in items:
                self.delete(kind, name, time.monotonic())
        for kind in ("Pod", "Instance"):
            self._send("delete", self.paths[kind], None, query={"labelSelector": f"{LOAD_LABEL}={self.run}"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True, help="where the load's objects live (must exist)")
    parser.add_argument("--run", required=True, help="run id: object name prefix and the value of " + LOAD_LABEL)
    parser.add_argument("--queue", required=True, help="the A10G pool's queue entrance (the sliced Pods' queue label)")
    parser.add_argument("--instance-type", required=True, help="the InstanceType of the load's Instances")
    parser.add_argument("--rate", type=float, default=20.0, help="creates per second (default 20)")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds from a create to its delete (default 2)")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long (default: at SIGTERM)")
    parser.add_argument("--out", required=True, help="JSON lines, one per answer")
    args = parser.parse_args(argv)

    from runtime.kube.session import connect
    session = connect(args.kubeconfig)
    with Path(args.out).open("a") as out:
        load = Load(session, args.namespace, args.run, args.queue, args.instance_type, args.rate, args.hold, out)
        signal.signal(signal.SIGTERM, lambda *_: load.stop.set())
        signal.signal(signal.SIGINT, lambda *_: load.stop.set())
        out.write(json.dumps({"start": {"t": time.time(), "rate": args.rate, "hold": args.hold, "pid": os.getpid()}}) + "\n")
        out.flush()
        load.run_for(args.seconds)
        out.write(json.dumps({"summary": {"t": time.time(), "created": load.created, "counts": load.counts}}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
