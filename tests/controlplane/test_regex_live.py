"""The backtracking label live (docs/rule-authoring.md "Regular expressions"): the controller serves its
webhooks for a copy of the rules with one more rule, ``team-label`` (the label ``team`` against
``^([a-z0-9]+-?)+[a-z0-9]$``, which Python's ``re`` needs 2^n steps for on 'aaa...A'), registered with the
local kube-apiserver. While a client keeps sending slice Pods to the other path (``/mutate-pods``) and
another asks ``/healthz``, ``kubectl create`` of Pods with a 63-character backtracking label is refused by
the rule through the API server; every review of the other path and every ``/healthz`` is answered. The
other path's p99 before and during and the slowest ``/healthz`` are printed (``-s``), not asserted: the machine is shared."""
from __future__ import annotations

import ssl
import threading
import time

import httpx
import pytest
import yaml

import benchmarks.loadgen as loadgen
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from tests.admission.test_regex_load import _rules
from tests.controlplane.test_webhooks_live import A10G_ENTRANCE, NS, sa_kubeconfig, serving  # noqa: F401

LABELLED = 5


@pytest.fixture(scope="module")
def served(sa_kubeconfig, tmp_path_factory):  # noqa: F811
    """The controller for the copied rules, its webhooks registered, its loop running; the CA's path."""
    tmp = tmp_path_factory.mktemp("regex")
    with serving(sa_kubeconfig, Policy(load_rules(_rules(tmp))), tmp) as webhooks:
        yield webhooks, tmp / "tls" / "ca.crt"


class Prober(threading.Thread):
    """Asks ``/healthz`` every 50 ms until stopped: status codes and seconds."""

    def __init__(self, url: str, ca: str):
        super().__init__(daemon=True)
        self.url, self.ca, self.answers, self.stop = url, ca, [], threading.Event()

    def run(self) -> None:
        with httpx.Client(verify=ssl.create_default_context(cafile=self.ca), timeout=30) as http:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    code = http.get(f"{self.url}/healthz").status_code
                except httpx.HTTPError as exc:
                    code = repr(exc)
                self.answers.append((code, time.perf_counter() - started))
                self.stop.wait(0.05)


def _pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kueue.x-k8s.io/queue-name": A10G_ENTRANCE, "team": "a" * 62 + "A"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def test_a_backtracking_label_is_refused_live_and_the_rest_keeps_answering(served, kubectl):
    webhooks, ca = served
    url = f"https://127.0.0.1:{webhooks.server.port}"
    prober = Prober(url, str(ca))
    before = loadgen.run(url, str(ca), "/mutate-pods", "slice", "closed", 4, clients=2)
    load: dict = {}
    other = threading.Thread(target=lambda: load.update(loadgen.run(url, str(ca), "/mutate-pods", "slice", "closed",
                                                                    8, clients=2)))
    prober.start()
    other.start()
    refused = []
    try:
        time.sleep(1.5)
        for i in range(LABELLED):
            started = time.perf_counter()
            proc = kubectl("create", "-f", "-", input=yaml.safe_dump(_pod(f"team-{i}")), check=False)
            refused.append((proc.returncode, proc.stderr.strip(), time.perf_counter() - started))
        other.join(120)
    finally:
        prober.stop.set()
        prober.join(30)
        kubectl("-n", NS, "delete", "pod", *[f"team-{i}" for i in range(LABELLED)], "--ignore-not-found",
                check=False)
    print(f"\n/mutate-pods: {before['count']} + {load.get('count')} answered, {before['errors']} + "
          f"{load.get('errors')} errors, p99 {before['p99_ms']:.1f} ms before, {load.get('p99_ms', 0):.1f} ms during; /healthz: {len(prober.answers)} answered, slowest {max(s for _, s in prober.answers) * 1000:.1f} "
          f"ms; kubectl create, slowest {max(s for _, _, s in refused):.2f} s")
    assert [(code, stderr) for code, stderr, _ in refused] == [
        (1, f'The Pod "team-{i}" is invalid: metadata.labels.team: Forbidden: must be lower-case words joined by '
            "single dashes") for i in range(LABELLED)]
    assert (before["errors"], load["errors"]) == (0, 0) and load["count"] > 0
    assert {code for code, _ in prober.answers} == {200}
