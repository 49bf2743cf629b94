"""Derived pools whose unit is the preset table's fallback, for `accelpolicy explain instancetype` and
`accelpolicy audit` (docs/concepts/pools-and-flavors.md "Unit presets").

A derived accelerated InstanceType takes ``unitResources`` from the tier its product matches in
rules/pools/presets.yaml (:mod:`runtime.engine.pools.presets`); a product the table does not list gets
the fallback tier, which said nothing. :func:`fallback_units` names each such pool with the file:line
of the PresetTable to edit. Words: rules/audit.yaml ``presets``. Pure.
"""
from __future__ import annotations

from runtime.engine.policy import Policy
from runtime.engine.pools import DesiredState
from runtime.engine.pools.presets import preset_miss, product_tokens
from runtime.engine.snapshot import labels_of, name_of


def fallback_units(policy: Policy, desired: DesiredState) -> dict[str, str]:
    """Pool (derived InstanceType name) -> the ``presets.fallback`` message of rules/audit.yaml, for each
    derived accelerated type whose product no preset matches while its ``unitResources`` are still the
    fallback tier's (an administrator's own unit is not reported)."""
    words = policy.ruleset.get("AuditPolicy").presets
    table = policy.presets
    tier = table.fallbackTier
    unit = table.tiers[tier]
    derived_key = policy.key("derivedFromNode")
    out: dict[str, str] = {}
    for it in desired.instance_types:
        spec = it.get("spec") or {}
        group = str(spec.get("acceleratorGroup") or "")
        if labels_of(it).get(derived_key) != "true" or not spec.get("acceleratable") or not group:
            continue
        if (spec.get("unitResources") or {}) != unit:
            continue
        manufacturer, product = group.split("-", 1)[0], str(spec.get("product") or "")
        why = preset_miss(policy, manufacturer, product)
        if not why:
            continue
        at = _preset_line(policy, manufacturer)
        reason = getattr(words.why, why).format(
            manufacturer=manufacturer, at=at, tokens="-".join(product_tokens(policy, manufacturer, product)))
        out[name_of(it)] = words.fallback.message.format(
            pool=name_of(it), manufacturer=manufacturer, product=product or "<none>", tier=tier,
            cpu=unit.get("cpu"), ram=unit.get("ram"), at=at, why=reason)
    return out


def _preset_line(policy: Policy, manufacturer: str) -> str:
    """``file:line`` of the PresetTable's ``spec.manufacturers.<manufacturer>`` (its ``manufacturers``
    when it lists none)."""
    doc = policy.ruleset.all("PresetTable")[0]
    path = ("spec", "manufacturers") + (
        (manufacturer,) if manufacturer in policy.presets.manufacturers else ())
    line = doc.source.line_of(path) if doc.source else doc.line
    return f"{doc.file}:{line}"
