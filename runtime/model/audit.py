"""Rule kind ``AuditPolicy`` (rules/audit.yaml): what ``accelpolicy audit`` reports beyond the admission
rules, and in which words (docs/audit.md).

- ``drift``: the derived kinds compared with the desired state (``compare``: kind -> dotted fields)
  and the result kind and message of each finding (``edited``, ``missing``, ``extra``, ``staleType``,
  ``input``); messages are Python format strings over the names documented in rules/audit.yaml.
- ``checks``: CEL checks of existing objects (activation ``object``, ``settings``), e.g. a held
  host-access grant whose setting is now off (a ``warn``: docs/concepts/instances.md "Additional volumes and
  host access").
- ``ledger``: the result kind of a Pod allocation annotation its node's Devices refuses.
- ``reach``: whether each pool can keep its promises (docs/audit.md "Pools that cannot schedule"):
  a derived flavor whose ``spec.nodeLabels`` select fewer of its contributing Nodes than contribute,
  a node whose labels count more accelerators than its Devices can use; and the words ``explain``
  and the controller's Events use for the same facts.
- ``presets``: a derived accelerated InstanceType whose product no preset of the PresetTable matches
  (its unitResources are the fallback tier's), the finding ``audit`` reports and ``explain`` prints.
"""
from __future__ import annotations

from typing import ClassVar, Literal, Optional

from pydantic import Field

from runtime.model import rulefiles
from runtime.model.rulefiles import Expr, Strict, Templates as _Templates

ResultKind = Literal["pass", "fail", "warn", "error", "skip"]


class Finding(Strict):
    """The result kind and message template of one kind of finding."""

    result: ResultKind
    message: str = Field(min_length=1)


class DriftSpec(Strict):
    policy: str = Field(min_length=1, description="the policy name drift results carry")
    compare: dict[str, list[str]] = Field(
        description="derived kind -> dotted fields compared with the desired state")
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


class RetryLoopSpec(Strict):
    """A Workload the check answers Retry on its flavor while another flavor of its pool holds a node
    that can take it (docs/concepts/instances.md, "Pinned to a node"): Kueue would give it the same
    flavor after every eviction. ``message`` fields: flavor, other, pool, node."""

    policy: str = Field(min_length=1)
    rule: str = Field(min_length=1)
    result: ResultKind
    message: str = Field(min_length=1)


_SELECTS = {"pool", "flavor", "selected", "nodes", "missing"}
_USES = {"pool", "flavor", "node", "akey", "labelled", "usable", "why"}


class UnselectedSpec(_Templates):
    """A derived flavor whose ``spec.nodeLabels`` select ``selected`` of its ``nodes`` contributors."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"none": _SELECTS, "some": _SELECTS,
                                                "nodeLacks": {"node", "pairs"}}
    rule: str = Field(pattern=r"^[a-z0-9-]+$")
    none: Finding = Field(description="0 of N selected: no Pod of the pool can land on the flavor")
    some: Finding = Field(description="k of N selected, 0 < k < N")
    nodeLacks: str = Field(min_length=1,
                           description="one node of {missing}: {node}, {pairs} (key=value, ...)")


class UnusableSpec(_Templates):
    """A contributing node whose labels count more accelerators than its Devices can use."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"finding": _USES}
    rule: str = Field(pattern=r"^[a-z0-9-]+$")
    finding: Finding


class WhySpec(_Templates):
    """Why a node's Devices can use fewer accelerators than its labels count, per Devices state."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"present": {"unhealthy"}, "maintenance": {"maintenance"},
                                                "missing": set(), "refused": set()}
    present: str = Field(min_length=1,
                         description="the Devices object counts; {unhealthy}: accelerators marked unhealthy")
    maintenance: str = Field("{maintenance} in maintenance", min_length=1,
                             description="added when some are in maintenance; {maintenance}: how many")
    missing: str = Field(min_length=1, description="no Devices object for the node")
    refused: str = Field(min_length=1, description="its Devices count in no view (decision 19)")


class ExplainWords(_Templates):
    """``explain instancetype``'s per-node lines."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"applied": set(), "notApplied": {"missing"},
                 "accelerators": {"akey", "labelled", "usable", "why"}}
    applied: str = Field(min_length=1)
    notApplied: str = Field(min_length=1, description="{missing}: key=value, ... the Node lacks")
    accelerators: str = Field(min_length=1)


class ReachSpec(Strict):
    """Whether each pool can keep its promises (docs/audit.md "Pools that cannot schedule"; the module
    docstring)."""

    policy: str = Field(min_length=1)
    unselected: UnselectedSpec
    unusable: UnusableSpec
    why: WhySpec
    explain: ExplainWords


_FALLBACK = {"pool", "manufacturer", "product", "tier", "cpu", "ram", "at", "why"}


class PresetWhy(_Templates):
    """Why no preset matched (runtime/engine/pools/presets.py ``preset_miss``)."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"noMatch": {"manufacturer", "tokens", "at"},
                                                "noEntries": {"manufacturer", "at"},
                                                "undetectable": {"manufacturer", "at"}}
    noMatch: str = Field(min_length=1, description="the product's tokens start with no listed prefix")
    noEntries: str = Field(min_length=1, description="the table lists no product of the manufacturer")
    undetectable: str = Field(min_length=1, description="not a manufacturer id of rules/manufacturers.yaml")


class PresetFallbackSpec(_Templates):
    """A derived accelerated InstanceType that got the fallback unit: no preset matches its product."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {"fallback": _FALLBACK}
    policy: str = Field(min_length=1)
    rule: str = Field(pattern=r"^[a-z0-9-]+$")
    fallback: Finding = Field(description="{at}: the PresetTable's file:line to edit; {why}: one of ``why``")
    why: PresetWhy


_ACC = {"node", "accelerator", "index", "group", "pods"}


class OutOfServiceSpec(_Templates):
    """Accelerators out of service, per node (docs/concepts/out-of-service.md): the finding of each reason
    (``audit``, one per accelerator or closed node) and the line ``explain instancetype`` prints. ``{pods}``:
    the Pods still holding the accelerator (``noPods`` when none)."""

    VARIABLES: ClassVar[dict[str, set[str]]] = {
        "unhealthy": _ACC | {"fact", "rule", "until"},
        "maintenance": _ACC | {"name", "reason", "owner", "expiry"},
        "closed": {"node", "why", "count"}, "cleanUntil": {"until"}, "stillFailing": set(), "noPods": set()}
    policy: str = Field(min_length=1)
    unhealthy: Finding = Field(description="a health rule took it out")
    maintenance: Finding = Field(description="an AcceleratorMaintenance in force on it")
    closed: Finding = Field(description="its node takes no new Pod (cordon, taint): {why}, {count} "
                                        "accelerators")
    cleanUntil: str = Field(min_length=1, description="{until} of unhealthy: its clean period ends then")
    stillFailing: str = Field(min_length=1, description="{until} of unhealthy while the fact is still read")
    noPods: str = Field(min_length=1, description="{pods} when no Pod holds it")


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
    reach: ReachSpec
    retryLoop: RetryLoopSpec
    presets: PresetFallbackSpec
    outOfService: Optional[OutOfServiceSpec] = Field(None, description="absent: not reported")


rulefiles.SPEC_MODELS["AuditPolicy"] = AuditPolicySpec
