"""Webhook registration reconciled both ways (docs/rule-authoring.md "How a rules change goes live";
docs/reference/controller.md "Controller and webhooks"): the configurations hold exactly the webhooks of
the generation in force whose paths every serving replica serves. A path a new generation adds is
registered only once the replicas serve it; a webhook no replica serves (the phantom left by a path a
generation dropped, or one someone added) is removed; a revert restores the previous registrations
exactly."""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from runtime.controller.registrar import WebhookRegistrar
from runtime.engine.admission.registration import ClientConfig, drift, webhook_configurations
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from tests.fakeapi import FakeApi

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
CLIENT = ClientConfig(ca_pem=CA, url_base="https://127.0.0.1:9443")
POLICY = Policy(load_rules())
PHANTOM = "pods-copy.validation.worker.gpustack.ai"


def add_copy(rules: Path) -> None:
    """pods-validation copied, in ``rules``, under a new name, path (/validate-pods-copy) and webhook
    (:data:`PHANTOM`): a new policy at a new path."""
    text = (rules / "admission" / "pods.yaml").read_text()
    start = text.index("kind: AdmissionPolicy\nmetadata:\n  name: pods-validation")
    end = text.find("\n---", start)
    policy = text[start:end if end > 0 else None].replace("name: pods-validation", "name: pods-validation-copy", 1)
    policy = policy.replace("path: /validate-pods", "path: /validate-pods-copy", 1).replace(
        "webhook: pods.validation.worker.gpustack.ai", f"webhook: {PHANTOM}", 1)
    (rules / "admission" / "pods-copy.yaml").write_text("apiVersion: rules.accelpolicy.dev/v1alpha1\n" + policy)


def with_copy(tmp_path) -> Policy:
    """The shipped rules plus :func:`add_copy`."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("tests"))
    add_copy(rules)
    return Policy(load_rules(rules))


def registrar(api: FakeApi, policy: Policy, **kwargs) -> WebhookRegistrar:
    reg = WebhookRegistrar(api, policy, CLIENT, **kwargs)
    reg.cache.start()
    assert reg.cache.wait_synced(10)
    return reg


def live(api: FakeApi, kind: str = "ValidatingWebhookConfiguration") -> dict:
    return api.get(kind, "gpustack-worker-validation" if kind.startswith("Validating") else "gpustack-worker-mutation")


@pytest.fixture
def api():
    fake = FakeApi({"MutatingWebhookConfiguration": [], "ValidatingWebhookConfiguration": []})
    yield fake
    fake.stop.set()


def test_a_webhook_no_replica_serves_is_removed(api, tmp_path):
    """The phantom: the configuration holds a webhook whose path nothing serves (a generation that added it,
    then a revert). Today's rules render no such webhook, so the registrar takes it out."""
    grown = webhook_configurations(with_copy(tmp_path), CLIENT)
    api.objects["ValidatingWebhookConfiguration"] = [copy.deepcopy(grown[1])]
    assert PHANTOM in {w["name"] for w in live(api)["webhooks"]}
    reg = registrar(api, POLICY)
    try:
        done = reg.sync()
    finally:
        reg.stop()
    assert "apply ValidatingWebhookConfiguration gpustack-worker-validation (drifted at webhooks[" \
           f"{PHANTOM}] (extra))" in done
    assert [w["name"] for w in live(api)["webhooks"]] == [
        w["name"] for w in webhook_configurations(POLICY, CLIENT)[1]["webhooks"]]


def test_a_new_path_is_registered_only_once_the_replicas_serve_it_and_a_revert_restores_the_old_exactly(api, tmp_path):
    before = webhook_configurations(POLICY, CLIENT)
    grown = with_copy(tmp_path)
    served = {"paths": {spec.path for spec in (d.spec for d in POLICY.ruleset.all("AdmissionPolicy"))}}
    policy = {"now": POLICY}
    reg = registrar(api, POLICY, policy_of=lambda: policy["now"], served=lambda: served["paths"])
    try:
        reg.sync()
        assert drift(live(api), before[1]) == [] and reg.complete
        policy["now"] = grown                          # the leader accepted the new generation
        reg.sync()                                     # ... the replicas do not serve it yet
        assert PHANTOM not in {w["name"] for w in live(api)["webhooks"]} and not reg.complete
        served["paths"] = served["paths"] | {"/validate-pods-copy"}   # now they do
        reg.sync()
        assert PHANTOM in {w["name"] for w in live(api)["webhooks"]} and reg.complete
        policy["now"] = POLICY                         # the revert
        reg.sync()
        assert live(api)["webhooks"] == before[1]["webhooks"]
        assert drift(live(api), before[1]) == [] and drift(live(api, "MutatingWebhookConfiguration"),
                                                           before[0]) == []
    finally:
        reg.stop()


def test_unknown_served_paths_register_every_webhook_of_the_rules(api):
    reg = registrar(api, POLICY, served=lambda: None)
    try:
        reg.sync()
    finally:
        reg.stop()
    assert drift(live(api), webhook_configurations(POLICY, CLIENT)[1]) == []


def test_drift_names_an_extra_webhook():
    desired = webhook_configurations(POLICY, CLIENT)[1]
    extra = copy.deepcopy(desired)
    extra["webhooks"].append({"name": PHANTOM})
    assert drift(extra, desired) == [f"webhooks[{PHANTOM}] (extra)"]
