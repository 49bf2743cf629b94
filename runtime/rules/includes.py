"""One AdmissionPolicy in several files: a validation group's ``validationsFrom`` names an
``AdmissionValidations`` document whose validations the group runs (docs/rule-authoring.md "One policy,
several files").

:func:`include_validations` runs once per load, before the static checks, on every document whose schema
held: each group with ``validationsFrom`` gets the named document's validations (the same objects: their
expressions were compiled with their own file and lines), so the engine, the audit, the exceptions and
the checks see one policy. A name no document has, a document no policy names, and a document that
includes itself (through others) are load problems naming the file and field.
"""
from __future__ import annotations

import copy
from typing import Any

from runtime.model.admission import Validation, all_validations
from runtime.rules.vocabulary import Problem, problem_at
from runtime.rules.yamlsrc import dotted

KIND = "AdmissionValidations"


def include_validations(documents: list) -> list[Problem]:
    """Fill every ``validationsFrom`` group of ``documents`` (loaded ``RuleFile`` objects) in place; the
    problems found (none when every name resolves, every AdmissionValidations document is used and no
    inclusion loops)."""
    fragments = {doc.name: doc for doc in documents if doc.kind == KIND}
    used: set[str] = set()
    problems: list[Problem] = []
    for doc in documents:
        if doc.kind == "AdmissionPolicy":
            _resolve(doc, doc.spec.validations, ("validations",), (), fragments, used, problems)
    for name, doc in fragments.items():
        if name not in used:
            problems.append(problem_at(doc, "metadata.name", f"{KIND} {name!r} is named by no "
                                       "AdmissionPolicy (validationsFrom): its validations never run"))
    return problems


def _resolve(doc: Any, validations: list[Validation], path: tuple, chain: tuple[str, ...], fragments: dict,
             used: set[str], problems: list[Problem]) -> None:
    """Fill the ``validationsFrom`` groups under ``validations`` (at ``path`` of ``doc``) from
    ``fragments``, depth first; ``chain`` the fragment names being filled (a loop is a problem). A plain
    function, not a closure over itself: a rules generation the next reload replaces is freed by reference
    counting alone (docs/performance.md "CPU per review outside decide()")."""
    for i, v in enumerate(validations):
        at = path + (i,)
        if not v.validationsFrom:
            _resolve(doc, v.validations, at + ("validations",), chain, fragments, used, problems)
            continue
        name, field = v.validationsFrom, dotted(("spec",) + at + ("validationsFrom",))
        fragment = fragments.get(name)
        if fragment is None:
            known = ", ".join(sorted(fragments)) or "none"
            problems.append(problem_at(doc, field, f"no {KIND} named {name!r} ({KIND}: {known})"))
        elif name in chain:
            problems.append(problem_at(doc, field, f"{KIND} {name!r} includes itself: "
                                       f"{' -> '.join(chain + (name,))}"))
        else:
            used.add(name)
            _resolve(fragment, fragment.spec.validations, ("validations",), chain + (name,), fragments, used,
                     problems)
            v.validations = fragment.spec.validations


def included_fragments(documents: list) -> dict:
    """``name -> (file, source)`` of the AdmissionValidations documents (with their source) that a policy
    of ``documents`` names: the static checks check them inside that policy, with its variables."""
    named = {v.validationsFrom for doc in documents if doc.kind == "AdmissionPolicy"
             for v in all_validations(doc.spec.validations) if v.validationsFrom}
    return {doc.name: (doc.file, doc.source) for doc in documents
            if doc.kind == KIND and doc.name in named and doc.source is not None}


def placed_in(scope: Any, where: tuple) -> Any:
    """A copy of a static-check scope (runtime.rules.checks) whose findings are placed in ``where``, the
    ``(file, source)`` of an included AdmissionValidations document (:func:`included_fragments`)."""
    moved = copy.copy(scope)
    moved.file, moved.doc = where
    return moved
