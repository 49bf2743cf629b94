"""Robustness figures for the webhook server (docs/webhook-hardening.md "Webhook hardening: hostile input, bounded memory, slow paths"): figures, not pass/fail.

The server runs in its own process (``accelpolicy webhook --webhook-self-signed`` on 127.0.0.1, the seed
snapshot); this script is the client. Loopback only; every phase is bounded in time.

1. fuzz: ``--fuzz`` reviews (default 3,000), each a seeded random corruption of a valid Pod or
   Instance review (a field replaced by another JSON type, deleted, a lone surrogate, truncated or
   random bytes, no ``request``) -> sent / well-formed answers (HTTP 200, an AdmissionReview whose
   ``response.uid`` echoes the request's readable uid) / HTTP 5xx / tracebacks in the server's log.
2. memory: RSS before and after ``--large`` unique ~1 MiB Instance reviews (default 1,000), and after
   5 s idle.
3. volumes: the time of one review with 1,000 ``additionalVolumes`` (refused by the list cap) and
   the worst of 5 at the cap (100); then, in this process with the shape's cap lifted (a copy of
   rules/), the CPU time of ``/validate-instances`` per unique volume at N = 100..1,600: flat when
   the volume rules are linear (measured before the fix: 2.2 s, 13.4 s, 24.6 s at N = 100, 200, 300).
4. slow clients: ``--slow-body`` connections sending a partial body and ``--slow-headers`` sending
   partial headers (defaults 300 and 200); how many the server still holds
   ``read timeout + 2 s`` after they stopped sending, and whether ``/readyz`` answered meanwhile.

Usage: ``.venv/bin/python benchmarks/robustness.py [--fuzz N] [--large N] [--json]``.
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testing.webhookload import (WebhookProcess, large_instance_review, review_bytes,  # noqa: E402
                                 volumes_instance)

QUEUE = {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"}
READ_TIMEOUT = 10.0  # the server's default (--webhook-read-timeout)
_ODD = [None, True, 0, -1, 2 ** 63, 1.5, "", "oops", "\ud800", [], ["oops"], {}, {"a": {"b": None}}]


def _seed_reviews() -> list[tuple[str, dict]]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "labels": dict(QUEUE)},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {
               "nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.memory-percentage": "20"}}}],
               "initContainers": [{"name": "i", "image": "x"}]}}
    inst = volumes_instance(3)
    inst["spec"].update({"type": "gpustack--nvidia-a10g-linux-amd64", "privileged": False,
                         "resources": {"accelerator": "1", "acceleratorSlicedMemoryPercentage": 20}})
    return [(p, json.loads(review_bytes(pod, "seed"))) for p in ("/validate-pods", "/mutate-pods")] + \
           [(p, json.loads(review_bytes(inst, "seed"))) for p in ("/validate-instances", "/mutate-instances")]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _corrupt(rng: random.Random, review: dict, uid: str) -> bytes:
    body = copy.deepcopy(review)
    body["request"]["uid"] = uid
    kind = rng.random()
    if kind < 0.05:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
    if kind < 0.10:
        text = json.dumps(body)
        return text[: rng.randint(0, len(text))].encode()
    if kind < 0.13:
        body.pop("request")
        return json.dumps(body).encode()
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(body) if p and p[:2] != ("request", "uid")]
        path = rng.choice(paths)
        parent = body
        for step in path[:-1]:
            parent = parent[step]
        if rng.random() < 0.2 and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(_ODD))
    return json.dumps(body).encode()  # ensure_ascii: lone surrogates travel as \ud800 escapes


def fuzz(server: WebhookProcess, count: int, seed: int = 13) -> dict:
    rng = random.Random(seed)
    seeds = _seed_reviews()
    sent = well_formed = five_xx = internal = 0
    with server.client(timeout=15) as client:
        for i in range(count):
            path, review = seeds[i % len(seeds)]
            uid = f"fz-{i}"
            body = _corrupt(rng, review, uid)
            try:
                echoed = json.loads(body)["request"]["uid"]
            except Exception:  # noqa: BLE001 - the uid could not be read from this body
                echoed = ""
            sent += 1
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            if r.status_code >= 500:
                five_xx += 1
                continue
            try:
                answer = r.json()
                resp = answer["response"]
                ok = (r.status_code == 200 and answer.get("kind") == "AdmissionReview"
                      and isinstance(resp.get("allowed"), bool) and resp.get("uid") == echoed)
            except Exception:  # noqa: BLE001
                ok = False
            well_formed += ok
            internal += ok and (resp.get("status") or {}).get("reason") == "InternalError"
    return {"sent": sent, "well_formed": well_formed, "http_5xx": five_xx, "internal_error": internal,
            "tracebacks": server.log().count("Traceback")}


def memory(server: WebhookProcess, count: int) -> dict:
    headers = {"content-type": "application/json"}
    with server.client(timeout=30) as client:
        for i in range(5):
            client.post("/validate-instances", content=large_instance_review(10_000_000 + i, 1 << 20), headers=headers)
        before = server.rss_bytes()
        started = time.monotonic()
        for i in range(count):
            client.post("/validate-instances", content=large_instance_review(i, 1 << 20), headers=headers)
        elapsed = time.monotonic() - started
        after = server.rss_bytes()
    time.sleep(5)
    idle = server.rss_bytes()
    mib = 1 << 20
    return {"reviews": count, "review_bytes": len(large_instance_review(0, 1 << 20)), "seconds": round(elapsed, 1),
            "rss_before_mib": round(before / mib), "rss_after_mib": round(after / mib), "rss_idle_mib": round(idle / mib)}


def volumes(server: WebhookProcess) -> dict:
    headers = {"content-type": "application/json"}
    out = {}
    with server.client(timeout=30) as client:
        for count, tries in ((1000, 3), (100, 5)):
            worst, message = 0.0, ""
            for t in range(tries):
                obj = volumes_instance(count, name=f"vols-{count}-{t}")
                obj["spec"]["type"] = "gpustack--generic-linux-amd64"
                started = time.perf_counter()
                r = client.post("/validate-instances", content=review_bytes(obj, f"v-{count}-{t}"), headers=headers)
                worst = max(worst, time.perf_counter() - started)
                message = r.json()["response"].get("status", {}).get("message", "allowed")
            out[f"{count}_volumes"] = {"worst_seconds": round(worst, 3), "answer": message[:160]}
    return out


def volume_scaling(sizes=(100, 200, 400, 800, 1600)) -> dict:
    """CPU seconds of one ``instances-validation`` review with N unique configMap volumes, the
    Instance shape's ``maxItems`` lifted in a copy of rules/ (the engine in this process)."""
    import shutil

    from runtime.engine.admission import AdmissionEngine, admission_view, decide, review_for
    from runtime.engine.policy import Policy
    from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
    from runtime.snapshots import load_snapshot
    from testing.webhookload import SNAPSHOT

    with tempfile.TemporaryDirectory(prefix="accelpolicy-rules-") as tmp:
        rules = Path(tmp) / "rules"
        shutil.copytree(DEFAULT_RULES_DIR, rules)
        shapes = rules / "admission" / "shapes.yaml"
        shapes.write_text(shapes.read_text().replace("maxItems: 100\n", "maxItems: 100000\n"))
        policy = Policy(load_rules(str(rules)))
    engine = AdmissionEngine(policy)
    view = admission_view(policy, load_snapshot([str(SNAPSHOT)]))
    out = {}
    for n in sizes:
        obj = volumes_instance(n, name=f"scale-{n}")
        obj["spec"]["type"] = "gpustack--generic-linux-amd64"
        for j, vol in enumerate(obj["spec"]["additionalVolumes"]):
            vol["configMap"]["name"] = f"cm-{n}-{j}"
        started = time.process_time()
        answer = decide(engine, review_for(obj), view, "instances-validation")[0]["response"]
        cpu = time.process_time() - started
        out[n] = {"cpu_seconds": round(cpu, 3), "ms_per_volume": round(cpu / n * 1000, 2), "allowed": answer["allowed"]}
    return out


def slow_clients(server: WebhookProcess, partial_bodies: int, partial_headers: int) -> dict:
    ctx = ssl.create_default_context(cafile=str(server.dir / "ca.crt"))
    body = (b"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n{\"apiVersion\": ")
    head = b"POST /validate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"
    socks = []
    for i in range(partial_bodies + partial_headers):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(body if i < partial_bodies else head)
        s.setblocking(False)
        socks.append(s)
    sent_at = time.monotonic()
    ready = httpx.get(server.url + "/readyz", verify=ctx, timeout=5).status_code
    time.sleep(max(0.0, READ_TIMEOUT + 2 - (time.monotonic() - sent_at)))
    held = 0
    for s in socks:
        try:
            data = s.recv(4096)
            held += 0 if data == b"" else 0  # an answer or EOF: the server let go
        except ssl.SSLWantReadError:
            held += 1  # still open and silent
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            s.close()
    return {"connections": len(socks), "partial_bodies": partial_bodies, "partial_headers": partial_headers,
            "read_timeout_s": READ_TIMEOUT, "held_past_timeout": held, "readyz_meanwhile": ready}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz", type=int, default=3000)
    parser.add_argument("--large", type=int, default=1000)
    parser.add_argument("--slow-body", type=int, default=300)
    parser.add_argument("--slow-headers", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="accelpolicy-robustness-") as tmp:
        with WebhookProcess(Path(tmp) / "server") as server:
            figures["fuzz"] = fuzz(server, args.fuzz)
            figures["volumes"] = volumes(server)
            figures["slow_clients"] = slow_clients(server, args.slow_body, args.slow_headers)
            figures["memory"] = memory(server, args.large)
            figures["fuzz"]["tracebacks"] = server.log().count("Traceback")
    figures["volume_scaling"] = volume_scaling()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    f = figures["fuzz"]
    print(f"fuzzed reviews: sent {f['sent']}, well-formed answers {f['well_formed']}, HTTP 5xx {f['http_5xx']}, "
          f"tracebacks in the server log {f['tracebacks']}; InternalError denials {f['internal_error']}")
    m = figures["memory"]
    print(f"memory: {m['reviews']} unique {m['review_bytes'] / (1 << 20):.2f} MiB reviews in {m['seconds']} s: "
          f"RSS {m['rss_before_mib']} MiB before, {m['rss_after_mib']} MiB after, {m['rss_idle_mib']} MiB after 5 s idle")
    for key, v in figures["volumes"].items():
        print(f"{key.replace('_', ' ')}: worst review {v['worst_seconds']} s ({v['answer']})")
    print("volume rules, cap lifted (CPU s per review / ms per volume): " + ", ".join(
        f"N={n} {v['cpu_seconds']} s / {v['ms_per_volume']} ms" for n, v in figures["volume_scaling"].items()))
    s = figures["slow_clients"]
    print(f"slow clients: {s['partial_bodies']} partial bodies + {s['partial_headers']} partial headers, "
          f"{s['held_past_timeout']} held {s['read_timeout_s'] + 2:g} s after the last byte "
          f"(read timeout {s['read_timeout_s']:g} s); /readyz meanwhile: HTTP {s['readyz_meanwhile']}")


if __name__ == "__main__":
    main()
