"""Where one admission review's time goes (docs/performance.md "httptools and uvloop, and a second pass on evaluation cost"): HTTP, decode, engine, CEL, encode.

Serves the real webhook app (the rules and the seed snapshot, as `accelpolicy webhook`) with uvicorn
over HTTPS (the product's configuration: httptools, uvloop) in this process's main thread under
cProfile, and drives it with benchmarks/loadgen.py in a subprocess (unique Pods, paced, loopback
only). A review is judged on the event loop when it fits the app's inline slice, else in its worker
threads: a ``decide()`` call in a worker is profiled there by that thread's own profiler, and the
profiles are merged. Every profiler times with ``time.thread_time``
(the thread's CPU): a wait in the event loop costs nothing, whatever loop runs it (uvloop's own
C code is not visible to cProfile, so its waits could not be told from its work by wall time). The
profile is split into:

- ``decode``: ``json.loads`` of the request body;
- ``engine``: ``decide()`` minus the CEL work below (request parsing, scopes, memo keys, patches);
- ``cel-convert``: JSON <-> CEL value conversion (``to_cel``/``from_cel``) inside evaluations;
- ``cel-eval``: cel-python programs running (the rules themselves, custom functions included);
- ``encode``: the response body (the app's ``_AsciiJSON.render``);
- ``http``: everything else the server thread did (uvicorn, httptools, TLS, routing, handing the
  review to a worker, metrics).

Prints per-review microseconds and shares. Usage: ``.venv/bin/python benchmarks/profile_review.py
[--kind slice|rule1] [--rps 200] [--seconds 5] [--top 0]``.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402

from runtime.engine.admission import AdmissionEngine, admission_view  # noqa: E402
from runtime.engine.policy import Policy  # noqa: E402
from runtime.rules.loader import load_rules  # noqa: E402
from runtime.snapshots import load_snapshot  # noqa: E402
from runtime.webhook.app import WebhookState, build_app  # noqa: E402
from runtime.webhook.server import bind, self_signed, server_config  # noqa: E402

SNAPSHOT = ROOT / "tests" / "fixtures" / "seed" / "common"
PATHS = {"slice": "/mutate-pods", "rule1": "/validate-pods"}
IDLE = ("{method 'poll' of 'select.epoll' objects}", "{built-in method time.sleep}")


def _cum(stats: pstats.Stats, match) -> float:
    """Cumulative seconds of the functions ``match(file, line, name)`` selects, outermost calls only
    (a recursive or nested call is counted once through its caller being selected too)."""
    total = 0.0
    for (file, line, name), (_cc, _nc, _tt, ct, callers) in stats.stats.items():
        if not match(file, name):
            continue
        # time reached through a caller that is itself selected is already counted there
        inner = sum(c[3] for (cf, _cl, cn), c in callers.items() if match(cf, cn))
        total += ct - inner
    return total


def split(stats: pstats.Stats, reviews: int) -> dict:
    """Per-review microseconds of each part (see the module docstring)."""
    idle = sum(v[2] for k, v in stats.stats.items() if pstats.func_std_string(k) in IDLE)
    total = sum(v[2] for v in stats.stats.values()) - idle
    decode = _cum(stats, lambda f, n: n == "loads" and f.endswith("json/__init__.py"))
    decide = _cum(stats, lambda f, n: n == "decide" and f.endswith("engine/admission/__init__.py"))
    cel_all = _cum(stats, lambda f, n: n in ("evaluate", "evaluate_cel") and f.endswith("rules/cel/evaluate.py"))
    convert = _cum(stats, lambda f, n: n in ("to_cel", "from_cel", "json_to_cel") and
                   (f.endswith("rules/cel/values.py") or f.endswith("celpy/adapter.py")))
    encode = _cum(stats, lambda f, n: n == "render" and (f.endswith("starlette/responses.py")
                                                         or f.endswith("webhook/app.py")))
    parts = {"http": total - decode - decide - encode, "decode": decode, "engine": decide - cel_all,
             "cel-convert": convert, "cel-eval": cel_all - convert, "encode": encode}
    per = {k: round(v / reviews * 1e6, 1) for k, v in parts.items()}
    per["total"] = round(total / reviews * 1e6, 1)
    return per


class ProfiledState(WebhookState):
    """A WebhookState whose ``decide()`` in a worker thread runs under that thread's own cProfile profiler
    (a review judged on the event loop is profiled by the main thread's)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.profilers: dict[int, cProfile.Profile] = {}

    def decide(self, data, name, cancel=None, served=None, view=None):
        if threading.current_thread() is threading.main_thread():   # judged on the event loop: profiled there
            return super().decide(data, name, cancel, served, view)
        profiler = self.profilers.setdefault(threading.get_ident(), cProfile.Profile(time.thread_time))
        profiler.enable()
        try:
            return super().decide(data, name, cancel, served, view)
        finally:
            profiler.disable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(PATHS), default="slice")
    parser.add_argument("--rps", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=0, help="also print the N top functions by own time")
    args = parser.parse_args()
    policy = Policy(load_rules())
    engine = AdmissionEngine(policy)
    state = ProfiledState()
    app = build_app(state, {spec.path: name for name, spec in engine.policies.items()})
    state.set_ready(engine, admission_view(policy, load_snapshot([SNAPSHOT])))
    with tempfile.TemporaryDirectory(prefix="accelpolicy-profile-") as tmp:
        paths = self_signed(tmp)
        sock = bind("127.0.0.1", 0)
        url = f"https://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(server_config(app, str(paths["cert"]), str(paths["key"])))
        client = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "loadgen.py"), "--url", url,
                                   "--ca", str(paths["ca"]), "--path", PATHS[args.kind], "--kind", args.kind,
                                   "--mode", "paced", "--rps", str(args.rps), "--seconds", str(args.seconds)],
                                  stdout=subprocess.PIPE, text=True)

        def stop_when_done() -> None:
            client.wait()
            server.should_exit = True

        threading.Thread(target=stop_when_done, daemon=True).start()
        profiler = cProfile.Profile(time.thread_time)
        t0 = time.perf_counter()
        profiler.enable()
        server.run(sockets=[sock])
        profiler.disable()
        wall = time.perf_counter() - t0
        out = client.stdout.read()
    stats = pstats.Stats(profiler)
    for worker in state.profilers.values():
        stats.add(worker)
    reviews = sum(v[1] for (f, _l, n), v in stats.stats.items()
                  if n == "decide" and f.endswith("engine/admission/__init__.py"))
    per = split(stats, reviews)
    print(f"{args.kind} {PATHS[args.kind]}: {reviews} reviews (30 warm-up included) in {wall:.1f} s; client: {out.strip()}")
    print("per review, microseconds of server CPU (thread CPU) under cProfile (profiling inflates every part):")
    for k, v in per.items():
        share = f"{100 * v / per['total']:5.1f} %" if k != "total" else ""
        print(f"  {k:12s} {v:9.1f} us  {share}")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
