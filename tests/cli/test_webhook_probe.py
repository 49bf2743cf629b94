"""`accelpolicy webhook-probe` (the chart's `helm test`): one review per webhook over real HTTPS, each
verdict the engine's own whatever the server's cluster view holds."""
from __future__ import annotations

import shutil

from click.testing import CliRunner

from runtime.cli import main
from runtime.engine.admission import AdmissionEngine, admission_view
from runtime.engine.policy import Policy
from runtime.rules.loader import DEFAULT_RULES_DIR, load_rules
from runtime.snapshots import load_snapshot
from runtime.webhook.app import WebhookState, build_app
from runtime.webhook.server import ServerThread, self_signed


def _serve(tmp_path, engine_policy: Policy, view_policy: Policy):
    paths = self_signed(tmp_path)
    state = WebhookState()
    # the server judges against the seed cluster: the probe's verdicts must not depend on it
    state.set_ready(AdmissionEngine(engine_policy),
                    admission_view(view_policy, load_snapshot(["tests/fixtures/seed/common"])))
    app = build_app(state, {s.path: n for n, s in state.engine.policies.items()})
    return ServerThread(app, str(paths["cert"]), str(paths["key"])).start(), paths["ca"]


def test_every_webhook_answers_as_the_rules_say(tmp_path):
    policy = Policy(load_rules())
    server, ca = _serve(tmp_path, policy, policy)
    try:
        result = CliRunner().invoke(main, ["webhook-probe", "--url", f"https://127.0.0.1:{server.port}",
                                           "--ca-file", str(ca)])
    finally:
        server.stop()
    lines = result.output.splitlines()
    assert result.exit_code == 0, result.output
    assert lines[-1] == "10 of 10 webhooks answered as the rules say"
    assert [line.split()[1] for line in lines[:-1]] == sorted(
        s.webhook for s in AdmissionEngine(policy).policies.values())
    flavors = next(line for line in lines if "instancetypeflavors" in line)
    assert flavors == ("ok    instancetypeflavors.validation.worker.gpustack.ai (/validate-instancetypeflavors): "
                       "denied 403: InstanceTypeFlavor objects are maintained by accelpolicy and are read-only")
    workloads = next(line for line in lines if "workloads" in line)
    assert workloads == "ok    workloads.mutation.worker.gpustack.ai (/mutate-workloads): allowed"   # failurePolicy Ignore


def test_a_server_answering_otherwise_fails_the_probe(tmp_path):
    """A server running other rules (here the read-only flavor message edited) is caught, named."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules, ignore=shutil.ignore_patterns("*.py", "__pycache__", "tests"))
    flavor = rules / "admission" / "instancetypeflavors.yaml"
    flavor.write_text(flavor.read_text().replace("are read-only", "are read-only (edited)"))
    served = Policy(load_rules(rules))
    server, ca = _serve(tmp_path / "tls", served, served)
    try:
        result = CliRunner().invoke(main, ["webhook-probe", "--url", f"https://127.0.0.1:{server.port}",
                                           "--ca-file", str(ca)])
    finally:
        server.stop()
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[-1] == "9 of 10 webhooks answered as the rules say"
    [failed] = [line for line in lines if line.startswith("FAIL")]
    assert failed.startswith("FAIL  instancetypeflavors.validation.worker.gpustack.ai (/validate-instancetypeflavors): "
                             'expected {"allowed": false, "code": 403, "message": "InstanceTypeFlavor objects are '
                             'maintained by accelpolicy and are read-only"')
    assert "(edited)" in failed
