"""A Pod carrying the backtracking label under load (docs/rule-authoring.md "Regular expressions"): the real
HTTPS server on loopback with two workers, the rules copied with one rule, ``team-label``, that matches the
label ``team`` against ``^([a-z0-9]+-?)+[a-z0-9]$`` (Python's ``re`` needs 2^n steps on 'aaa...A'; at 63
characters it never ends and holds the interpreter lock meanwhile). Three client processes
(benchmarks/loadgen.py) send slice Pods to the other path, ``/mutate-pods``, while this process sends Pods
with a 63-character backtracking label to ``/validate-pods`` and asks ``/healthz`` between them. Every
review is answered (errors: 0), each labelled Pod denied by the rule, ``/healthz`` answers every time.
The other path's p99 before and during and the slowest ``/healthz`` are printed (``-s``): the machine is
shared."""
from __future__ import annotations

import shutil
import threading
import time

import httpx

import benchmarks.loadgen as loadgen
from runtime.engine.admission import AdmissionEngine, review_for
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.webhook.app import WebhookState, build_app
from runtime.webhook.server import ServerThread, self_signed
from tests.admission.test_cel_budget import QUEUE, view  # noqa: F401  (view: the fixture)
from tests.builders import pod

LABELLED = 20   # Pods with the backtracking label, one after the other
RULE = """    - name: team-label
      when: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      expression: "object.metadata.labels['team'].matches('^([a-z0-9]+-?)+[a-z0-9]$')"
      reason: Forbidden
      field: metadata.labels.team
      message: must be lower-case words joined by single dashes
"""


def _rules(tmp_path):
    root = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, root, ignore=shutil.ignore_patterns("tests"))
    path = root / "admission" / "pods.yaml"
    text = path.read_text()
    anchor = text.index("  validations:\n", text.index("  name: pods-validation\n")) + len("  validations:\n")
    path.write_text(text[:anchor] + RULE + text[anchor:])
    return root


def test_a_backtracking_label_leaves_the_other_path_and_healthz_answering(tmp_path, view):  # noqa: F811
    tls = self_signed(tmp_path / "tls")
    state = WebhookState(workers=2)
    state.set_ready(AdmissionEngine(Policy(load_rules(_rules(tmp_path)))), view)
    paths = {"/validate-pods": "pods-validation", "/mutate-pods": "pods-mutation"}
    server = ServerThread(build_app(state, paths), str(tls["cert"]), str(tls["key"])).start()
    answers, health = [], []
    try:
        before = loadgen.run(server.url, str(tls["ca"]), "/mutate-pods", "slice", "closed", 3, clients=3)
        during: dict = {}
        load = threading.Thread(target=lambda: during.update(loadgen.run(
            server.url, str(tls["ca"]), "/mutate-pods", "slice", "closed", 6, clients=3)))
        load.start()
        with httpx.Client(timeout=30, verify=str(tls["ca"])) as http:
            time.sleep(1.5)   # the clients started and warmed up
            for i in range(LABELLED):
                labelled = pod(f"team-{i}", labels={**QUEUE, "team": "a" * 62 + "A"}, image="x")
                answers.append(http.post(f"{server.url}/validate-pods",
                                         json=review_for(labelled, uid=f"t{i}")).json()["response"])
                started = time.perf_counter()
                health.append((http.get(f"{server.url}/healthz").status_code, time.perf_counter() - started))
        load.join(120)
    finally:
        server.stop()
        state.close()
    print(f"\n/mutate-pods: {before['count']} + {during['count']} answered, {before['errors']} + {during['errors']} "
          f"errors; p99 {before['p99_ms']:.1f} ms before, {during['p99_ms']:.1f} ms during; slowest /healthz "
          f"{max(s for _, s in health) * 1000:.1f} ms")
    assert (before["errors"], during["errors"]) == (0, 0) and during["count"] > 0
    assert [(a["allowed"], a["status"]["code"], a["status"]["message"]) for a in answers] == [
        (False, 422, f'Pod "team-{i}" is invalid: metadata.labels.team: Forbidden: must be lower-case words '
                     "joined by single dashes") for i in range(LABELLED)]
    assert [code for code, _ in health] == [200] * LABELLED
