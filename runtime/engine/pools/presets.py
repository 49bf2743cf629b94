"""Unit-resource preset matching (docs/tasks/add-manufacturer-or-preset.md "A product without a preset"); the
table is rules/pools/presets.yaml.

``unit_for(policy, manufacturer, product)`` -> ``{"cpu": "8", "ram": "64Gi"}``;
``preset_miss(policy, manufacturer, product)`` -> why no preset matches ("" when one does), for the
words ``explain`` and ``audit`` use when a derived type takes the fallback unit
(docs/concepts/pools-and-flavors.md).
"""
from __future__ import annotations

import re

from runtime.model.normalize import normalize_name
from runtime.engine.policy import Policy

_SPLIT = re.compile(r"[-_.]")


def product_tokens(policy: Policy, manufacturer: str, product: str) -> list[str]:
    """Steps 2-4: slug the product, split on - _ ., drop leading vendor-line words."""
    key = normalize_name(product, manufacturer, 0, None)
    tokens = [t for t in _SPLIT.split(key) if t]
    drop = set(policy.presets.dropLeadingTokens)
    while tokens and tokens[0] in drop:
        tokens.pop(0)
    return tokens


def match_tier(policy: Policy, manufacturer: str, product: str) -> str:
    """The tier name of (manufacturer, product); the fallback tier when nothing matches.

    A manufacturer that is not a detectable id (rules/manufacturers.yaml) always falls back, even if
    the preset table lists it "for completeness" (docs/tasks/add-manufacturer-or-preset.md "Change a preset
    (and see the effect in a minute)", last section).
    """
    return _match(policy, manufacturer, product)[0] or policy.presets.fallbackTier


def preset_miss(policy: Policy, manufacturer: str, product: str) -> str:
    """Why (manufacturer, product) takes the fallback tier: ``"undetectable"`` (not a manufacturer id of
    rules/manufacturers.yaml), ``"noEntries"`` (the table lists none of its products), ``"noMatch"`` (no
    prefix matches its tokens); "" when a preset matches."""
    return _match(policy, manufacturer, product)[1]


def _match(policy: Policy, manufacturer: str, product: str) -> tuple[str, str]:
    """(matched tier or "", why it matched none or "")."""
    table = policy.presets
    entries = table.manufacturers.get(manufacturer)
    if manufacturer not in policy.manufacturers:
        return "", "undetectable"
    if not entries:
        return "", "noEntries"
    tokens = product_tokens(policy, manufacturer, product)
    for entry in entries if tokens else ():
        for prefix in entry.prefixes:
            prefix_tokens = [t for t in _SPLIT.split(prefix) if t]
            if tokens[: len(prefix_tokens)] == prefix_tokens:
                for refinement in entry.by:
                    if refinement.token in tokens:
                        return refinement.tier, ""
                return entry.tier, ""
    return "", "noMatch"


def unit_for(policy: Policy, manufacturer: str, product: str) -> dict[str, str]:
    """``{"cpu", "ram"}`` of the matched tier (a copy)."""
    return dict(policy.presets.tiers[match_tier(policy, manufacturer, product)])
