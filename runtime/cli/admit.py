"""`accelpolicy admit`: judge one object offline with the admission rules.

Prints the full AdmissionReview (request and response). Exit 0 allowed, 1 denied, 2 bad input.
"""
from __future__ import annotations

import base64
import json
import sys

import click

from runtime.cli.common import engine_from, fail, now_option, policy_from, rules_cache_options
from runtime.cli.source import ADMISSION, read_source, source_options
from runtime.engine.admission import admission_view, decide, review_for
from runtime.engine.admission.verdict import RULE_ERROR
from runtime.engine.snapshot import SnapshotError
from runtime.snapshots import read_objects


def _read_object(path: str) -> dict:
    """The one object of ``path`` (file or '-'), read as snapshots are (same errors, exit 2)."""
    try:
        docs, _ = read_objects([path])
    except SnapshotError as exc:
        fail(str(exc))
    if len(docs) != 1:
        fail(f"{path}: expected exactly one object, found {len(docs)} documents")
    obj = docs[0]
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict) or not obj.get("kind"):
        fail(f"{path}: not a Kubernetes object (needs kind and metadata.name)")
    meta = obj.get("metadata") or {}
    if not (meta.get("name") or meta.get("generateName")):
        fail(f"{path}: not a Kubernetes object (needs kind and metadata.name)")
    return obj


def render_text(review: dict, answer: dict) -> str:
    """Human-readable verdict: request summary, status (and an allowed review's warnings: a PolicyException
    that let it in), and the decoded patch."""
    req, resp = review["request"], answer["response"]
    lines = [f"request:  {req['operation']} {req['kind']['kind']} "
             f"{(req['namespace'] + '/') if req['namespace'] else ''}{req['name']} (uid {req['uid']})"]
    if resp["allowed"]:
        lines.append("verdict:  allowed")
        lines += [f"warning:  {w}" for w in resp.get("warnings") or ()]
    else:
        status = resp.get("status") or {}
        lines.append(f"verdict:  denied ({status.get('code')} {status.get('reason')})")
        lines.append(f"message:  {status.get('message')}")
    if resp.get("patch"):
        lines.append(f"patch ({resp['patchType']}, decoded):")
        for op in json.loads(base64.b64decode(resp["patch"])):
            lines.append("  " + json.dumps(op, separators=(", ", ": ")))
    return "\n".join(lines)


@click.command("admit")
@click.option("-f", "--filename", "filename", required=True, help="the object (YAML or JSON; - for stdin)")
@click.option("--old", "old", default=None, help="the old object (UPDATE, DELETE)")
@click.option("--operation", type=click.Choice(["CREATE", "UPDATE", "DELETE"]), default=None,
              help="default: UPDATE with --old, else CREATE")
@source_options
@click.option("--no-derive", is_flag=True, help="judge against the snapshot as given (no derivation)")
@click.option("--rules", default=None, envvar="ACCELPOLICY_RULES",
              help="rules directory (default: the installed rules/, or env ACCELPOLICY_RULES)")
@rules_cache_options
@click.option("-o", "--output", type=click.Choice(["json", "text"]), default="json")
@now_option
def command(filename, old, operation, snapshots, cluster, kubeconfig, context, no_derive, rules, output, now):
    """Judge one object as the admission webhooks would and print the AdmissionReview.

    Without --snapshot it judges against the live cluster. Admission sees the cluster after
    derivation (e.g. the fronting InstanceType of a queue, with its status), and the PolicyExceptions in
    force at --now (an allowed-by-exception review carries a warning naming one). Exit 0 allowed, 1 denied,
    2 bad input or a rule that failed to evaluate (the review printed is the policy's failure-mode
    answer; stderr names the policy).
    """
    policy = policy_from(rules)
    obj = _read_object(filename)
    old_obj = _read_object(old) if old else None
    operation = operation or ("UPDATE" if old_obj else "CREATE")
    if operation == "DELETE" and old_obj is None:
        old_obj = obj
    if operation == "UPDATE" and old_obj is None:
        fail("--operation UPDATE needs --old OLD.yaml (the object as the cluster holds it)")
    source = read_source(policy, ADMISSION, snapshots, kubeconfig, context, cluster, "admit")
    view = admission_view(policy, source.snapshot, derive_state=not no_derive, live=source.live,
                          settings_namespace=source.settings_namespace)
    review = review_for(obj, operation, old_obj)
    answer, outcome = decide(engine_from(policy), review, view, now=now)
    if output == "json":
        click.echo(json.dumps({**review, "response": answer["response"]}, indent=2))
    else:
        click.echo(render_text(review, answer))
    if RULE_ERROR in outcome.rules:
        status = answer["response"].get("status") or {}
        click.echo(f"error: policy {outcome.policy}: a rule failed to evaluate"
                   + (f": {status.get('message')}" if status.get("message") else
                      " (failurePolicy Ignore: allowed)"), err=True)
        sys.exit(2)
    sys.exit(0 if answer["response"]["allowed"] else 1)
