"""The ``Setting`` view of the settings Secret (docs/concepts/settings.md "Settings"), as planned writes.

Pure: :func:`plan_settings` reads the settings catalog (rules/settings.yaml), the cached Secret and
the cached ``Setting`` objects (gpustack.ai/v1) of the settings namespace and returns
:class:`Action` s:

* a catalog setting without its ``Setting`` -> ``create`` it (name = the setting, no ``spec.value``),
  followed by its ``apply-status``; a deleted one is thus recreated on the next pass;
* ``metadata.generation`` > ``status.observedGeneration`` and ``spec.value`` set and different from
  the Secret's key (a missing key counts as different) -> ``patch`` the Secret key (merge patch of
  ``data``), then the status with ``observedGeneration`` = ``generation``. A stale ``spec.value``
  (generation already observed) is never re-applied, so a direct Secret write stays;
* ``status`` = {``description`` (the catalog's), ``editable: true``, ``sensitive: false``, ``value``
  (the Secret's raw string; the default when the key is missing), ``observedGeneration``} ->
  ``apply-status`` when it differs from the live status.

The value is applied as written: checking it is the Setting webhook's job (docs/concepts/settings.md "Setting
admission"). Without the Secret (not seeded yet) nothing is written to it; ``status.value`` shows the
defaults. Setting objects whose name is not a catalog setting are left alone.
"""
from __future__ import annotations

import base64

from runtime.engine.plan import Action, Verb
from runtime.engine.settings import decode_secret_data
from runtime.engine.snapshot import KNOWN_KINDS, Snapshot
from runtime.model.rulefiles import SettingCatalogSpec

KIND = "Setting"


def setting_status(catalog: SettingCatalogSpec, name: str, value: str, observed_generation: int) -> dict:
    """The ``status`` of the Setting ``name`` showing ``value``."""
    setting = next(s for s in catalog.settings if s.name == name)
    return {"description": setting.description, "editable": True, "sensitive": False, "value": value,
            "observedGeneration": observed_generation}


def plan_settings(catalog: SettingCatalogSpec, namespace: str, snapshot: Snapshot) -> list[Action]:
    """Writes keeping the Setting view of ``snapshot``'s settings Secret (see the module docstring)."""
    api_version = KNOWN_KINDS[KIND][0]
    secret = snapshot.get("Secret", catalog.secretName, namespace)
    stored = decode_secret_data(secret)
    actions: list[Action] = []
    for setting in catalog.settings:
        name = setting.name
        ident = {"apiVersion": api_version, "kind": KIND, "metadata": {"name": name, "namespace": namespace}}
        live = snapshot.get(KIND, name, namespace)
        value = stored.get(name, setting.default)
        if live is None:
            actions.append(Action(Verb.CREATE, KIND, name, namespace, body=ident, reason="missing"))
            actions.append(Action(Verb.APPLY_STATUS, KIND, name, namespace,
                                  body={**ident, "status": setting_status(catalog, name, value, 1)},
                                  reason="new Setting"))
            continue
        status = live.get("status") or {}
        generation = int(live["metadata"].get("generation") or 1)
        observed = int(status.get("observedGeneration") or 0)
        wanted = (live.get("spec") or {}).get("value")
        if generation > observed and not (wanted is not None and secret is None):  # else: once seeded
            if wanted is not None and stored.get(name) != wanted:
                actions.append(Action(Verb.PATCH, "Secret", catalog.secretName, namespace,
                                      body={"data": {name: base64.b64encode(str(wanted).encode()).decode()}},
                                      reason=f"Setting {name} spec.value (generation {generation})"))
                value = str(wanted)
            observed = generation
        want = setting_status(catalog, name, value, observed)
        if want != status:
            actions.append(Action(Verb.APPLY_STATUS, KIND, name, namespace, body={**ident, "status": want},
                                  reason="status differs"))
    return actions
