"""Generate the reference pages under ``docs/reference/`` from the code, so they cannot drift.

One command writes all five pages (``make docs-gen`` or ``python -m docs.gen`` from the repository
root); ``python -m docs.gen --check`` writes nothing and exits 1 naming every stale page
(``tests/docs/test_generated.py`` runs it).

Sources, each read from the code itself:

- ``cli.md``: click's own help of every command and subcommand of :data:`runtime.cli.main`.
- ``rule-kinds.md`` (docs/genkinds.py): the pydantic models of ``runtime.model.rulefiles.SPEC_MODELS`` (the modules that
  register further kinds are imported first), with fields, types, defaults and descriptions, and the
  rule files under ``rules/`` that use each kind.
- ``settings.md``: the ``SettingCatalog`` of ``rules/settings.yaml``.
- ``crds.md``: every CustomResourceDefinition under ``crds/``.
- ``metrics.md``: every Prometheus collector the product defines: each ``runtime`` module that imports
  ``prometheus_client`` is imported, and every ``CollectorRegistry`` it holds (module-level, or made by
  one of its classes that build a ``registry`` with no arguments) is walked, plus the default registry's
  ``accelpolicy_`` collectors.

This file lives in docs/ and is not shipped in the wheel (pyproject includes only runtime, probes, rules).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

import click
import yaml

from docs.genbase import REFERENCE, REGENERATE, ROOT, WIDTH, cell as _cell, header as _header
from docs.genkinds import rule_kinds_page


# --- CLI -----------------------------------------------------------------------------------------
def _context(command: click.Command, name: str, parent) -> click.Context:
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    return click.Context(command, info_name=name, parent=parent, **settings)


def _walk_commands(command: click.Command, ctx: click.Context):
    yield command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            sub_ctx = _context(sub, name, ctx)
            yield from _walk_commands(sub, sub_ctx)


def cli_page() -> str:
    """The CLI reference: ``--help`` of every command of the ``accelpolicy`` click group, in name order, then
    the options still accepted under a former name."""
    from runtime.cli import main
    from runtime.cli.common import FORMER_NAMES_UNTIL, FormerName

    root = _context(main, "accelpolicy", None)
    out = [_header("runtime/cli (click's own help)"), "# CLI reference\n\n",
           "Every command's `--help`, as click prints it. Exit codes shared by every command: 0 success; "
           "1 a policy verdict said no (`admit` denied, a rule test failed), a named object was not found, "
           "or the API server could not be reached; 2 bad input, every problem named on stderr.\n\n"]
    renamed = []
    for command, ctx in _walk_commands(main, root):
        path = ctx.command_path
        out.append(f"## `{path}`\n\n```text\n{_help_of(command, ctx)}\n```\n\n")
        renamed += [(path, p.former, p.current) for p in command.params if isinstance(p, FormerName)]
    out.append(_renamed_section(renamed, FORMER_NAMES_UNTIL))
    return "".join(out).rstrip() + "\n"


def _renamed_section(renamed: list[tuple[str, str, str]], until: str) -> str:
    """The options a command still accepts under a former name (hidden from ``--help``), with the warning
    that names the new one."""
    rows = "".join(f"| `{path}` | `{former}` | `{current}` |\n" for path, former, current in sorted(renamed))
    return ("## Renamed options\n\n"
            f"A former name still works until accelpolicy {until}, with `warning: OLD is deprecated, "
            "use NEW` on stderr; giving both names of one option exits 2. The webhook options are one group, "
            "one name each, in `accelpolicy webhook`, `accelpolicy admission` and `accelpolicy controller`.\n\n"
            "| command | former name | name now |\n|---|---|---|\n" + rows + "\n")


def _help_of(command: click.Command, ctx: click.Context) -> str:
    """``command``'s help with defaults inside this checkout shown as ``<checkout>/...``, so the page
    is the same in every clone (click wraps around the shown text; the options are restored)."""
    saved = []
    for param in command.params:
        default = param.default
        if isinstance(default, (str, Path)) and str(default).startswith(str(ROOT) + "/"):
            saved.append((param, param.show_default))
            param.show_default = "<checkout>/" + Path(default).relative_to(ROOT).as_posix()
    try:
        return command.get_help(ctx).rstrip()
    finally:
        for param, show in saved:
            param.show_default = show


# --- settings ------------------------------------------------------------------------------------
def settings_page() -> str:
    """The settings reference from ``rules/settings.yaml`` (kind SettingCatalog)."""
    doc = yaml.safe_load((ROOT / "rules" / "settings.yaml").read_text())
    spec = doc["spec"]
    namespace = yaml.safe_load((ROOT / "rules" / "controller.yaml").read_text())["spec"]["systemNamespace"]
    out = [_header("rules/settings.yaml"), "# Settings\n\n",
           f"The settings live as raw strings in the Secret `{namespace}/{spec['secretName']}` "
           f"(namespace from env `{spec['namespaceEnv']}` when set); the controller adds every missing "
           f"default and mirrors each key into a `Setting` object of the same name. Booleans read "
           f"{', '.join(f'`{v}`' for v in spec['booleanTrue'])} as true and "
           f"{', '.join(f'`{v}`' for v in spec['booleanFalse'])} as false. How settings work: "
           "[Settings](../concepts/settings.md).\n\n",
           "| Name | Type | Default | Description |\n|---|---|---|---|\n"]
    for setting in spec["settings"]:
        out.append(f"| `{setting['name']}` | {setting['type']} | `{setting['default']}` | {_cell(setting.get('description', ''))} |\n")
    extra = {k: v for k, v in spec.items() if k not in {"namespace", "namespaceEnv", "secretName", "booleanTrue",
                                                       "booleanFalse", "settings"}}
    if extra:
        out.append("\nOther fields of the catalog:\n\n| Field | Value |\n|---|---|\n")
        for key, value in extra.items():
            out.append(f"| `{key}` | `{_cell(value)}` |\n")
    return "".join(out).rstrip() + "\n"


# --- CRDs ----------------------------------------------------------------------------------------
def _schema_rows(schema: dict, path: str, required: bool, rows: list) -> None:
    kind = schema.get("type", "")
    if kind == "array" and "items" in schema:
        kind = f"array of {schema['items'].get('type', 'object')}"
    notes = []
    if "enum" in schema:
        notes.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "format" in schema:
        notes.append(f"format {schema['format']}")
    for key in ("minimum", "maximum", "minLength", "maxLength", "pattern", "default"):
        if key in schema:
            notes.append(f"{key} `{schema[key]}`")
    if schema.get("x-kubernetes-int-or-string"):
        kind = "int-or-string"
    if path:
        desc = schema.get("description", "")
        rows.append(f"| `{path}` | {kind} | {'yes' if required else ''} | {_cell('; '.join(filter(None, [desc] + notes)))} |\n")
    needed = set(schema.get("required", []))
    for name, sub in (schema.get("properties") or {}).items():
        if not path and name in ("apiVersion", "kind", "metadata"):
            continue
        _schema_rows(sub, f"{path}.{name}" if path else name, name in needed, rows)
    if "items" in schema and schema["items"].get("properties"):
        for name, sub in schema["items"]["properties"].items():
            _schema_rows(sub, f"{path}[].{name}", name in set(schema["items"].get("required", [])), rows)
    add = schema.get("additionalProperties")
    if isinstance(add, dict) and (add.get("properties") or add.get("type")):
        if add.get("properties"):
            for name, sub in add["properties"].items():
                _schema_rows(sub, f"{path}.<key>.{name}", name in set(add.get("required", [])), rows)
        else:
            rows.append(f"| `{path}.<key>` | {add.get('type', '')} | | {_cell(add.get('description', ''))} |\n")


def crds_page() -> str:
    """The CRD field reference: names, scope, printer columns and every schema field of ``crds/*.yaml``."""
    out = [_header("crds/*.yaml"), "# CRD fields\n\n",
           "Our CustomResourceDefinitions (`crds/`) declare structure, types and enums only; the rules whose "
           "messages the spec defines are the admission webhooks'. Kueue's and NFD's CRDs come from their own "
           "Go modules and are not listed here.\n\n"]
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]
        names = spec["names"]
        out.append(f"## {names['kind']} (`{spec['group']}`)\n\n")
        out.append(f"File `crds/{path.name}`; scope {spec['scope']}; plural `{names['plural']}`"
                   + (f"; short names {', '.join(f'`{s}`' for s in names.get('shortNames', []))}" if names.get("shortNames") else "")
                   + (f"; categories {', '.join(f'`{c}`' for c in names.get('categories', []))}" if names.get("categories") else "")
                   + ".\n\n")
        for version in spec["versions"]:
            flags = [f for f in ("served", "storage") if version.get(f)]
            subres = ", ".join(sorted(version.get("subresources", {}) or {}))
            out.append(f"### {spec['group']}/{version['name']} ({', '.join(flags)}"
                       + (f"; subresources {subres}" if subres else "") + ")\n\n")
            columns = version.get("additionalPrinterColumns") or []
            if columns:
                out.append("`kubectl get` columns: "
                           + ", ".join(f"{c['name'].upper()} (`{c['jsonPath']}`)" for c in columns) + ".\n\n")
            schema = version["schema"]["openAPIV3Schema"]
            if schema.get("description"):
                out.append(f"{' '.join(schema['description'].split())}\n\n")
            rows: list = []
            _schema_rows(schema, "", False, rows)
            out.append("| Field | Type | Required | Description |\n|---|---|---|---|\n")
            out.extend(rows)
            out.append("\n")
    return "".join(out).rstrip() + "\n"


# --- metrics -------------------------------------------------------------------------------------
def _metric_modules() -> list[str]:
    import runtime

    names = []
    for info in pkgutil.walk_packages(runtime.__path__, "runtime."):
        spec = importlib.util.find_spec(info.name)
        origin = Path(spec.origin) if spec and spec.origin else None
        if origin and origin.suffix == ".py" and "prometheus_client" in origin.read_text():
            names.append(info.name)
    return sorted(names)


def _parameters(cls) -> set[str]:
    """The parameter names of ``cls``'s constructor (none known for a built-in one, e.g. an exception's)."""
    try:
        return set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        return set()


def _registries(module) -> list:
    from prometheus_client import CollectorRegistry

    found = []
    for _, value in vars(module).items():
        if isinstance(value, CollectorRegistry):
            found.append(value)
        elif inspect.isclass(value) and value.__module__ == module.__name__:
            fields = {f.name for f in dataclasses.fields(value)} if dataclasses.is_dataclass(value) else set()
            if "registry" in fields or "registry" in _parameters(value):
                try:
                    instance = value()
                except TypeError:
                    continue
                registry = getattr(instance, "registry", None)
                if isinstance(registry, CollectorRegistry):
                    found.append(registry)
    return found


def _described(collector) -> list[tuple[str, str, tuple, str, list]]:
    """(name, type, label names, help, histogram bounds) of a standard collector (its own fields) or of a
    custom one (the families its ``describe()`` returns, labels declared)."""
    name = getattr(collector, "_name", None)
    if name:
        bounds = [b for b in getattr(collector, "_upper_bounds", []) if b != float("inf")]
        return [(name, getattr(collector, "_type", ""), tuple(getattr(collector, "_labelnames", ())),
                 getattr(collector, "_documentation", ""), bounds if collector._type == "histogram" else [])]
    describe = getattr(collector, "describe", None)
    return [(f.name, f.type, tuple(getattr(f, "_labelnames", ())), f.documentation, [])
            for f in (describe() if describe else [])]


def metric_table() -> dict[str, tuple[str, tuple, str, list, str]]:
    """Every collector of the product's registries: name -> (type, label names, help, histogram bounds,
    defining module). Also read by the dashboard test (tests/deploy/test_dashboard.py)."""
    from prometheus_client import REGISTRY

    rows: dict[str, tuple] = {}
    for name in _metric_modules():
        module = importlib.import_module(name)
        for registry in _registries(module) + [REGISTRY]:
            for collector in list(getattr(registry, "_collector_to_names", {})):
                for metric_name, kind, labels, doc, bounds in _described(collector):
                    if registry is REGISTRY and not metric_name.startswith("accelpolicy_"):
                        continue
                    rows[metric_name] = (kind, labels, doc, bounds, name)
    return rows


def metrics_page() -> str:
    """The metrics reference: every collector of the product's registries (name, type, labels, help)."""
    rows = {}
    for metric_name, (kind, labels, doc, bounds, name) in metric_table().items():
        exposed = {"counter": f"{metric_name}_total", "histogram": f"{metric_name}_bucket, _sum, _count"}
        extra = " Buckets (s): " + ", ".join(f"{b:g}" for b in bounds) + "." if bounds else ""
        rows[metric_name] = (kind, exposed.get(kind, metric_name), ", ".join(f"`{label}`" for label in labels),
                             f"{doc}.{extra}", name)
    out = [_header("the prometheus_client registries of runtime/"), "# Metrics\n\n",
           "Served at `/metrics` (Prometheus text). `accelpolicy webhook`: the admission metrics. "
           "`accelpolicy admission`: the admission metrics and its own (`runtime.controller.admission`: its "
           "caches' and its view's), on its HTTPS port. "
           "`accelpolicy controller`: every metric below but the agent's (`runtime.agent.*`), over plain HTTP "
           "on `--metrics-bind-address` (default `:8080`) and, with `--webhook-port N`, on the webhook server "
           "too. `accelpolicy agent`: the agent's (`runtime.agent.metrics`), on `--health-port` (the "
           "DaemonSet's port). Views: `ex` accelerators, `sh` shares, `sl` VRAM percent, `pt` partitions, "
           "`cpu` cores. Guide: [Observability](../observability.md).\n\n",
           "| Metric | Type | Series | Labels | Help | Defined in |\n|---|---|---|---|---|---|\n"]
    for metric_name in sorted(rows):
        kind, exposed, labels, doc, module = rows[metric_name]
        out.append(f"| `{metric_name}` | {kind} | {_cell(exposed)} | {labels} | {_cell(doc)} | `{module}` |\n")
    return "".join(out).rstrip() + "\n"


PAGES = {
    "cli.md": cli_page,
    "rule-kinds.md": rule_kinds_page,
    "settings.md": settings_page,
    "crds.md": crds_page,
    "metrics.md": metrics_page,
}


def render() -> dict[Path, str]:
    """Every generated page: path under docs/reference/ -> its text."""
    return {REFERENCE / name: make() for name, make in PAGES.items()}


def stale() -> list[Path]:
    """The generated pages whose file differs from what the code gives now (missing ones included)."""
    return [path for path, text in render().items() if not path.exists() or path.read_text() != text]


def _shown(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docs.gen", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale page")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale()
        for path in bad:
            print(f"{_shown(path)} is stale: run `{REGENERATE}`", file=sys.stderr)
        return 1 if bad else 0
    REFERENCE.mkdir(parents=True, exist_ok=True)
    for path, text in render().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
