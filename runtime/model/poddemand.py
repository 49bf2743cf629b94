"""The Pod demand: one implementation of docs/reference/controller.md "Pod accelerator requests" for every
reader.

:func:`pod_containers` walks a Pod ``spec``'s containers (init, then app) and classifies their
accelerator keys; :func:`pod_demand` folds the walk into the Pod's demand per family and base. Served
by the admission CEL functions ``podContainers`` / ``podDemand`` (runtime/rules/cel/library/objects.py: the
Pod webhooks and the Workload fit pin of rules/admission/*.yaml) and by the admission check
(runtime/engine/admissioncheck/demand.py ``pod_demand``).

Rules:

- a key's value is its ``requests`` entry, else its ``limits`` entry;
- init containers with ``restartPolicy: Always`` are native sidecars: they never claim (rule 7
  refuses them a request), so the demand leaves them out;
- exclusive: the app containers' sum against the largest init container's value, whichever is larger;
- shared: the largest ``<base>.shared`` of one container; sliced: the largest ``<base>.sliced.units``
  of one container (0 before the Pod webhook wrote them); partitioned: the profile named.

``table`` is the resource-key classifier table (``resourceKeys`` of the AdmissionParams
``resource-keys`` in rules/admission/pods.yaml); ``manufacturers`` is ``[{id, base, partitionKind}]``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from runtime.model.resourcefamily import resource_family

Value = Callable[[Any, Mapping, str], int]
"""(quantity, container, key) -> the integer value (its ``Value()``, rounded up)."""


def _group(list_name: str, container: Mapping) -> str:
    if list_name == "containers":
        return "running"
    return "sidecar" if container.get("restartPolicy") == "Always" else "init"


def pod_containers(spec: Mapping, table: Mapping, manufacturers: list) -> list[dict]:
    """The containers of a Pod ``spec`` in manifest order (init, then app) with their accelerator claims.

    Each item: ``list`` (`initContainers`/`containers`), ``index``, ``field`` (`spec.containers[0]`),
    ``name``, ``group`` (`init`, `running`, `sidecar`), ``container`` (the manifest entry), ``keys``
    (key -> quantity as written: requests, else limits; claiming keys only), ``families`` and
    ``bases_of`` (key -> family, key -> base), ``claims`` (sorted families), ``bases`` (family -> sorted
    bases, every family present), ``profiles`` (sorted ``{key, base, profile}``). Visibility and `none` keys
    never claim.
    """
    out = []
    for list_name in ("initContainers", "containers"):
        for i, ctr in enumerate(spec.get(list_name) or []):
            ctr = ctr if isinstance(ctr, dict) else {}
            res = ctr.get("resources") or {}
            requests, limits = res.get("requests") or {}, res.get("limits") or {}
            keys: dict[str, Any] = {}
            families: dict[str, str] = {}
            bases_of: dict[str, str] = {}
            bases: dict[str, set] = {f: set() for f in table["families"]}
            profiles = []
            for key in sorted(set(requests) | set(limits)):
                info = resource_family(str(key), table, manufacturers)
                if info["family"] not in bases:
                    continue
                keys[key] = requests[key] if key in requests else limits[key]
                families[key], bases_of[key] = info["family"], info["base"]
                bases[info["family"]].add(info["base"])
                if info["profile"]:
                    profiles.append({"key": key, "base": info["base"], "profile": info["profile"]})
            out.append({
                "list": list_name, "index": i, "field": f"spec.{list_name}[{i}]",
                "name": str(ctr.get("name", "")), "group": _group(list_name, ctr), "container": ctr,
                "keys": keys, "families": families, "bases_of": bases_of,
                "claims": sorted(f for f, b in bases.items() if b),
                "bases": {f: sorted(b) for f, b in bases.items()}, "profiles": profiles,
            })
    return out


def pod_demand(containers: list[dict], table: Mapping, value: Value) -> dict[str, dict[str, Any]]:
    """The demand of the Pod whose :func:`pod_containers` are ``containers``: family -> base -> demand.

    ``exclusive`` and ``shared``: the accelerator count (bases with a count of 0 are left out);
    ``sliced``: the largest ``<base><slicedUnitsSuffix>`` of one container (0 when no container
    carries units yet: every sliced base is listed); ``partitioned``: the profile (bases naming none
    are left out). ``value`` converts a quantity (it may raise, naming container and key).
    """
    units_suffix = table["slicedUnitsSuffix"]
    app: dict[str, int] = {}
    init: dict[str, int] = {}
    shared: dict[str, int] = {}
    units: dict[str, int] = {}
    profiles: dict[str, str] = {}
    for c in containers:
        if c["group"] == "sidecar":
            continue
        # every key must parse
        values = {key: value(raw, c["container"], key) for key, raw in c["keys"].items()}
        for key, n in values.items():
            family, base = c["families"][key], c["bases_of"][key]
            if family == "exclusive" and c["group"] == "running":
                app[base] = app.get(base, 0) + n
            elif family == "exclusive":
                init[base] = max(init.get(base, 0), n)
            elif family == "shared":   # the family's one key, <base>.shared
                shared[base] = max(shared.get(base, 0), n)
            elif family == "sliced":
                units[base] = max(units.get(base, 0), n if key == base + units_suffix else 0)
        for p in c["profiles"]:
            profiles[p["base"]] = p["profile"]
    exclusive = {b: max(app.get(b, 0), init.get(b, 0)) for b in sorted(set(app) | set(init))}
    return {
        "exclusive": {b: n for b, n in exclusive.items() if n > 0},
        "shared": {b: n for b, n in sorted(shared.items()) if n > 0},
        "sliced": dict(sorted(units.items())),
        "partitioned": dict(sorted(profiles.items())),
    }
