"""`accelpolicy webhook-probe`: one admission review to each served webhook, its verdict checked (the
chart's `helm test`: docs/install.md "6. Check").

For every AdmissionPolicy of the rules, a review of the policy's own kind (its first matched operation)
whose object the policy answers the same way whatever the cluster holds: its ``spec`` is a string, so a
policy with an ObjectShape answers the shape error before any rule or lookup runs (an ``Ignore`` policy
allows it unchanged), and a policy without one judges the request's user only (the InstanceTypeFlavor
read-only rule). The expected answer is the engine's own, offline (an empty cluster view); the review is
POSTed to ``--url`` + the policy's path, verified with ``--ca-file`` (the CA certificate the leader
publishes), and the answer compared: ``allowed``, the status code and message, the patch.

Prints one line per webhook (``ok`` or what differed). Exit 0 when every answer matched, 1 otherwise,
2 bad input.
"""
from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request

import click

from runtime.cli.common import engine_from, fail, policy_from
from runtime.engine.admission import admission_view, decide, review_for

PROBE_NAME = "accelpolicy-webhook-probe"
PROBE_USER = "system:serviceaccount:accelpolicy:webhook-probe"


def probe_review(spec) -> dict:
    """The AdmissionReview sent to the webhook of AdmissionPolicy ``spec`` (see the module docstring)."""
    m = spec.match
    version = next((v for v in m.versions if v != "*"), "v1")
    api_version = f"{m.group}/{version}" if m.group else version
    obj = {"apiVersion": api_version, "kind": m.kind,
           "metadata": {"name": PROBE_NAME, "namespace": "default"}, "spec": PROBE_NAME}
    operation = m.operations[0]
    review = review_for(obj, operation, obj if operation != "CREATE" else None,
                        uid=f"{PROBE_NAME}-{spec.webhook}")
    review["request"]["resource"]["resource"] = m.resource
    review["request"]["namespace"] = "default"
    review["request"]["userInfo"] = {"username": PROBE_USER}
    return review


def _essentials(response: dict) -> dict:
    status = response.get("status") or {}
    return {"allowed": response.get("allowed"), "code": status.get("code"), "message": status.get("message"),
            "patch": response.get("patch")}


def _post(url: str, body: dict, context: ssl.SSLContext, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
        return json.loads(resp.read())


@click.command("webhook-probe")
@click.option("--url", required=True, metavar="URL",
              help="base URL of the webhook server, e.g. "
                   "https://gpustack-operator-worker.gpustack-system.svc:443")
@click.option("--ca-file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="the CA certificate (PEM) that verifies the server")
@click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
              help="rules directory (default: the installed rules/, or env ACCELPOLICY_RULES)")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="seconds per review")
def command(url: str, ca_file: str, rules: str | None, timeout: float) -> None:
    """Send one admission review to each webhook of the rules and check each verdict."""
    policy = policy_from(rules)
    engine = engine_from(policy)
    view = admission_view(policy, None, derive_state=False)
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        fail(f"--ca-file {ca_file}: {exc}")
    failed = 0
    for name, spec in sorted(engine.policies.items(), key=lambda item: item[1].webhook):
        review = probe_review(spec)
        expected = _essentials(decide(engine, review, view, policy=name)[0]["response"])
        try:
            got = _essentials(_post(url.rstrip("/") + spec.path, review, context,
                                    timeout).get("response") or {})
        except (urllib.error.URLError, OSError, ValueError) as exc:
            got = {"error": str(getattr(exc, "reason", exc))}
        verdict = "allowed" if expected["allowed"] else f"denied {expected['code']}: {expected['message']}"
        if got == expected:
            click.echo(f"ok    {spec.webhook} ({spec.path}): {verdict}")
        else:
            failed += 1
            click.echo(
                f"FAIL  {spec.webhook} ({spec.path}): expected {json.dumps(expected)}, got {json.dumps(got)}")
    click.echo(
        f"{len(engine.policies) - failed} of {len(engine.policies)} webhooks answered as the rules say")
    sys.exit(1 if failed else 0)
