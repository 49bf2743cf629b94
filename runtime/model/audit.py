"""Rule kind ``AuditPolicy`` (rules/audit.yaml): what ``accelpolicy audit`` reports beyond the admission
rules, and in which words (issue 12 item 1).

- ``drift``: the derived kinds compared with the desired state (``compare``: kind -> dotted fields)
  and the result kind and message of each finding (``edited``, ``missing``, ``extra``, ``staleType``,
  ``input``); messages are Python format strings over the names documented in rules/audit.yaml.
- ``checks``: CEL checks of existing objects (activation ``object``, ``settings``), e.g. a held
  host-access grant whose setting is now off (a ``warn``: spec/instances.md §6).
- ``ledger``: the result kind of a Pod allocation annotation its node's Devices refuses.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, Strict

ResultKind = Literal["pass", "fail", "warn", "error", "skip"]


class Finding(Strict):
    """The result kind and message template of one kind of finding."""

    result: ResultKind
    message: str = Field(min_length=1)


class DriftSpec(Strict):
    policy: str = Field(min_length=1, description="the policy name drift results carry")
    compare: dict[str, list[str]] = Field(description="derived kind -> dotted fields compared with the desired state")
    edited: Finding
    missing: Finding
    extra: Finding
    staleType: Finding
    input: Finding


class AuditCheck(Strict):
    """A CEL check of every existing ``kind`` object: ``expression`` true = pass."""

    name: str = Field(pattern=r"^[a-z0-9-]+$")
    policy: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    result: ResultKind
    when: Optional[Expr] = None
    expression: Expr
    field: str = ""
    message: str = Field(min_length=1)


class LedgerSpec(Strict):
    policy: str = Field(min_length=1)
    result: ResultKind


class AuditPolicySpec(Strict):
    """``kind: AuditPolicy``: see the module docstring. ``source`` fills each result's ``source`` and
    ``reportName`` the Report/ClusterReport ``metadata.name``."""

    source: str = Field(min_length=1)
    reportName: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    passMessage: str = Field(min_length=1)
    skipMessage: str = Field(min_length=1)
    drift: DriftSpec
    checks: list[AuditCheck] = []
    ledger: LedgerSpec


rulefiles.SPEC_MODELS["AuditPolicy"] = AuditPolicySpec
