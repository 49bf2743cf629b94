"""Webhook configurations rendered from the rule files, drift detection, the live view's staleness,
and the controller's webhook options (docs/reference/controller.md "Controller and webhooks"; rules/admission/registration.yaml)."""
from __future__ import annotations

import base64
import copy
import shutil

import pytest
import yaml
from click.testing import CliRunner

from runtime.cli import main
from runtime.controller.webhooks import LiveAdmissionView
from runtime.engine.admission import AdmissionEngine, review_for, view_kinds
from runtime.engine.admission.registration import (ClientConfig, drift, owned_configuration, stale_configurations,
                                                   webhook_configurations)
from runtime.engine.ownership import owned
from runtime.engine.policy import Policy
from runtime.rules.loader import load_rules
from runtime.snapshots import load_snapshot
from tests.builders import pod

POLICY = Policy(load_rules())
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
URL = ClientConfig(ca_pem=CA, url_base="https://127.0.0.1:9443")


def _hooks(configs):
    return {w["name"]: w for c in configs for w in c["webhooks"]}


def test_two_configurations_named_by_the_registration_rule():
    configs = webhook_configurations(POLICY, URL)
    assert [(c["kind"], c["metadata"]["name"]) for c in configs] == [
        ("MutatingWebhookConfiguration", "gpustack-worker-mutation"),
        ("ValidatingWebhookConfiguration", "gpustack-worker-validation")]
    assert [w["name"] for w in configs[0]["webhooks"]] == [
        "instances.mutation.worker.gpustack.ai", "instancetypes.mutation.worker.gpustack.ai",
        "pods.mutation.worker.gpustack.ai", "workloads.mutation.worker.gpustack.ai"]
    assert [w["name"] for w in configs[1]["webhooks"]] == [
        "instances.validation.worker.gpustack.ai", "instancetypeflavors.validation.worker.gpustack.ai",
        "instancetypes.validation.worker.gpustack.ai", "pods.validation.worker.gpustack.ai",
        "policyexceptions.validation.worker.gpustack.ai", "settings.validation.gpustack.ai"]


def test_pod_mutating_webhook_in_full():
    hook = _hooks(webhook_configurations(POLICY, URL))["pods.mutation.worker.gpustack.ai"]
    assert hook == {
        "name": "pods.mutation.worker.gpustack.ai",
        "clientConfig": {"url": "https://127.0.0.1:9443/mutate-pods", "caBundle": base64.b64encode(CA).decode()},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                   "scope": "*"}],
        "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None",
        "admissionReviewVersions": ["v1"], "timeoutSeconds": 10,
        "objectSelector": {"matchExpressions": [{"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}]},
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                                    # decision 17: the reserved namespaces of rules/controller.yaml
                                                    "values": ["gpustack-system", "kube-system", "kube-public",
                                                               "kube-node-lease"]}]},
        "reinvocationPolicy": "Never"}


def test_failure_policies_and_operations_follow_the_spec_table():
    hooks = _hooks(webhook_configurations(POLICY, URL))
    table = {name: (h["failurePolicy"], h["rules"][0]["operations"]) for name, h in hooks.items()}
    assert table == {
        "pods.mutation.worker.gpustack.ai": ("Fail", ["CREATE"]),
        "pods.validation.worker.gpustack.ai": ("Fail", ["CREATE"]),
        "workloads.mutation.worker.gpustack.ai": ("Ignore", ["CREATE", "UPDATE"]),
        "instances.mutation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE"]),
        "instances.validation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE"]),
        "instancetypes.mutation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE"]),
        "instancetypes.validation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE"]),
        "instancetypeflavors.validation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE", "DELETE"]),
        "settings.validation.gpustack.ai": ("Fail", ["CREATE", "UPDATE", "DELETE"]),
        "policyexceptions.validation.worker.gpustack.ai": ("Fail", ["CREATE", "UPDATE"]),
    }
    assert hooks["workloads.mutation.worker.gpustack.ai"]["rules"][0]["apiVersions"] == ["v1beta2"]
    # only the Pod webhooks carry selectors; the Setting webhook must see gpustack-system
    assert sorted(n for n, h in hooks.items() if "namespaceSelector" in h) == [
        "pods.mutation.worker.gpustack.ai", "pods.validation.worker.gpustack.ai"]


def test_objects_being_deleted_skip_the_webhooks_at_the_api_server():
    """docs/install.md "How removal, upgrades and the namespace are decided": every policy with match.skipDeleting is registered with the matchCondition of
    rules/admission/registration.yaml, so the API server does not even call it for an UPDATE of an object
    being deleted: its finalizers can be removed while the webhooks are down (an uninstall, a break-glass)."""
    hooks = _hooks(webhook_configurations(POLICY, URL))
    condition = [{"name": "not-being-deleted",
                  "expression": "request.operation != 'UPDATE' || !has(oldObject.metadata.deletionTimestamp)"}]
    skipping = {d.spec.webhook for d in POLICY.ruleset.all("AdmissionPolicy") if d.spec.match.skipDeleting}
    assert skipping == {"instances.mutation.worker.gpustack.ai", "instances.validation.worker.gpustack.ai",
                        "instancetypes.mutation.worker.gpustack.ai", "instancetypes.validation.worker.gpustack.ai"}
    assert {n for n, h in hooks.items() if h.get("matchConditions") == condition} == skipping
    assert not [n for n, h in hooks.items() if n not in skipping and "matchConditions" in h]


def test_an_owner_makes_the_configurations_go_with_it():
    """docs/install.md "How removal, upgrades and the namespace are decided": with an owner (the chart's ClusterRole) each configuration carries an
    ownerReference to it, and a configuration without it (the old chart's) has drifted."""
    owner = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "gpustack-operator-worker", "uid": "0f0f"}}
    owned_by = webhook_configurations(POLICY, URL, owner)
    for config in owned_by:
        assert config["metadata"]["ownerReferences"] == [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "gpustack-operator-worker",
             "uid": "0f0f"}]
    unowned = webhook_configurations(POLICY, URL)
    assert "ownerReferences" not in unowned[0]["metadata"]
    assert drift(unowned[0], owned_by[0]) == ["metadata.ownerReferences"]
    assert drift(owned_by[0], owned_by[0]) == []


def test_service_client_config():
    client = ClientConfig(ca_pem=CA, service=("gpustack-system", "gpustack-operator-worker", 443))
    hook = _hooks(webhook_configurations(POLICY, client))["settings.validation.gpustack.ai"]
    assert hook["clientConfig"] == {"service": {"namespace": "gpustack-system", "name": "gpustack-operator-worker",
                                                "path": "/validate-settings", "port": 443},
                                    "caBundle": base64.b64encode(CA).decode()}
    with pytest.raises(ValueError, match="exactly one"):
        ClientConfig(ca_pem=CA)
    with pytest.raises(ValueError, match="empty"):
        ClientConfig(ca_pem=b" ", url_base="https://x")


def test_drift_ignores_server_defaults_and_finds_edits():
    desired = webhook_configurations(POLICY, URL)[1]
    live = copy.deepcopy(desired)
    live["metadata"]["uid"] = "u"
    for hook in live["webhooks"]:
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
    assert drift(live, desired) == []
    live["webhooks"][0]["clientConfig"]["caBundle"] = "b3RoZXI="
    live["webhooks"][3]["rules"][0]["operations"] = ["CREATE", "UPDATE"]
    assert drift(live, desired) == [
        "webhooks[instances.validation.worker.gpustack.ai].clientConfig.caBundle",
        "webhooks[pods.validation.worker.gpustack.ai].rules[0].operations"]
    del live["webhooks"][1]
    assert "webhooks[instancetypeflavors.validation.worker.gpustack.ai]" in drift(live, desired)
    assert drift(None, desired) == ["<missing>"]


def test_ownership_by_labels_and_stale_configurations():
    desired = webhook_configurations(POLICY, URL)
    ours = {"kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "gpustack-worker-old", "labels": {"app.kubernetes.io/managed-by": "accelpolicy"}}}
    foreign = {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "kueue-validating-webhook-configuration"}}
    assert owned_configuration(POLICY, ours) and owned(POLICY, ours)
    assert not owned_configuration(POLICY, foreign) and not owned(POLICY, foreign)
    assert stale_configurations(POLICY, [ours, foreign] + desired, desired) == [ours]


def test_excluded_namespaces_are_not_judged_offline_either():
    engine = AdmissionEngine(POLICY)
    excluded = pod("demo", "gpustack-system", queue="gpustack-fnv64-c4680bb149644f1c",
                   limits={"nvidia.com/gpu": "1", "nvidia.com/gpu.shared": "1"})
    request = review_for(excluded)["request"]
    from runtime.engine.admission.review import parse_review
    assert engine.matching(parse_review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                         "request": request})) == []
    excluded["metadata"]["namespace"] = "default"
    assert engine.matching(parse_review(review_for(excluded))) == ["pods-mutation", "pods-validation"]


class _FakeCache:
    """The two ClusterCache calls the live view makes."""

    def __init__(self, snapshot):
        self.snapshot_calls = 0
        self._snapshot = snapshot

    def snapshot(self, kinds=None):
        self.snapshot_calls += 1
        return self._snapshot


def test_live_view_rebuilds_only_after_an_event_of_a_kind_it_reads():
    cache = _FakeCache(load_snapshot(["tests/fixtures/seed/common"]))
    view = LiveAdmissionView(cache, POLICY, "gpustack-system")
    assert view.kinds == view_kinds(POLICY) >= {"Node", "InstanceType", "LocalQueue", "ClusterQueue", "Secret"}
    first = view()
    assert view() is first and view.rebuilds == 1
    assert first.get("InstanceType", "gpustack--nvidia-a10g-linux-amd64")   # derived, with status
    view.on_event("Pod", "ADDED", {})          # not read by admission: no rebuild
    assert view() is first
    view.on_event("Node", "MODIFIED", {})
    view.on_event("InstanceType", "ADDED", {})  # a burst costs one rebuild
    assert view() is not first and view.rebuilds == 2 and cache.snapshot_calls == 2


@pytest.mark.parametrize("args, message", [
    (["--webhook-self-signed", "x"], "error: --webhook-self-signed need --webhook-port"),
    (["--once", "--webhook-port", "0"], "error: --once reconciles and exits: it serves no webhooks"),
    (["--webhook-port", "0"], "error: give one of --webhook-cert and --webhook-key and --webhook-ca, "
                              "--webhook-cert-secret NAME with --webhook-cert-dir DIR, or --webhook-self-signed DIR"),
    (["--webhook-port", "0", "--webhook-service", "nonamespace"],
     "error: --webhook-service 'nonamespace': expected NAMESPACE/NAME[:PORT]"),
    (["--webhook-port", "0", "--webhook-url-base", "http://x"],
     "error: --webhook-url-base 'http://x': the API server calls webhooks over https://"),
])
def test_controller_webhook_options_bad_input_exit_2(args, message, tmp_path):
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", __file__, *args], catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_controller_webhook_cert_must_be_a_pair(tmp_path):
    (tmp_path / "c.pem").write_text("not a certificate")
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", __file__, "--webhook-port", "0",
                                       "--webhook-cert", str(tmp_path / "c.pem"), "--webhook-key",
                                       str(tmp_path / "c.pem"), "--webhook-ca", str(tmp_path / "c.pem")])
    assert result.exit_code == 2
    assert f"error: --webhook-cert {tmp_path / 'c.pem'} / --webhook-key {tmp_path / 'c.pem'}: not a PEM " \
           "certificate and matching private key" in result.output


def test_registration_rule_is_checked_at_load(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree("rules", rules)
    path = rules / "admission" / "registration.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["timeoutSeconds"] = 45
    path.write_text(yaml.safe_dump(doc))
    from runtime.rules.loader import RuleLoadError
    with pytest.raises(RuleLoadError) as err:
        load_rules(rules)
    assert any("spec.timeoutSeconds" in str(p) and "30" in str(p) for p in err.value.problems)


def test_missing_registration_rule_is_named_before_serving(tmp_path):
    from pathlib import Path
    from types import SimpleNamespace

    from runtime.controller.clock import utc_now
    from runtime.controller.webhooks import ControllerWebhooks, WebhookTls

    rules = tmp_path / "rules"
    shutil.copytree("rules", rules)
    (rules / "admission" / "registration.yaml").unlink()
    policy = Policy(load_rules(rules))
    controller = SimpleNamespace(policy=policy, cache=None, settings_namespace="gpustack-system", listeners=[],
                                 clock=utc_now)
    tls = WebhookTls(Path("tls.crt"), Path("tls.key"), CA)
    with pytest.raises(KeyError, match="must hold exactly one WebhookRegistration, found 0"):
        ControllerWebhooks(controller, tls)
    served_only = ControllerWebhooks(controller, tls, register_configurations=False)
    assert controller.listeners == [served_only.view.on_event]
