"""Unit-resource preset matching (spec/presets.md §3); the table is rules/pools/presets.yaml.

``unit_for(policy, manufacturer, product)`` -> ``{"cpu": "8", "ram": "64Gi"}``.
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
    the preset table lists it "for completeness" (presets.md §4, last section).
    """
    table = policy.presets
    entries = table.manufacturers.get(manufacturer)
    if manufacturer not in policy.manufacturers or not entries:
        return table.fallbackTier
    tokens = product_tokens(policy, manufacturer, product)
    if not tokens:
        return table.fallbackTier
    for entry in entries:
        for prefix in entry.prefixes:
            prefix_tokens = [t for t in _SPLIT.split(prefix) if t]
            if tokens[: len(prefix_tokens)] == prefix_tokens:
                for refinement in entry.by:
                    if refinement.token in tokens:
                        return refinement.tier
                return entry.tier
    return table.fallbackTier


def unit_for(policy: Policy, manufacturer: str, product: str) -> dict[str, str]:
    """``{"cpu", "ram"}`` of the matched tier (a copy)."""
    return dict(policy.presets.tiers[match_tier(policy, manufacturer, product)])
