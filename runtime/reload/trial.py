"""The reload gate's trial: a new rules generation is tried before it may replace the serving one
(docs/rule-authoring.md "How a rules change goes live").

:func:`try_generation` takes the serving :class:`~runtime.engine.policy.Policy` and a RuleSet that
loaded (so it linted clean: :func:`runtime.rules.loader.rule_problems` is the loader's own check) and
returns a :class:`Trial`:

1. ``compile``: the AdmissionPolicies build an engine (a dangling ``paramsFrom``, builtin or shape);
2. ``suite``: every case of the rule suites under ``<rules>/tests`` passes (:mod:`runtime.ruletests`;
   a directory without ``tests/``, as the chart mounts it, has none to run);
3. ``replay-object``: the cluster's existing objects (the audit's view,
   :func:`runtime.report.audit.audited_requests`, its derivation and its CEL checks) are judged
   without a new evaluation error (a :class:`~runtime.rules.cel.errors.CelEvalError` of any kind, a budget
   stop included: the engine's ``rule-error``; one the serving generation makes on the same object too does
   not refuse the edit, or no edit could ever replace rules that fail somewhere);
4. ``replay-review``: so are the reviews the server answered recently (``reviews``, in memory).

The first step that fails is the refusal's ``reason`` and its lines the ``problems``. Every verdict that
changes between the two generations (allowed -> denied and back, per policy and rule, on objects and
on reviews) is in ``changes`` either way, with how many objects and reviews were judged
(``objects``, ``reviews``). What the generation would do to the pools and the work running on them is
:mod:`runtime.reload.consequences`; whether that holds it, :func:`runtime.reload.consequences.hold_reasons`.
Pure but for reading the suites' files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from runtime.engine.admission import AdmissionEngine, AdmissionView, Outcome, admission_view, decide
from runtime.engine.admission.verdict import RULE_ERROR
from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.report.audit import audited_requests, check_results
from runtime.rules.cel.errors import CelEvalError
from runtime.rules.loader import RuleSet
from runtime.ruletests import Runner, load_cases, load_dra_cases, run_dra_case, suite_documents

@dataclass(frozen=True)
class VerdictChange:
    """One verdict a new generation changes: ``policy`` and the ``rule`` that decides (the denying rule
    of the side that denies; ``-`` when none is named), the object (``ref``: ``Kind namespace/name``),
    ``before`` and ``after`` (``allowed``, ``denied``, ``warned``, ``dryrun-denied``), and ``source``:
    ``object`` (an existing object, the audit's view) or ``review`` (a review answered recently)."""

    policy: str
    rule: str
    ref: str
    before: str
    after: str
    source: str = "object"

    def __str__(self) -> str:
        where = "" if self.source == "object" else " (a recent review)"
        return f"{self.policy}/{self.rule or '-'} {self.ref}{where}: {self.before} -> {self.after}"

    @property
    def newly_denied(self) -> bool:
        return self.before == "allowed" and self.after == "denied"


@dataclass
class Trial:
    """The reload gate's verdict on one generation: ``reason`` None when it passed, else the refusal's
    label (``accelpolicy_rules_refused_total{reason}``: ``lint``, ``compile``, ``suite``, ``replay-object``,
    ``replay-review``, ``replica``, ``leader``) with ``problems`` (one line each); ``changes``: every
    verdict it changes (reported whether or not it serves); ``objects`` and ``reviews``: how many existing
    objects and recent reviews both generations judged, ``denied_reviews`` how many of those reviews it
    newly denies (each counted, where ``changes`` names an object once); ``consequences``: what it does to
    the pools (:class:`runtime.reload.consequences.Consequences`, where the host computed them)."""

    reason: Optional[str] = None
    problems: list[str] = field(default_factory=list)
    changes: list[VerdictChange] = field(default_factory=list)
    objects: int = 0
    reviews: int = 0
    denied_reviews: int = 0
    consequences: object = None

    @property
    def accepted(self) -> bool:
        return self.reason is None

    def newly_denied(self, source: str) -> int:
        """How many of ``source`` (``object`` or ``review``) it newly denies (allowed -> denied)."""
        if source == "review":
            return self.denied_reviews
        return sum(1 for c in self.changes if c.source == source and c.newly_denied)


EVAL_ERROR = RULE_ERROR   # the engine's rule name for an expression that failed to evaluate


def verdict_of(outcome: Outcome) -> str:
    """``allowed`` (a patch included), ``warned``, ``dryrun-denied`` or ``denied``."""
    label = outcome.verdict()
    return "allowed" if label in ("allowed", "patched") else label if label in ("warned", "dryrun-denied") \
        else "denied"


def try_generation(serving: Policy, ruleset: RuleSet, snapshot: Optional[Snapshot] = None,
                   reviews: Iterable[tuple[str, dict]] = (), engine: Optional[AdmissionEngine] = None,
                   old_engine: Optional[AdmissionEngine] = None,
                   review_view: Optional[Callable[[Policy], AdmissionView]] = None) -> Trial:
    """Try ``ruleset`` against ``serving`` (module docstring). ``snapshot``: the cluster's objects (None:
    no object replay); ``reviews``: ``(webhook policy name, AdmissionReview body)`` recently answered;
    ``engine``/``old_engine``: the two generations' engines when the caller built them already;
    ``review_view(policy)``: the view a generation judges the reviews against, as the server that
    answered them does (None: :func:`~runtime.engine.admission.admission_view` derived from ``snapshot``;
    an admission replica judges against the objects the controller published)."""
    policy = Policy(ruleset)
    try:
        engine = engine or AdmissionEngine(policy)
    except KeyError as exc:
        return Trial("compile", [str(exc.args[0]) if exc.args else str(exc)])
    if serving.ruleset.get("ReloadGate").suites:   # the serving generation's: an edit cannot skip its suites
        failed = suite_problems(policy)
        if failed:
            return Trial("suite", failed)
    old_engine = old_engine or AdmissionEngine(serving)
    changes: list[VerdictChange] = []
    counted = [0, 0, 0]   # objects, reviews judged by both generations; reviews newly denied
    if snapshot is not None:
        trial = _replay_objects(serving, policy, old_engine, engine, snapshot, changes, counted)
        if trial is not None:
            return trial
    view_of = review_view or (lambda generation: admission_view(generation, snapshot))
    trial = _replay_reviews(serving, policy, old_engine, engine, view_of, list(reviews), changes, counted)
    if trial is not None:
        return trial
    return Trial(None, [], changes, objects=counted[0], reviews=counted[1], denied_reviews=counted[2])


def suite_problems(policy: Policy) -> list[str]:
    """One line per failing case of the suites under ``<rules>/tests`` (``FAIL suite::case (file): problem``,
    its first problem on one line),
    or the one error that stops them (a suite that does not read, a snapshot that is missing)."""
    root = Path(policy.ruleset.root)
    if not (root / "tests").is_dir():
        return []
    try:
        documents = suite_documents(root)
        runner = Runner(policy, root.parent)
        results = list(runner.run_all(load_cases(root, documents)))
        results += [run_dra_case(policy, case) for case in load_dra_cases(root, documents)]
    except (OSError, ValueError, KeyError, CelEvalError) as exc:
        return [f"rule suites under {root / 'tests'}: {exc}"]
    return [f"FAIL {r.case.id} ({r.case.file}): " + " ".join(
        line.strip() for line in r.problems[0].splitlines())
            for r in results if not r.passed]


def _ref(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{obj.get('kind', '')} {namespace + '/' if namespace else ''}{meta.get('name', '')}"


def _error_text(outcome: Outcome) -> str:
    return outcome.denial[2] if outcome.denial is not None \
        else f"policy {outcome.policy}: a rule failed to evaluate"


def _change(name: str, ref: str, before: Outcome, after: Outcome, source: str) -> Optional[VerdictChange]:
    """The change between two outcomes of one object, or None; the rule is the denying side's last."""
    old, new = verdict_of(before), verdict_of(after)
    if old == new:
        return None
    decider = after if new != "allowed" else before
    return VerdictChange(name, decider.rules[-1] if decider.rules else "", ref, old, new, source)


def _replay_objects(serving: Policy, policy: Policy, old_engine: AdmissionEngine, engine: AdmissionEngine,
                    snapshot: Snapshot, changes: list, counted: list[int]) -> Optional[Trial]:
    """Judge every existing object with both generations (appending to ``changes``, counting
    ``counted[0]``); a Trial when the new one fails to derive, to evaluate on an object, or to evaluate an
    audit check."""
    try:
        view = admission_view(policy, snapshot)
        check_results(policy.ruleset.get("AuditPolicy"), snapshot, view.settings)
    except (CelEvalError, ValueError, KeyError, TypeError) as exc:
        return Trial("replay-object", [f"the cluster's objects: {exc}"], changes)
    old_view = admission_view(serving, snapshot)
    errors = []
    for name, obj, request in audited_requests(engine, snapshot):
        if request is None:
            continue
        after = engine.run(name, request, view)
        before = old_engine.run(name, request, old_view) if name in old_engine.policies else None
        if not _compare(name, _ref(obj), before, after, "object", changes, counted):
            errors.append(f"{_ref(obj)}: {_error_text(after)}")
    return Trial("replay-object", errors, changes) if errors else None


def _compare(name: str, ref: str, before: Optional[Outcome], after: Outcome, source: str, changes: list,
             counted: list[int]) -> bool:
    """Record one object's (``source`` ``object``) or review's (``review``) two outcomes: False when the
    new generation failed to evaluate on it and the serving one did not (an error the serving rules make
    too is not new), else True, its verdict change (if any) in ``changes`` and counted in ``counted``
    (objects, reviews, reviews newly denied)."""
    if EVAL_ERROR in after.rules:
        return before is not None and EVAL_ERROR in before.rules
    if before is None:
        return True
    counted[0 if source == "object" else 1] += 1
    change = _change(name, ref, before, after, source)
    if change is not None and source == "review" and change.newly_denied:
        counted[2] += 1
    if change is not None and change not in changes:
        changes.append(change)
    return True


def _replay_reviews(serving: Policy, policy: Policy, old_engine: AdmissionEngine, engine: AdmissionEngine,
                    view_of: Callable[[Policy], AdmissionView], reviews: list[tuple[str, dict]],
                    changes: list, counted: list[int]) -> Optional[Trial]:
    """Judge each recent review with both generations (a policy the new rules lack is skipped: its
    webhook is no longer registered), counting ``counted[1]``; a Trial naming the review (operation, kind,
    namespace/name, webhook: never its body) when the new generation fails to evaluate on one. Each
    review's verdict change is one line (two reviews of one object that change alike are one line)."""
    if not reviews:
        return None
    views: dict[str, AdmissionView] = {}
    errors = []
    for name, review in reviews:
        if name not in engine.policies:
            continue
        if not views:
            views = {"new": view_of(policy), "old": view_of(serving)}
        _, after = decide(engine, review, views["new"], name)
        request = review.get("request") or {}
        ref = (f"{request.get('operation', '')} {(request.get('kind') or {}).get('kind', '')} "
               f"{request.get('namespace') + '/' if request.get('namespace') else ''}"
               f"{request.get('name', '')}")
        before = decide(old_engine, review, views["old"], name)[1] if name in old_engine.policies else None
        if not _compare(name, ref, before, after, "review", changes, counted):
            errors.append(f"a review answered recently ({ref}, webhook {name}): {_error_text(after)}")
    return Trial("replay-review", errors, changes) if errors else None
