"""Seeding the settings Secret at controller start (docs/concepts/settings.md "Settings").

Pure helpers; the controller performs the one write they call for:

* the Secret is missing -> create it with every in-scope setting at its default, the default taken
  from env ``GPUSTACK_<UPPER_SNAKE_NAME>`` when set (e.g. ``GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED``);
* it exists -> add only the missing keys; a stored value is never overwritten (env values are
  first-deploy seeds only); keys that are not settings are left untouched.

The namespace is the catalog's (the system namespace of rules/controller.yaml) unless env
``KUBERNETES_POD_NAMESPACE`` names another (the catalog's ``namespaceEnv``).
"""
from __future__ import annotations

import base64
from datetime import datetime
from typing import Mapping

from runtime.kube.events import CONTROLLER_COMPONENT, warning_event
from runtime.model.rulefiles import SettingCatalogSpec


def env_name(catalog: SettingCatalogSpec, setting: str) -> str:
    """``instance-privileged-allowed`` -> ``GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED``."""
    return catalog.envPrefix + setting.upper().replace("-", "_").replace(".", "_")


def seed_values(catalog: SettingCatalogSpec, env: Mapping[str, str]) -> dict[str, str]:
    """Every setting's first-deploy value: env override, else the built-in default."""
    return {s.name: env.get(env_name(catalog, s.name), s.default) for s in catalog.settings}


def missing_data(catalog: SettingCatalogSpec, stored: Mapping[str, str] | None,
                 env: Mapping[str, str]) -> dict[str, str]:
    """Secret ``data`` entries (base64) to add: the settings ``stored`` (the Secret's ``data``, or
    None when the Secret is missing) does not hold yet. Empty when nothing is missing."""
    stored = stored or {}
    return {name: base64.b64encode(value.encode()).decode()
            for name, value in seed_values(catalog, env).items() if name not in stored}


def secret_namespace(catalog: SettingCatalogSpec, env: Mapping[str, str]) -> str:
    """Where the settings Secret lives (env ``KUBERNETES_POD_NAMESPACE`` overrides the catalog)."""
    return env.get(catalog.namespaceEnv) or catalog.namespace


def invalid_setting_event(catalog: SettingCatalogSpec, secret: Mapping, setting: str, value: str,
                          now: datetime) -> dict:
    """The Warning Event (core/v1; reason and message: ``invalidEvent`` of rules/settings.yaml) on
    ``secret`` for a stored value of ``setting`` that does not parse; the default is used meanwhile."""
    meta = secret["metadata"]
    involved = {"apiVersion": "v1", "kind": "Secret", "name": meta["name"],
                "namespace": meta.get("namespace"), "uid": meta.get("uid")}
    return warning_event(involved, catalog.invalidEvent.reason,
                         catalog.invalidEvent.message.format(setting=setting, value=value),
                         CONTROLLER_COMPONENT, now,
                         name=f"{meta['name']}.{setting}.{int(now.timestamp() * 1000):x}")
