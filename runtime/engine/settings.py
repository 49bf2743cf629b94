"""Settings as the engine sees them: the Secret's raw strings read against the SettingCatalog.

Source: docs/concepts/settings.md "Settings". A missing key reads as its default; a boolean that does not
parse reads as the default and is reported in ``Settings.invalid`` (the controller turns that into a
Warning Event ``InvalidSetting`` on the Secret).
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Mapping

from runtime.engine.policy import Policy
from runtime.engine.snapshot import Snapshot
from runtime.model.rulefiles import SettingCatalogSpec


@dataclass(frozen=True)
class Settings:
    """Resolved setting values by name (``bool`` settings as bool, others as str)."""

    values: Mapping[str, object]
    invalid: tuple[str, ...] = field(default=())

    def flag(self, name: str) -> bool:
        """A boolean setting; KeyError for a name the catalog does not define."""
        value = self.values[name]
        if not isinstance(value, bool):
            raise KeyError(f"setting {name} is not a boolean")
        return value

    def text(self, name: str) -> str:
        return str(self.values[name])


def parse_bool(catalog: SettingCatalogSpec, raw: str) -> bool | None:
    """The boolean spellings; None when ``raw`` is none of them."""
    if raw in catalog.booleanTrue:
        return True
    if raw in catalog.booleanFalse:
        return False
    return None


def resolve(catalog: SettingCatalogSpec, raw: Mapping[str, str]) -> Settings:
    """Resolve raw string values (Secret data, already decoded) into typed settings."""
    values: dict[str, object] = {}
    invalid = []
    for setting in catalog.settings:
        text = raw.get(setting.name)
        if setting.type == "bool":
            default = parse_bool(catalog, setting.default)
            parsed = parse_bool(catalog, text) if text is not None else default
            if parsed is None:
                invalid.append(setting.name)
                parsed = default
            values[setting.name] = parsed
        else:
            values[setting.name] = text if text else setting.default
    return Settings(values=values, invalid=tuple(invalid))


def decode_secret_data(secret: Mapping | None) -> dict[str, str]:
    """A Secret object's ``data`` (base64) and ``stringData`` as plain strings; bad base64 is skipped."""
    out: dict[str, str] = {}
    if not secret:
        return out
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(str(value), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            continue
    for key, value in (secret.get("stringData") or {}).items():
        out[key] = str(value)
    return out


def settings_of(policy: Policy, snapshot: Snapshot, namespace: str | None = None) -> Settings:
    """Settings resolved from the snapshot's settings Secret named in rules/settings.yaml (defaults when
    it is absent). ``namespace``: where the Secret lives when not the catalog's (env
    ``KUBERNETES_POD_NAMESPACE`` of the controller)."""
    catalog = policy.settings
    secret = snapshot.get("Secret", catalog.secretName, namespace or catalog.namespace)
    return resolve(catalog, decode_secret_data(secret))
